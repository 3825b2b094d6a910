"""A whole served launch, as a user runs it: the same script on every rank.

    mpirun -n 4 python served_job.py PARTS.json MODE
MODE: ok (trainers read features and degrees, print a checksum), raise (trainer 1
raises after the servers started serving).
"""
import sys

import numpy as np

import hpcgnn
from hpcgnn.graph import DistGraph, DistTensor, node_split

cfg, mode = sys.argv[1], sys.argv[2]
ctx = hpcgnn.initialize(layout="servers=1,samplers=0,trainers=1", ranks_per_node=2, part_config=cfg)
# from here on, only trainers run (servers serve inside initialize and exit)
assert ctx.is_trainer
g = DistGraph("g")
book = g.get_partition_book()
train = node_split(np.ones(g.num_nodes(), dtype=bool), book, rank=ctx.trainer_comm.Get_rank(),
                   num_trainers=ctx.trainer_comm.Get_size())
feat = g.ndata["feat"][train]
deg = g.in_degrees(train)
h = DistTensor((g.num_nodes(), 2), "float32", name="h")
h[train] = np.stack([deg.numpy(), deg.numpy()], 1).astype("float32")
h.barrier()
if mode == "raise" and ctx.rank == 3:
    raise RuntimeError("trainer failed mid-epoch")
total = float(h[np.arange(g.num_nodes())][:, 0].sum())  # every row was written by one trainer
if ctx.trainer_comm.Get_rank() == 0:
    print(f"sum of in-degrees {int(total)} over {g.num_edges()} edges; feat rows {tuple(feat.shape)}", flush=True)
