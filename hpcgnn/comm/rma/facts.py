"""What a :class:`~hpcgnn.comm.rma.rowstore.RowStore` is, read without MPI: its row
ranges, their owners, the routes to them, whether it is freed."""
from __future__ import annotations

import numpy as np

from ...errors import InputError
from .rowchecks import DIRECT, SHM, WORLD

#: The name of each route (``RowStore.routes``).
ROUTE_NAMES = {DIRECT: "direct", SHM: "shm-rma", WORLD: "rma"}


class RowFacts:
    """Read-only facts of a ``RowStore`` (set by its constructor: ``_bounds``,
    ``_owners``, ``_route``, ``_local_ranges``, ``_freed``, ``_views``; ``_readable()``
    its own)."""

    @property
    def bounds(self) -> np.ndarray:
        """The row ranges' boundaries (int64, ``len(owners) + 1``): range ``k`` is rows
        ``bounds[k]:bounds[k+1]``."""
        return self._bounds

    @property
    def owners(self) -> np.ndarray:
        """The world rank owning each row range."""
        return self._owners

    @property
    def freed(self) -> bool:
        """Whether :meth:`free` ran (the rows are gone)."""
        return self._freed

    @property
    def local_range(self) -> tuple[int, int]:
        """``(start, stop)`` of the rows this rank owns (its ranges must be adjacent
        for this to be one slice; ``(0, 0)`` when it owns none)."""
        if len(self._local_ranges) == 0:
            return (0, 0)
        return (int(self._bounds[self._local_ranges[0]]), int(self._bounds[self._local_ranges[-1] + 1]))

    def routes(self) -> dict[int, str]:
        """How this rank reaches every owner: ``{owner rank: 'direct'|'shm-rma'|'rma'}``."""
        return {int(o): ROUTE_NAMES[int(r)] for o, r in zip(self._owners, self._route)}

    def direct_views(self) -> list[tuple[int, int, np.ndarray]]:
        """Local: ``(start, stop, rows)`` of every row range this process reads in place
        (its own, and those of its host's shared memory), ``rows`` the array over that
        memory (writes show through): what a GPU maps to read this host's rows itself."""
        self._check_open()
        bounds, direct, _ = self._readable()
        return [(int(bounds[k]), int(bounds[k + 1]), self._views[k]) for k in np.flatnonzero(direct)
                if k in self._views]

    def __repr__(self):
        return (f"RowStore({self.name!r}, shape={self.shape}, dtype={self.dtype}, "
                f"ranges={len(self._owners)}, rank={self.rank})")

    def _check_open(self):
        if self._freed:
            raise InputError(f"{self.where}: the table has been freed")
