"""R-GCN node classification on a partitioned heterogeneous graph.

    mkdir -p runs/mag
    mpirun -n 2 hpcgnn generate runs/mag/mag.h5 --hetero --num-nodes 200000 --avg-degree 10 \
        --feat-dim 64 --num-classes 16
    mpirun -n 2 hpcgnn partition runs/mag/mag.h5 -o runs/mag/parts -k 2 --balance-ntypes train_mask
    mpirun -n 4 python examples/rgcn.py --part-config runs/mag/parts/mag.json \
        --layout servers=1,samplers=0,trainers=1 --ranks-per-node 2 --epochs 3 --run-dir runs/rgcn

Every rank runs this script (servers and samplers serve inside
``hpcgnn.initialize``).  The loop is ``hpcgnn/train/rgcn.py`` (also ``hpcgnn train
--task rgcn``); the model ``hpcgnn/train/hetero_model.py``.  ``--help`` lists the
settings.
"""
import sys

from hpcgnn.train.rgcn import main

if __name__ == "__main__":
    sys.exit(main())
