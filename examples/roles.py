"""Print the role of every rank, then end.

    mpirun -n 4 python examples/roles.py --layout servers=1,trainers=rest --ranks-per-node 2
"""
import argparse

import hpcgnn
import hpcgnn.comm

p = argparse.ArgumentParser()
p.add_argument("--layout", default=None)
p.add_argument("--ranks-per-node", type=int, default=None)
args = p.parse_args()

with hpcgnn.comm.initialize(layout=args.layout, ranks_per_node=args.ranks_per_node) as ctx:
    if ctx.rank == 0:
        print(ctx.describe(), flush=True)
    ctx.world.Barrier()
    print(ctx, flush=True)
