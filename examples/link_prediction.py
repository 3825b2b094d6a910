"""Link prediction with GraphSAGE and learnable node embeddings on a partitioned graph.

    mpirun -n 4 python examples/link_prediction.py --part-config parts/synthetic.json \
        --layout servers=1,samplers=0,trainers=1 --ranks-per-node 2 --epochs 3 --run-dir runs/lp

Every rank runs this script.  ``hpcgnn.initialize`` (inside ``run``) turns server
and sampler ranks into services; trainers train the dense model (GraphSAGE encoder
+ edge scorer) with DDP and a ``DistEmbedding`` row per node with
``SparseAdagrad``, on ``DistEdgeDataLoader`` batches with uniform negatives.
Held-out edges (a hash of the edge id) are ranked against random destinations at
the end: ``test MRR`` and ``test hits@10``.  The loop is
``hpcgnn/train/link_prediction.py``: read it to adapt the model or the loop.
``--help`` lists every setting; ``--config FILE.toml`` reads them from a file.
"""
import sys

from hpcgnn.train.link_prediction import main

if __name__ == "__main__":
    sys.exit(main())
