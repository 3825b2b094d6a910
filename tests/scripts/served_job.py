"""A whole served launch, as a user runs it: the same script on every rank.

    mpirun -n 4 python served_job.py PARTS.json MODE
MODE: ok (trainers read features and degrees, print a checksum), raise (trainer 1
raises after the servers started serving).  Both run one PyG layer on each trainer
(PyG writes its generated modules: hpcgnn sends them to a private directory, printed).
"""
import sys

import numpy as np
import torch

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
from torch_geometric.nn import SAGEConv        # noqa: E402 - loaded after initialize, as a user's model may be
import hpcgnn.pyg_tmp                          # noqa: E402

SAGEConv(3, 2)(torch.randn(4, 3), torch.tensor([[0, 1], [1, 2]]))
print("made", hpcgnn.pyg_tmp.private_dir(create=False), flush=True)
if mode == "raise" and ctx.rank == 3:
    raise RuntimeError("trainer failed mid-epoch")
total = float(h[np.arange(g.num_nodes())][:, 0].sum())  # every row was written by one trainer
if ctx.trainer_comm.Get_rank() == 0:
    print(f"sum of in-degrees {int(total)} over {g.num_edges()} edges; feat rows {tuple(feat.shape)}", flush=True)
