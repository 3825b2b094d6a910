"""Node classification with GraphSAGE on a partitioned graph.

    mpirun -n 4 python examples/node_classification.py --part-config parts/synthetic.json \
        --layout servers=1,samplers=0,trainers=1 --ranks-per-node 2 --epochs 3 --run-dir runs/nc

Every rank runs this script.  ``hpcgnn.initialize`` (inside ``run``) turns server
and sampler ranks into services; trainers train with DDP over the trainer ranks.
The training loop itself is ``hpcgnn/train/node_classification.py`` (the same code
``hpcgnn train`` runs): read it to adapt the model or the loop.  ``--help`` lists
every setting; ``--config FILE.toml`` reads them from a file.
"""
import sys

from hpcgnn.train.node_classification import main

if __name__ == "__main__":
    sys.exit(main())
