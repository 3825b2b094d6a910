"""Point-to-point traffic between trainers and sampler ranks: requests and batches.

A *frame* is a small picklable header followed by NumPy arrays sent as raw
buffers (no pickling of the data: the receiver allocates each array from the
header and receives into it).  Frames between two ranks on one tag arrive in the
order they were sent (MPI's non-overtaking rule), header before its arrays.

Requests (trainer -> sampler) are small pickled tuples on :data:`REQ_TAG`; a
sampler polls for them and for the leader's control commands without blocking
(:meth:`BatchChannel.poll_request`), because it must keep producing batches while
nothing arrives.  Everything runs on a duplicate of the world communicator.
"""
from __future__ import annotations

import numpy as np

from . import watchdog
from .mpi import MPI

REQ_TAG = 0x4851
#: Frames of loader ``lid`` travel on tag ``FRAME_TAG + lid``.
FRAME_TAG = 0x5000


class BatchChannel:
    """Collective over ``ctx.world`` to create and to :meth:`free`."""

    def __init__(self, ctx):
        self.comm = ctx.world.Dup()
        self.rank = ctx.rank

    # -- requests -------------------------------------------------------------
    def request(self, dest: int, msg: tuple) -> None:
        """Send a small request to ``dest`` (returns once it is buffered or received)."""
        self.comm.send(msg, dest=dest, tag=REQ_TAG)

    def poll_request(self):
        """The next request from any rank, or ``None`` (does not block)."""
        m = self.comm.improbe(source=MPI.ANY_SOURCE, tag=REQ_TAG)
        return None if m is None else m.recv()

    # -- frames ----------------------------------------------------------------
    def send_frame(self, dest: int, lid: int, header, arrays: list[np.ndarray]) -> list:
        """Start sending ``header`` and ``arrays`` to ``dest``; returns the requests
        (keep the arrays alive until they complete)."""
        tag = FRAME_TAG + lid
        meta = [(a.dtype.str, a.shape) for a in arrays]
        reqs = [self.comm.isend((header, meta), dest=dest, tag=tag)]
        for a in arrays:
            if a.size:
                reqs.append(self.comm.Isend(a.reshape(-1).view(np.uint8), dest=dest, tag=tag))
        return reqs

    def recv_frame(self, source: int, lid: int):
        """Receive the next frame of loader ``lid`` from ``source``: ``(header, arrays)``."""
        tag = FRAME_TAG + lid
        with watchdog.waiting(f"a batch from sampler rank {source}", (source,)):   # world ranks (a Dup)
            header, meta = self.comm.recv(source=source, tag=tag)
            arrays = []
            for dt, shape in meta:
                a = np.empty(shape, dtype=np.dtype(dt))
                if a.size:
                    self.comm.Recv(a.reshape(-1).view(np.uint8), source=source, tag=tag)
                arrays.append(a)
        return header, arrays

    @staticmethod
    def done(reqs: list) -> bool:
        """Whether every request of one :meth:`send_frame` has completed."""
        return MPI.Request.Testall(reqs) if reqs else True

    def free(self) -> None:
        if self.comm is not None:
            self.comm.Free()
            self.comm = None
