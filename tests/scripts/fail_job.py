"""A small MPI job for the failure tests: one rank misbehaves, the others wait in a
collective that the bad rank never enters.  Usage: fail_job.py MODE [RANK], MODE one of
raise, exit-early, plain-torch."""
import sys

import hpcgnn
import hpcgnn.comm
from hpcgnn.comm.mpi import MPI

mode = sys.argv[1]
bad = int(sys.argv[2]) if len(sys.argv) > 2 else 1
world = MPI.COMM_WORLD
rank = world.Get_rank()

if mode == "plain-torch":               # a DGL script's own torch.distributed start
    ctx = hpcgnn.initialize(layout="servers=1,samplers=0,trainers=1", ranks_per_node=2)
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend="gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    print(f"rank {rank} allreduce {t.item():.0f} of {dist.get_world_size()}", flush=True)
    dist.destroy_process_group()
    print(f"rank {rank} finished", flush=True)
    MPI.Finalize()                      # and an mpi4py habit: MPI.Finalize(), without ctx.finalize()
    sys.exit(0)

if mode == "exit-early":
    # a served launch: the servers serve until the trainers finish
    ctx = hpcgnn.initialize(layout="servers=1,samplers=0,trainers=1", ranks_per_node=2)
    if rank == bad:
        sys.exit(0)                       # this trainer's script ends here
    ctx.trainer_comm.Barrier()            # the other trainer waits for it forever
    ctx.finalize()
    print(f"rank {rank} finished", flush=True)
    sys.exit(0)

ctx = hpcgnn.comm.initialize(layout="servers=1,samplers=0,trainers=1", ranks_per_node=2)
if rank == bad and mode == "raise":
    raise ValueError("trainer exploded")
world.Barrier()  # the others wait here forever unless the job is aborted
ctx.finalize()
print(f"rank {rank} finished", flush=True)
