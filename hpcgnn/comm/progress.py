"""How ranks that serve others wait: polling MPI, sleeping only while nothing moves.

A server's memory is read and written by other ranks one-sidedly.  Over shared memory
and RDMA networks that needs nothing of the server, but over TCP (Open MPI's osc
pt2pt) every request aimed at it is handled only while it is inside an MPI call, and
a large transfer needs many such calls to push its fragments through the socket.
A blocking receive would call MPI continuously, but Open MPI's blocking receive spins
on a core, and on a node with fewer cores than ranks that core is the trainers'.

:class:`IdleBackoff` is the compromise both servers and sampler ranks use:

* after work, or when the process moved bytes through a socket since the last poll
  (:class:`SocketTraffic`: MPI's TCP transport reading a request or writing a
  reply), it polls again at once, and keeps polling for ``linger_s`` (50 us) without
  reading the counters again, so a transfer's fragments follow each other closely;
* otherwise it sleeps, from 10 us up to ``max_s`` (1 ms), in ``select(2)`` on the
  process's sockets (:class:`SocketWait`): a request arriving over TCP ends the sleep
  at once, instead of waiting out the rest of it.
"""
from __future__ import annotations

import os
import select
import time

IO_PATH = "/proc/self/io"
FD_DIR = "/proc/self/fd"


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
        # the file starts "rchar: N\nwchar: M\n": two fields in 0.3 us (a dict of
        # every line took 2.7 us, on a server's path during each transfer)
        p = raw.split(None, 4)
        if len(p) >= 4 and p[0] == b"rchar:" and p[2] == b"wchar:":
            return int(p[1]) + int(p[3]) - self._own
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


class SocketWait:
    """Sleep until one of this process's sockets has bytes to read, or a timeout.

    The sockets are found in ``/proc/self/fd`` (MPI's TCP connections and listening
    sockets among them; MPI does not say which are its own) and found again at most
    every ``rescan_s`` seconds, or at the first sleep after activity (MPI opens
    connections lazily).  A socket that ended a sleep while MPI then moved no bytes
    (one read by another thread, or closed by its peer) is left out until the next
    scan, so it cannot turn sleeping into spinning.  Without ``/proc`` (or with no
    sockets) it sleeps plainly.  Independent; for one thread at a time."""

    def __init__(self, rescan_s: float = 1.0, fd_dir: str = FD_DIR):
        self.rescan_s = float(rescan_s)
        self.fd_dir = fd_dir
        self._fds: list[int] = []
        self._scanned = float("-inf")
        self._ignored: set[int] = set()
        self._woke: set[int] = set()          # sockets that ended the last sleep
        self._rescan_soon = True
        self.wakeups = 0                      # sleeps ended by a readable socket

    def _scan(self) -> None:
        fds = []
        try:
            names = os.listdir(self.fd_dir)
        except OSError:
            names = []
        for name in names:
            try:
                if os.readlink(f"{self.fd_dir}/{name}").startswith("socket:"):
                    fds.append(int(name))
            except (OSError, ValueError):
                continue
        self._fds = fds
        self._ignored.clear()
        self._woke.clear()
        self._scanned = time.monotonic()
        self._rescan_soon = False

    def activity(self) -> None:
        """The caller had work or saw bytes move: the last wake-up was real."""
        self._woke.clear()
        self._rescan_soon = True

    @property
    def sockets(self) -> list[int]:
        return [f for f in self._fds if f not in self._ignored]

    def sleep(self, timeout: float) -> bool:
        """Sleep at most ``timeout`` seconds; True when a readable socket ended it."""
        now = time.monotonic()
        if now - self._scanned > self.rescan_s or (self._rescan_soon and now - self._scanned > 0.05):
            self._scan()
        self._ignored |= self._woke           # woke us, yet nothing moved since
        self._woke = set()
        fds = self.sockets
        if not fds:
            time.sleep(timeout)
            return False
        try:
            if max(fds) < 1024:               # select's fd_set; microsecond timeouts
                ready = select.select(fds, [], [], timeout)[0]
            else:                             # poll: millisecond timeouts
                p = select.poll()
                for f in fds:
                    p.register(f, select.POLLIN)
                ready = [f for f, _ in p.poll(max(1, int(timeout * 1e3 + 0.999)))]
        except (OSError, ValueError):         # a socket closed under us: look again
            self._scanned = float("-inf")
            time.sleep(timeout)
            return False
        if ready:
            self.wakeups += 1
            self._woke = set(ready)
        return bool(ready)


class IdleBackoff:
    """Call once per poll with whether the poll found work: polls on at once after
    work or socket traffic (and for ``linger_s`` after them without looking at the
    counters), else sleeps twice as long as last time (``min_s`` up to ``max_s``) in
    :class:`SocketWait`, so that bytes arriving end the sleep.
    ``polls_with_traffic`` counts the polls that went on at once because bytes moved
    (for tests and benchmarks)."""

    def __init__(self, max_s: float = 1e-3, min_s: float = 1e-5, watch_sockets: bool = True,
                 linger_s: float = 5e-5):
        self.max_s, self.min_s, self.linger_s = float(max_s), float(min_s), float(linger_s)
        self.traffic = SocketTraffic() if watch_sockets else None
        self.sockets = SocketWait() if watch_sockets else None
        self.idle = 0.0
        self.polls_with_traffic = 0
        self._linger_until = 0.0

    def __call__(self, busy: bool) -> None:
        now = time.perf_counter()
        if not busy:
            if now < self._linger_until:
                return                       # a transfer is under way: poll on
            if self.traffic is not None and self.traffic.moved():
                self.polls_with_traffic += 1
                busy = True
        if busy:
            self.idle = 0.0
            self._linger_until = now + self.linger_s
            if self.sockets is not None:
                self.sockets.activity()
            return
        self.idle = min(self.max_s, self.idle * 2 or self.min_s)
        if self.sockets is not None:
            self.sockets.sleep(self.idle)
        else:
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
