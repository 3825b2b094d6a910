"""Ghost vertices of a distributed CSR graph: the neighbours a rank's rows name that
other ranks own, and the exchange that brings their values over.

A rank's adjacency names vertices by global id.  A kernel that reads one value per
neighbour (a cluster label, a part) would need a table over every vertex of the
graph on every rank; with :class:`Ghosts` it reads a table of this rank's vertices
followed by its ghosts instead (``n + G`` entries, ``G`` at most the rank's distinct
remote neighbours).

:meth:`Ghosts.to_local` rewrites the adjacency in place into those table indices
(own vertex ``v`` -> ``v - lo``, the ``i``-th ghost -> ``n + i``) without a copy;
:meth:`Ghosts.to_global` rewrites it back.  Finding the ghosts marks them in a bitmap
over the graph's ids (1 bit per vertex, plus a count per 64: 0.25 bytes per vertex
of the whole graph, the one such table, held until :meth:`~Ghosts.to_local`).
:meth:`Ghosts.values` is one all-to-all (and an allreduce of its round count): each
owner sends the values of the vertices the others asked for once, when the ghosts
were found; :meth:`Ghosts.changed_values` sends only those of the vertices that changed.  The rewrites are compiled (``ext/src/label_prop.c``).
"""
from __future__ import annotations

import numpy as np

from .. import _ext
from .agree import agreed
from .alltoall import alltoallv_grouped, exchange_counts

#: Bitmap words turned into ids per step (bounds the temporaries: 8 MB of unpacked bits
#: and at most 64 MB of ids).
WORDS = 1 << 17


class Ghosts:
    """Collective: the ghosts of this rank's block ``vtxdist[rank]:vtxdist[rank+1]``
    of a graph whose adjacency ``adjncy`` holds global ids (int64), and the lists of
    this rank's vertices every other rank reads."""

    def __init__(self, comm, vtxdist, adjncy: np.ndarray):
        self.comm = comm
        rank, size = comm.Get_rank(), comm.Get_size()
        self.lo, self.hi = int(vtxdist[rank]), int(vtxdist[rank + 1])
        self.n = self.hi - self.lo
        N = int(vtxdist[-1])
        self._bits = np.zeros((N + 63) // 64, dtype=np.uint64)
        with agreed(comm):      # a bad id on one rank ends every rank
            bad = _ext.ghost_mark(adjncy, self.lo, self.hi, N, self._bits)
            if bad:
                raise ValueError(f"Ghosts: {bad} adjacency entries outside the graph's ids [0, {N}) (rank {rank})")
        self._before = np.empty(len(self._bits), dtype=np.int64)
        _ext.ghost_prefix(self._bits, self._before)
        #: sorted global ids of the ghosts: grouped by owner, owners in rank order
        self.ids = np.concatenate([np.empty(0, dtype=np.int64)] + [
            np.flatnonzero(np.unpackbits(self._bits[w:w + WORDS].view(np.uint8), bitorder="little")) + 64 * w
            for w in range(0, len(self._bits), WORDS)]).astype(np.int64, copy=False)
        if size == 1:
            self.recv_counts = self.send_counts = np.zeros(1, dtype=np.int64)
            self.send_idx = np.empty(0, dtype=np.int32)
            return
        bounds = np.asarray(vtxdist, dtype=np.int64)
        self.recv_counts = np.diff(np.searchsorted(self.ids, bounds)).astype(np.int64)
        self.send_counts = exchange_counts(comm, self.recv_counts)
        asked = alltoallv_grouped(comm, self.ids, self.recv_counts, self.send_counts)
        asked -= self.lo
        #: this rank's vertices (local index) the other ranks read, grouped by reader
        self.send_idx = asked.astype(np.int32) if self.n < 2**31 else asked
        del asked

    @property
    def size(self) -> int:
        """Entries of a table over this rank's vertices and its ghosts."""
        return self.n + (self._count if self.ids is None else len(self.ids))

    def to_local(self, adjncy: np.ndarray) -> np.ndarray:
        """Independent: rewrite global ids into table indices, in place (the adjacency
        the ghosts were found in, holding global ids); returns ``adjncy``.  Frees the
        bitmap: call it once."""
        if self._bits is None:
            raise RuntimeError("Ghosts.to_local: called twice")
        _ext.ghost_local(adjncy, self.lo, self.hi, self._bits, self._before)
        self._bits = self._before = None
        return adjncy

    def to_global(self, adjncy: np.ndarray) -> np.ndarray:
        """Independent: undo :meth:`to_local`, in place; returns ``adjncy``."""
        if self.ids is None:
            raise RuntimeError("Ghosts.to_global: the ghost ids were dropped")
        _ext.ghost_global(adjncy, self.lo, self.n, self.ids)
        return adjncy

    def drop_ids(self) -> None:
        """Free the ghosts' global ids (8 bytes each) once no :meth:`to_global` is to
        come; :meth:`values` and :attr:`size` keep working."""
        self._count, self.ids = len(self.ids), None

    def values(self, local: np.ndarray) -> np.ndarray:
        """Collective: the ghosts' values (in :attr:`ids` order), given this rank's
        ``local`` values (one per own vertex, any dtype)."""
        local = np.asarray(local)
        if self.comm.Get_size() == 1:
            return np.empty((0,) + local.shape[1:], dtype=local.dtype)
        send = np.ascontiguousarray(local[self.send_idx])
        return alltoallv_grouped(self.comm, send, self.send_counts, self.recv_counts)

    def changed_values(self, local: np.ndarray, changed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Collective: the values of the ghosts whose owners flag them in ``changed`` (one
        bool per own vertex): ``(their indices among the ghosts, in ids order, values)``.
        Sends only the flagged vertices, to the ranks that read them."""
        local = np.asarray(local)
        size = self.comm.Get_size()
        if size == 1:
            return np.empty(0, dtype=np.int64), np.empty((0,) + local.shape[1:], dtype=local.dtype)
        pos = np.flatnonzero(np.asarray(changed, dtype=bool)[self.send_idx])
        bounds = np.concatenate([[0], np.cumsum(self.send_counts)])
        dest = np.searchsorted(bounds, pos, side="right") - 1
        counts = np.bincount(dest, minlength=size).astype(np.int64)
        recv = exchange_counts(self.comm, counts)
        within = alltoallv_grouped(self.comm, (pos - bounds[dest]).astype(np.int64), counts, recv)
        vals = alltoallv_grouped(self.comm, np.ascontiguousarray(local[self.send_idx[pos]]), counts, recv)
        start = np.concatenate([[0], np.cumsum(self.recv_counts)[:-1]])
        return start[np.repeat(np.arange(size), recv)] + within, vals

