"""Who every rank of the job is, and whether a rank on this host still runs.

:func:`record` (collective, from initialize) keeps each world rank's role, node,
host and process id.  When a rank loses a peer (a connection reset, a wait that
ran past ``HPCGNN_TIMEOUT``), :func:`describe` names that peer, and
:func:`troubled` finds the ranks on this host whose process is gone or stopped, so
that the first line a user reads names the rank that failed rather than the
survivor's own secondary error.  Ranks on other hosts cannot be looked at from
here; their host-mates name them.
"""
from __future__ import annotations

import os
import socket
import time

from .mpi import MPI

#: world rank -> (role, node, host, pid); empty before initialize
TABLE: dict[int, tuple] = {}


def record(world, role: str, node) -> None:
    """Collective over ``world``: learn every rank's role, node, host and pid."""
    me = (MPI.COMM_WORLD.Get_rank(), role, node, socket.gethostname(), os.getpid())
    TABLE.update({r: rest for r, *rest in world.allgather(me)})


def state(rank: int) -> str | None:
    """``"gone"`` (no process), ``"stopped"`` (SIGSTOP, a debugger), ``"running"``,
    or None when the rank is on another host or unknown."""
    entry = TABLE.get(rank)
    if entry is None or entry[2] != socket.gethostname():
        return None
    try:
        with open(f"/proc/{entry[3]}/stat") as f:
            code = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"
    return {"Z": "gone", "X": "gone", "T": "stopped", "t": "stopped"}.get(code, "running")


def describe(rank: int, as_state: str | None = None) -> str:
    """``rank R (role, node K, host H)``, and ``, its process is gone`` (or
    stopped) when it is on this host and not running (``as_state``: say that state
    instead of looking, for a line written later by a thread without the GIL)."""
    entry = TABLE.get(rank)
    if entry is None:
        return f"rank {rank}"
    role, node, host, _ = entry
    tail = {"gone": ", whose process is gone", "stopped": ", whose process is stopped (SIGSTOP?)"}.get(
        as_state or state(rank), "")
    return f"rank {rank} ({_where(role, node, host)}){tail}"


def _where(role, node, host) -> str:
    """``role, node K, host H`` (no node for a command's ranks, which have none)."""
    return f"{role}, host {host}" if node in ("-", "?") else f"{role}, node {node}, host {host}"


def my_rank() -> int | None:
    """This process's world rank (None outside an MPI job's life)."""
    return MPI.COMM_WORLD.Get_rank() if MPI.Is_initialized() and not MPI.Is_finalized() else None


def host_mates() -> dict[int, int]:
    """World rank -> process id of every other rank on this host."""
    me, host = my_rank(), socket.gethostname()
    return {r: entry[3] for r, entry in sorted(TABLE.items()) if r != me and entry[2] == host}


def troubled(among=None) -> list[int]:
    """Ranks on this host (of ``among``, default all) whose process is gone or stopped."""
    me = my_rank()
    ranks = sorted(TABLE) if among is None else sorted(among)
    return [r for r in ranks if r != me and state(r) in ("gone", "stopped")]


def me() -> str:
    """This rank, as :func:`describe` names it (without a state: it runs)."""
    if not MPI.Is_initialized():
        return f"pid {os.getpid()}"
    rank = MPI.COMM_WORLD.Get_rank()
    entry = TABLE.get(rank)
    return f"rank {rank}" if entry is None else f"rank {rank} ({_where(*entry[:3])})"


class Watch:
    """Ranks of some roles on this host, looked at while this rank works (a trainer's
    steps): :meth:`failed` gives one whose process is gone, or stopped (SIGSTOP, a
    node stuck) for ``limit_s`` seconds or more, else None.  Reads ``/proc`` at most
    every ``every_s`` seconds.  A server read through shared memory never makes a
    trainer wait, so without this a frozen or killed server went unnoticed."""

    def __init__(self, roles: tuple, limit_s: float, every_s: float = 0.2) -> None:
        self.ranks = sorted(r for r, entry in TABLE.items() if entry[0] in roles)
        self.limit_s, self.every_s = float(limit_s), float(every_s)
        self.last = float("-inf")
        self.stopped_since: dict[int, float] = {}

    def failed(self) -> int | None:
        now = time.monotonic()
        if not self.ranks or now - self.last < self.every_s:
            return None
        self.last = now
        bad = troubled(self.ranks)
        for r in list(self.stopped_since):
            if r not in bad:
                del self.stopped_since[r]          # running again
        for r in bad:
            if state(r) == "gone" or now - self.stopped_since.setdefault(r, now) >= self.limit_s:
                return r
        return None
