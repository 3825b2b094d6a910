"""How ranks that serve others wait: polling MPI, sleeping only while nothing moves.

A server's memory is read and written by other ranks one-sidedly.  Over shared memory
and RDMA networks that needs nothing of the server, but over TCP (Open MPI's osc
pt2pt) every request aimed at it is handled only while it is inside an MPI call, and
a large transfer needs many such calls to push its fragments through the socket.
A blocking receive would call MPI continuously, but Open MPI's blocking receive spins
on a core, and on a node with fewer cores than ranks that core is the trainers'.

:class:`IdleBackoff` is the compromise both servers and sampler ranks use: between
polls they sleep, from 10 us up to ``max_s`` (1 ms) while nothing happens, and go
straight back to polling when they had work or when the process moved bytes through
a socket since the last poll (:class:`SocketTraffic`: MPI's TCP transport reading a
request or writing a reply).  A remote gather over TCP then waits for the server at
most once (its first request), not once per fragment.
"""
from __future__ import annotations

import os
import time

IO_PATH = "/proc/self/io"


class SocketTraffic:
    """Whether this process read or wrote bytes through system calls since the last
    :meth:`moved` (Linux's per-process I/O counters, ``rchar + wchar`` of
    ``/proc/self/io``; the counters' own reads are subtracted).  They count the
    ``read``/``write`` family (Open MPI's TCP transport uses ``readv``/``writev``), not
    ``send``/``recv``, and any file I/O of the process too.  Where the file cannot be
    read, :meth:`moved` is always False (the caller then just backs off).
    Independent; for one thread at a time."""

    def __init__(self, path: str = IO_PATH):
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except OSError:
            self._fd = None
        self._own = 0              # bytes this object read from the counters' file
        self._last = self._total() if self._fd is not None else 0

    @property
    def available(self) -> bool:
        return self._fd is not None

    def _total(self) -> int:
        raw = os.pread(self._fd, 512, 0)
        self._own += len(raw)
        fields = dict(line.split(b":", 1) for line in raw.splitlines() if b":" in line)
        return int(fields[b"rchar"]) + int(fields[b"wchar"]) - self._own

    def moved(self) -> bool:
        if self._fd is None:
            return False
        try:
            now = self._total()
        except (OSError, KeyError, ValueError):
            self.close()
            return False
        moved, self._last = now != self._last, now
        return moved

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class IdleBackoff:
    """Call once per poll with whether the poll found work: sleeps nothing after work
    or socket traffic, else twice as long as last time (10 us up to ``max_s``).
    ``polls_with_traffic`` counts the polls that went on at once because bytes moved
    (for tests and benchmarks)."""

    def __init__(self, max_s: float = 1e-3, min_s: float = 1e-5, watch_sockets: bool = True):
        self.max_s, self.min_s = float(max_s), float(min_s)
        self.traffic = SocketTraffic() if watch_sockets else None
        self.idle = 0.0
        self.polls_with_traffic = 0

    def __call__(self, busy: bool) -> None:
        if self.traffic is not None and self.traffic.moved() and not busy:
            self.polls_with_traffic += 1
            busy = True
        if busy:
            self.idle = 0.0
            return
        self.idle = min(self.max_s, self.idle * 2 or self.min_s)
        time.sleep(self.idle)

    def close(self) -> None:
        if self.traffic is not None:
            self.traffic.close()


def serve_until(request, max_s: float = 1e-3) -> int:
    """Wait for an MPI ``request`` (e.g. an ``Ibarrier``) the way servers wait for
    commands: test it, keeping MPI progressing for one-sided traffic aimed at this rank,
    with an :class:`IdleBackoff` between tests.  Returns the number of polls that went
    on at once because bytes moved through a socket.  Independent."""
    wait = IdleBackoff(max_s)
    try:
        while not request.Test():
            wait(False)
        return wait.polls_with_traffic
    finally:
        wait.close()
