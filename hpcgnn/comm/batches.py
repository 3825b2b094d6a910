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

import time

import numpy as np

from . import peers, watchdog
from .rma.datatypes import MAX_OP_BYTES
from .mpi import MPI

REQ_TAG = 0x4851
#: Frames of loader ``lid`` travel on tag ``FRAME_TAG + lid``.
FRAME_TAG = 0x5000


#: Largest message: an array of more bytes goes as several (MPI counts are C ``int``).
MAX_MESSAGE_BYTES = MAX_OP_BYTES


def _pieces(a: np.ndarray) -> list[np.ndarray]:
    """The bytes of C-contiguous ``a`` as views of at most ``MAX_MESSAGE_BYTES`` each,
    in order (sender and receiver cut alike; messages on one tag keep their order)."""
    b = a.reshape(-1).view(np.uint8)
    step = max(1, int(MAX_MESSAGE_BYTES))
    return [b[i:i + step] for i in range(0, len(b), step)]


class BatchChannel:
    """Collective over ``ctx.world`` to create and to :meth:`free`."""

    def __init__(self, ctx):
        self.comm = ctx.world.Dup()
        self.rank = ctx.rank
        self._cut_short: list = []           # receives of frames whose sampler died mid-frame

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
            for piece in _pieces(a):
                reqs.append(self.comm.Isend(piece, dest=dest, tag=tag))
        return reqs

    def recv_frame(self, source: int, lid: int):
        """Receive the next frame of loader ``lid`` from ``source``: ``(header, arrays)``,
        or None once ``source`` is a rank of this host whose process is gone, before
        or during the frame (it will never come whole: the caller makes do without
        it).  A gone sampler is this wait's to find, not the watchdog's (the trainer
        makes its batches); the time limit still applies."""
        tag = FRAME_TAG + lid
        with watchdog.waiting(f"a batch from sampler rank {source}", (source,), gone_ok=True):  # world ranks
            if not self._arrived(lambda: self.comm.iprobe(source=source, tag=tag), source):
                return None
            header, meta = self.comm.recv(source=source, tag=tag)      # small: here once probed
            arrays = [np.empty(shape, dtype=np.dtype(dt)) for dt, shape in meta]
            reqs = [self.comm.Irecv(piece, source=source, tag=tag) for a in arrays for piece in _pieces(a)]
            if not self._arrived(lambda: MPI.Request.Testall(reqs), source, spin=True):
                self._cut_short.append((reqs, arrays))   # never completed: their buffers stay alive
                return None
        return header, arrays

    @staticmethod
    def _arrived(test, source: int, spin: bool = False) -> bool:
        """Poll ``test()`` until it is true (True), or until ``source`` is gone (False).
        Waiting for a frame: at once first, then every ms at most.  With ``spin``
        (a frame's arrays in flight, whose transfer each test drives) without sleeping,
        as a blocking receive would, looking at ``source`` every ms."""
        pause, looked = 0.0, time.monotonic()
        while not test():
            if spin:
                now = time.monotonic()
                if now - looked >= 1e-3:
                    if peers.state(source) == "gone":
                        return False
                    looked = now
                time.sleep(0)
                continue
            if peers.state(source) == "gone":
                return False
            pause = min(2 * pause or 1e-5, 1e-3)
            time.sleep(pause)
        return True

    @staticmethod
    def done(reqs: list) -> bool:
        """Whether every request of one :meth:`send_frame` has completed."""
        return MPI.Request.Testall(reqs) if reqs else True

    def free(self) -> None:
        if self.comm is not None:
            self.comm.Free()
            self.comm = None
