"""A small MPI job for the failure tests: one rank misbehaves, the others wait in a
collective that the bad rank never enters.  Usage: fail_job.py MODE [RANK]."""
import sys
import time

import hpcgnn
import hpcgnn.comm
from hpcgnn.comm.mpi import MPI

mode = sys.argv[1]
bad = int(sys.argv[2]) if len(sys.argv) > 2 else 1
world = MPI.COMM_WORLD
rank = world.Get_rank()

if mode == "raise-before-init" and rank == bad:
    raise RuntimeError("broken before initialize")
if mode == "raise-before-init":
    world.Barrier()
    sys.exit(0)

if mode in ("served", "plain-torch"):
    ctx = hpcgnn.initialize(layout="servers=1,samplers=0,trainers=1", ranks_per_node=2)
    if mode == "plain-torch":           # a DGL script's own torch.distributed start
        import torch
        import torch.distributed as dist

        dist.init_process_group(backend="gloo")
        t = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(t)
        print(f"rank {rank} allreduce {t.item():.0f} of {dist.get_world_size()}", flush=True)
        dist.destroy_process_group()
    print(f"rank {rank} finished", flush=True)
    if mode == "plain-torch":           # and an mpi4py habit: MPI.Finalize(), without ctx.finalize()
        MPI.Finalize()
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
if rank == bad:
    if mode == "raise":
        raise ValueError("trainer exploded")
    if mode == "thread":
        import threading

        t = threading.Thread(target=lambda: 1 / 0)
        t.start()
        t.join()
        time.sleep(60)
world.Barrier()  # the others wait here forever unless the job is aborted
ctx.finalize()
print(f"rank {rank} finished", flush=True)
