"""Moving edges to the rank that holds their owner endpoint, the per-partition CSR and
the halo.

With ``edge_dir="in"`` an edge is stored with its destination ("owner endpoint"),
with ``"out"`` with its source; the CSR rows are the owner endpoints, the column
indices the other endpoints (new global ids).  Inside a partition, edges are ordered
by edge type (typed graphs), then by owner endpoint, then by original edge id, and
numbered in that order: edge ``j`` of partition ``p``'s ``indices`` has global id
``edge_start[p] + j``; each edge type is one contiguous range of a partition.
"""
from __future__ import annotations

import numpy as np

from .arrays import stable_argsort, unique

from ..comm.alltoall import alltoallv, alltoallv_consume
from .assign import owner_of
from .relabel import IdLayout


class LocalEdges:
    """Collective constructor: this rank's stored edges, sorted, with their new ids.

    ``own``/``other``: new ids of the endpoints; ``orig_eid``; ``cols``: moved edge
    columns (name -> array); ``seg[p]:seg[p+1]``: positions of partition ``p``'s edges;
    ``edge_layout``: an :class:`IdLayout` of edge ids; ``eid``: new id of each edge.
    """

    def __init__(self, comm, nodes: IdLayout, ends: list, first_eid: int, cols: dict, num_etypes: int = 1,
                 etype_col: str = "edge_type", keep_orig_eid: bool = True) -> None:
        """``ends``: ``[own, other]``, consumed (the list ends empty, each array released
        once sent); this rank's edges have original ids ``first_eid, first_eid + 1, ...``;
        ``cols``: edge columns, consumed alike (the dict ends empty).  Without
        ``keep_orig_eid`` the original ids order the edges and are dropped
        (``orig_eid`` is None: 8 bytes per edge less)."""
        names = sorted(cols)
        ne = len(ends[0])
        sent = ends[:] + [np.arange(first_eid, first_eid + ne, dtype=np.int64)] + [cols.pop(n) for n in names]
        ends.clear()
        got = alltoallv_consume(comm, sent, nodes.rank_of)
        own, other, orig_eid = got[0], got[1], got[2]
        moved = dict(zip(names, got[3:]))
        del got
        P, Te, Tn = nodes.nparts, int(num_etypes), nodes.types
        self.num_etypes, self.per_etype = Te, Te * Tn
        # bins (partition, edge type, owner's node type): inside a bin, edges follow their
        # owner's global order, so every rank's slice of a bin is one contiguous run
        typed = Te * Tn > 1
        if typed:
            nbin = owner_of(nodes.bin_start, own)
            ebin = ((nbin // Tn) * Te + (moved[etype_col].astype(np.int64) if Te > 1 else 0)) * Tn + nbin % Tn
            del nbin
            span = max(nodes.total, 1)
            if P * Te * Tn * span < 1 << 62:         # (bin, owner) as one int64 key
                order = _order_by(ebin * span + own, orig_eid)
            else:
                order = np.lexsort((orig_eid, own, ebin))
            ebin = ebin[order]
        else:
            order = _order_by(own, orig_eid)
        self.own = own[order]                    # one array at a time: one extra copy at the peak
        del own
        self.other = other[order]
        del other
        self.orig_eid = orig_eid[order] if keep_orig_eid else None
        del orig_eid
        self.cols = {}
        for n in names:
            self.cols[n] = moved.pop(n)[order]
        del order
        B = P * self.per_etype
        if typed:
            self.bseg = np.append(np.searchsorted(ebin, np.arange(B), side="left"), len(self.own)).astype(np.int64)
            del ebin
        else:
            self.bseg = np.append(np.searchsorted(self.own, nodes.start[:P], side="left"),
                                  len(self.own)).astype(np.int64)
        self.seg = self.bseg[::self.per_etype].copy()          # partition p: positions seg[p]:seg[p+1]
        self.edge_layout = IdLayout(comm, np.diff(self.bseg), types=self.per_etype)
        el = self.edge_layout
        self.eid = np.empty(len(self.own), dtype=np.int64)
        for b in range(B):
            a, c = self.bseg[b], self.bseg[b + 1]
            self.eid[a:c] = el.bin_slice(b)[0] + np.arange(c - a)
        self.nodes = nodes
        self._by_own = None

    def indptr_runs(self, p: int):
        """This rank's pieces of partition ``p``'s ``indptr`` (``num_etypes * n + 1``
        entries; row ``t * n + i``: first edge of type ``t`` of inner node ``i``):
        ``(row, values)`` pairs, local offsets, the closing entry excluded."""
        nodes, el, Te, Tn = self.nodes, self.edge_layout, self.num_etypes, self.nodes.types
        n, ps = nodes.part_size(p), int(nodes.start[p])
        for t in range(Te):
            for nt in range(Tn):
                b = (p * Te + t) * Tn + nt
                lo, hi = nodes.bin_slice(p * Tn + nt)
                if hi > lo:
                    own = self.own[self.bseg[b]:self.bseg[b + 1]]
                    yield t * n + lo - ps, np.searchsorted(own, np.arange(lo, hi), side="left") + el.bin_offset(b)

    def bin_runs(self, p: int):
        """``(row in partition p's edge arrays, slice of local positions)`` per bin."""
        for b in range(p * self.per_etype, (p + 1) * self.per_etype):
            yield self.edge_layout.bin_offset(b), slice(int(self.bseg[b]), int(self.bseg[b + 1]))

    def type_ranges(self, t: int) -> list[list[int]]:
        """``[[start, end), ...]`` of edge type ``t`` in every partition (global ids)."""
        Tn, bs = self.nodes.types, self.edge_layout.bin_start
        return [[int(bs[(p * self.num_etypes + t) * Tn]), int(bs[(p * self.num_etypes + t + 1) * Tn])]
                for p in range(self.nodes.nparts)]

    def part_edges(self, p: int) -> slice:
        return slice(int(self.seg[p]), int(self.seg[p + 1]))

    def cut_counts(self) -> np.ndarray:
        """Per partition: stored edges whose other endpoint is outside the partition."""
        P = self.nodes.nparts
        out = np.zeros(P, dtype=np.int64)
        for p in range(P):
            o = self.other[self.part_edges(p)]
            out[p] = np.count_nonzero((o < self.nodes.start[p]) | (o >= self.nodes.start[p + 1]))
        return out

    def rows(self, ids: np.ndarray):
        """Independent: CSR rows of (locally held) owner endpoints ``ids``:
        (degree of each id, other endpoints, edge ids) concatenated in ``ids`` order."""
        own = self.own
        if self.per_etype > 1:      # etype-major storage: look up through an owner order
            if self._by_own is None:
                self._by_own = stable_argsort(self.own)
            own = self.own[self._by_own]
        a = np.searchsorted(own, ids, side="left")
        b = np.searchsorted(own, ids, side="right")
        deg = (b - a).astype(np.int64)
        pos = np.repeat(a - (np.cumsum(deg) - deg), deg) + np.arange(int(deg.sum()))
        if self.per_etype > 1:
            pos = self._by_own[pos]
        return deg, self.other[pos], self.eid[pos]


class Halo:
    """Collective constructor: halo nodes of every partition up to ``num_hops`` hops.

    Halo entries ``(p, id)`` are spread over ranks by blocks of the id space
    (``hbounds``), so that each rank holds, per partition, a sorted run of halo ids,
    and concatenating the ranks' runs gives the sorted halo of the partition.
    Hop ``k + 1`` nodes are the other endpoints of the stored edges of hop ``k`` nodes
    (asked of the rank that stores them) that are neither inner nor already halo.

    ``ids[p]``, ``hops[p]``: this rank's run of partition ``p``; ``layout``: the
    :class:`IdLayout` of the runs.  With ``num_hops > 1`` also ``deg[p]``, ``nbr[p]``,
    ``nbr_eid[p]``: the stored edges of those nodes (none for last-hop nodes), and
    ``edge_layout``.
    """

    def __init__(self, comm, edges: LocalEdges, num_hops: int) -> None:
        nodes = edges.nodes
        P, R, n = nodes.nparts, comm.Get_size(), nodes.total
        self.hbounds = np.array([r * n // R for r in range(R + 1)], dtype=np.int64)
        parts = np.repeat(np.arange(P, dtype=np.int64), np.diff(edges.seg))
        key = _outside_keys(nodes, parts, edges.other, n)
        del parts
        (key,) = alltoallv(comm, owner_of(self.hbounds, key % n), key)
        key = unique(key)
        hop = np.ones(len(key), dtype=np.int8)
        fetched = []
        for k in range(1, num_hops):
            frontier = key[hop == k]
            deg, nbr, neid = _fetch_rows(comm, edges, frontier % n)
            fetched.append((frontier, deg, nbr, neid))
            cand = _outside_keys(nodes, np.repeat(frontier // n, deg), nbr, n)
            (cand,) = alltoallv(comm, owner_of(self.hbounds, cand % n), cand)
            cand = _setdiff_sorted(unique(cand), key)
            key = np.concatenate([key, cand])
            hop = np.concatenate([hop, np.full(len(cand), k + 1, dtype=np.int8)])
            order = stable_argsort(key)
            key, hop = key[order], hop[order]
        cuts = np.searchsorted(key // n, np.arange(P + 1), side="left")
        self.ids = [key[cuts[p]:cuts[p + 1]] % n for p in range(P)]
        self.hops = [hop[cuts[p]:cuts[p + 1]] for p in range(P)]
        self.layout = IdLayout(comm, np.diff(cuts))
        self.with_edges = num_hops > 1
        if not self.with_edges:
            return
        deg_all = np.zeros(len(key), dtype=np.int64)
        owner_pos, nbrs, eids = [], [], []
        for frontier, deg, nbr, neid in fetched:
            pos = np.searchsorted(key, frontier)
            deg_all[pos] = deg
            owner_pos.append(np.repeat(pos, deg))
            nbrs.append(nbr)
            eids.append(neid)
        order = stable_argsort(np.concatenate(owner_pos))
        nbr_all = np.concatenate(nbrs)[order]
        eid_all = np.concatenate(eids)[order]
        ecuts = np.concatenate([[0], np.cumsum(deg_all)])[cuts]
        self.deg = [deg_all[cuts[p]:cuts[p + 1]] for p in range(P)]
        self.nbr = [nbr_all[ecuts[p]:ecuts[p + 1]] for p in range(P)]
        self.nbr_eid = [eid_all[ecuts[p]:ecuts[p + 1]] for p in range(P)]
        self.edge_layout = IdLayout(comm, np.diff(ecuts))


def _outside_keys(nodes: IdLayout, parts: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """Sorted unique keys ``p * n + id`` of the ids outside their partition ``p``."""
    outside = (ids < nodes.start[parts]) | (ids >= nodes.start[parts + 1])
    return unique(parts[outside] * n + ids[outside])


def _fetch_rows(comm, edges: LocalEdges, ids: np.ndarray):
    """Collective: (degree, other endpoints, edge ids) of the owner endpoints ``ids``,
    asked of the ranks storing them; neighbors concatenated in ``ids`` order."""
    R = comm.Get_size()
    dest = edges.nodes.rank_of(ids)
    (req,), counts = alltoallv(comm, dest, ids, return_counts=True)
    src_rank = np.repeat(np.arange(R), counts)
    deg, nbr, neid = edges.rows(req)
    # Answers come back grouped by responder in request order: aligned with ids[order].
    (deg_s,) = alltoallv(comm, src_rank, deg)
    nbr_s, eid_s = alltoallv(comm, np.repeat(src_rank, deg), nbr, neid)
    order = stable_argsort(dest)
    deg_out = np.empty(len(ids), dtype=np.int64)
    deg_out[order] = deg_s
    start_out = np.empty(len(ids), dtype=np.int64)
    start_out[order] = np.cumsum(deg_s) - deg_s
    total = int(deg_out.sum())
    pos = np.repeat(start_out - (np.cumsum(deg_out) - deg_out), deg_out) + np.arange(total)
    return deg_out, nbr_s[pos], eid_s[pos]


def _setdiff_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Values of sorted unique ``a`` not in sorted unique ``b``."""
    if len(b) == 0:
        return a
    pos = np.minimum(np.searchsorted(b, a), len(b) - 1)
    return a[b[pos] != a]


def _order_by(major: np.ndarray, minor: np.ndarray) -> np.ndarray:
    """Order sorting by ``major`` then ``minor`` (non-negative int64; pairs unique)."""
    if len(major) == 0:
        return np.zeros(0, dtype=np.int64)
    if len(minor) < 2 or bool(np.all(minor[1:] > minor[:-1])):
        return stable_argsort(major)     # minor already ascends (received edges: original ids in order)
    span = int(minor.max()) + 1
    if int(major.max()) < (np.iinfo(np.int64).max - span) // span:
        return stable_argsort(major * span + minor)
    return np.lexsort((minor, major))
