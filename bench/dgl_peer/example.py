"""Run one of DGL's own example scripts, unchanged, as an emulated machine of
``run.py --example``: all machines share one host address, so the machine a process
belongs to comes from ``HPCGNN_PEER_MACHINE`` (as in train.py), then the script runs
as ``__main__`` with the remaining arguments.  DGL's examples (master) name the
loaders ``dgl.distributed.DistNodeDataLoader``; DGL 2.1 has them in
``dgl.dataloading`` only, so they are given both names here.

    python bench/dgl_peer/example.py SCRIPT.py [the script's flags]
"""
import os
import runpy
import sys

import dgl
import dgl.distributed.rpc_client as rpc_client

for name in ("DistNodeDataLoader", "DistEdgeDataLoader"):        # DGL 2.1: dgl.dataloading's only
    if not hasattr(dgl.distributed, name):
        setattr(dgl.distributed, name, getattr(dgl.dataloading, name))

machine = int(os.environ.get("HPCGNN_PEER_MACHINE", "0"))
rpc_client.get_local_machine_id = lambda namebook: machine       # one host, emulated machines
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
