"""Resident memory of the ranks: the high-water mark each phase reports in its JSON.

``peak_rss_bytes()`` is this process's high-water mark (``getrusage``'s ``ru_maxrss``,
Linux's ``VmHWM``): it never falls, so a phase's value is the peak of everything up to
the end of that phase.  ``current_rss_bytes()`` is what is resident now.  Pages of a
shared-memory window count in the RSS of every rank that touched them, so the sum
over the ranks of one host counts node-shared tables once per rank that mapped them.
"""
from __future__ import annotations

import os
import resource

import numpy as np

from . import watchdog

_PAGE = os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """This process's resident-memory high-water mark, in bytes."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def current_rss_bytes() -> int:
    """This process's resident memory now, in bytes (``/proc/self/statm``)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except OSError:                      # not Linux: the high-water mark is the best we have
        return peak_rss_bytes()


def rss_summary(comm) -> dict:
    """Collective: every rank's peak and current RSS, their maximum and their sum."""
    peaks = [int(v) for v in comm.allgather(peak_rss_bytes())]
    now = [int(v) for v in comm.allgather(current_rss_bytes())]
    return {"peak_rss_bytes_per_rank": peaks, "peak_rss_bytes_max_rank": max(peaks),
            "peak_rss_bytes_sum": sum(peaks), "rss_bytes_now_sum": sum(now)}


def role_summary(world, role: str, roles: tuple) -> dict:
    """Collective over ``world``: per role, its ranks' count, the sum and the maximum of
    their peak RSS (``{"server": {"ranks": 2, "peak_rss_bytes_sum": ..., ...}, ...}``).
    ``roles``: every role's name (this rank's is ``role``).  A buffer ``Allgather``
    under the watchdog: a rank gone at this point ends the job after ``HPCGNN_TIMEOUT``."""
    mine = np.array([roles.index(role), peak_rss_bytes()], dtype=np.int64)
    every = np.empty((world.Get_size(), 2), dtype=np.int64)
    with watchdog.waiting("every rank's peak memory at the end of the run"):
        world.Allgather(mine, every)
    out: dict = {}
    for r, peak in every.tolist():
        d = out.setdefault(roles[r], {"ranks": 0, "peak_rss_bytes_sum": 0, "peak_rss_bytes_max": 0})
        d["ranks"] += 1
        d["peak_rss_bytes_sum"] += int(peak)
        d["peak_rss_bytes_max"] = max(d["peak_rss_bytes_max"], int(peak))
    return out
