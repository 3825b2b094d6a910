"""Helpers shared by the training loops: reductions over the trainers, RNG state,
and a DDP hook timing the gradient allreduce."""
from __future__ import annotations

import random
import time

import numpy as np
import torch

from ..comm.mpi import LOCK, MPI


def allreduce(tc, values, op=MPI.SUM) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    out = np.empty_like(a)
    with LOCK:
        tc.Allreduce(a, out, op=op)
    return out


def allsum(tc, values) -> np.ndarray:
    return allreduce(tc, values, MPI.SUM)


class AllreduceTimer:
    """A DDP communication hook that times the (overlapped) gradient allreduce."""

    def __init__(self):
        self.seconds = 0.0

    def hook(self, state, bucket):
        import torch.distributed as dist

        t0 = time.perf_counter()
        buf = bucket.buffer()
        buf.div_(dist.get_world_size())
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f):
            self.seconds += time.perf_counter() - t0
            return f.value()[0]
        return fut.then(done)


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])
