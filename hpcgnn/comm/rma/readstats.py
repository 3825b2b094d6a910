"""How fast rows come from each other host: the one-sided reads that cross hosts,
timed per owner host (bytes, seconds, the slowest read), for a trainer's epoch log
and the warning that names a link that became slow.

:func:`add` is called by :class:`~hpcgnn.comm.rma.rowstore.RowStore` for every gather
that read rows of another host (holding :data:`hpcgnn.comm.mpi.LOCK`, as every
gather does); :func:`take` hands this process's totals over and starts new ones;
:func:`gather_links` puts every trainer's together (collective); :class:`LinkWatch`
compares each link with its own first epoch.
"""
from __future__ import annotations

from ..mpi import LOCK
from .. import peers

#: owner host -> [bytes, seconds, slowest read in seconds, reads]
_stats: dict[str, list] = {}

#: a link read at under 1/SLOWER of its first epoch's rate is reported
SLOWER = 3.0
#: ... when it carried at least this many reads in the epoch (a few say little)
MIN_READS = 10


def add(owner_rank: int, nbytes: int, seconds: float) -> None:
    """Record one gather's rows from ``owner_rank``'s host (called with LOCK held)."""
    entry = peers.TABLE.get(int(owner_rank))
    host = entry[2] if entry is not None else f"rank {owner_rank}"
    s = _stats.setdefault(host, [0, 0.0, 0.0, 0])
    s[0] += int(nbytes)
    s[1] += seconds
    s[2] = max(s[2], seconds)
    s[3] += 1


def add_all(reads: list, seconds: float) -> None:
    """:func:`add` for each ``(owner_rank, nbytes)`` of one gather that took ``seconds``."""
    for owner, nbytes in reads:
        add(owner, nbytes, seconds)


def take() -> dict[str, list]:
    """This process's totals since the last call, by owner host; then zero."""
    with LOCK:
        out = {h: list(v) for h, v in _stats.items()}
        _stats.clear()
    return out


def gather_links(comm, mine: dict[str, list]) -> dict[str, dict]:
    """Collective over ``comm`` (the trainers): every trainer's totals as links
    ``"reader host -> owner host"``: ``{"mb", "mb_per_s", "slowest_s", "reads"}``."""
    me = peers.TABLE.get(peers.my_rank() if peers.my_rank() is not None else -1, (None, None, "?"))[2]
    with LOCK:
        every = comm.allgather((me, mine))
    links: dict[str, list] = {}
    for host, theirs in every:
        for owner, (b, s, worst, n) in theirs.items():
            t = links.setdefault(f"{host} -> {owner}", [0, 0.0, 0.0, 0])
            t[0] += b
            t[1] += s
            t[2] = max(t[2], worst)
            t[3] += n
    return {k: {"mb": round(b / 1e6, 3), "mb_per_s": round(b / 1e6 / s, 2) if s > 0 else None,
                "slowest_s": round(worst, 4), "reads": n} for k, (b, s, worst, n) in sorted(links.items())}


class LinkWatch:
    """Each link's read rate against its own first epoch's: :meth:`check` returns one
    line per link now :data:`SLOWER` times slower (each link reported once)."""

    def __init__(self):
        self.first: dict[str, tuple[int, float]] = {}
        self.told: set[str] = set()

    def check(self, epoch: int, links: dict[str, dict]) -> list[str]:
        lines = []
        for link, v in links.items():
            rate = v["mb_per_s"]
            if rate is None or v["reads"] < MIN_READS:
                continue
            if link not in self.first:
                self.first[link] = (epoch, rate)
                continue
            e0, r0 = self.first[link]
            if rate * SLOWER < r0 and link not in self.told:
                self.told.add(link)
                lines.append(f"hpcgnn: reads over {link} ran at {rate:g} MB/s in epoch {epoch}, "
                             f"{r0 / rate:.0f}x slower than in epoch {e0} ({r0:g} MB/s; slowest read "
                             f"{v['slowest_s']:g} s): a degraded link?")
        return lines
