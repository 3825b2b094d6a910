"""The partition book: which partition owns a node or edge id, from a few boundaries.

Partition ``p`` owns the new node ids ``[node_start[p], node_start[p+1])`` and edge
ids ``[edge_start[p], edge_start[p+1])`` (one range per type; a homogeneous graph
has the single types ``_N`` and ``_E``).  Lookups are ``searchsorted`` over the
``P + 1`` boundaries: nothing here is the size of the graph.
"""
from __future__ import annotations

import importlib
import sys

import numpy as np


def _torch():
    """torch, imported on first use (the partitioning ranks never load it), or None."""
    try:
        return importlib.import_module("torch")
    except ImportError:  # pragma: no cover
        return None


def _is_torch(x) -> bool:
    torch = sys.modules.get("torch")      # a tensor means torch is loaded already
    return torch is not None and isinstance(x, torch.Tensor)


def _np(ids) -> np.ndarray:
    if _is_torch(ids):
        ids = ids.detach().cpu().numpy()
    return np.asarray(ids, dtype=np.int64)


def _like(result, ids):
    """``result`` as a torch tensor when ``ids`` was one (DGL's convention), else NumPy."""
    if isinstance(result, tuple):
        return tuple(_like(r, ids) for r in result)
    return _torch().from_numpy(np.ascontiguousarray(result)) if _is_torch(ids) else result


def _tensor(ids: np.ndarray):
    """``ids`` as a torch tensor (DGL's convention) when torch is installed."""
    torch = _torch()
    return ids if torch is None else torch.from_numpy(ids)


class _TypedRanges:
    """Ids of one kind (nodes or edges): bins ``b = p * T + t`` in that order, each
    one contiguous range; ``starts[b]`` its first id."""

    def __init__(self, config: dict, key: str, types_key: str, where: str) -> None:
        m = config.get(key)
        if not isinstance(m, dict) or not m:
            raise ValueError(f"{where}: key '{key}' must map type names to [[start, end], ...]")
        order = config.get(types_key)
        names = sorted(m, key=lambda k: order[k]) if isinstance(order, dict) and set(order) == set(m) \
            else list(m)
        try:
            r = np.stack([np.asarray(m[k], dtype=np.int64).reshape(-1, 2) for k in names], axis=1)  # [P, T, 2]
        except ValueError as e:
            raise ValueError(f"{where}: key '{key}' must give [start, end] per partition for every type ({e})") \
                from e
        flat = r.reshape(-1, 2)
        if len(flat) and (flat[0, 0] != 0 or np.any(flat[1:, 0] != flat[:-1, 1])
                          or np.any(flat[:, 1] < flat[:, 0])):
            raise ValueError(f"{where}: key '{key}' ranges are not contiguous from 0 (partition-major, then "
                             f"type): {r.tolist()}")
        self.names, self.T, self.P = names, len(names), r.shape[0]
        self.starts = np.append(flat[:, 0], flat[-1, 1] if len(flat) else 0).astype(np.int64)
        self.counts = r[:, :, 1] - r[:, :, 0]                               # [P, T]
        self.offsets = np.zeros((self.P + 1, self.T), dtype=np.int64)     # per-type id of each bin's first
        np.cumsum(self.counts, axis=0, out=self.offsets[1:])
        self.part_ranges = np.stack([r[:, 0, 0], r[:, -1, 1]], axis=1) if self.P else np.zeros((0, 2), np.int64)

    def type_id(self, name, what: str) -> int:
        if name not in self.names:
            raise ValueError(f"unknown {what} type {name!r}; this partition book has {self.names}")
        return self.names.index(name)

    def to_per_type(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        b = np.searchsorted(self.starts, ids, side="right") - 1
        t = b % self.T
        return t, self.offsets[b // self.T, t] + ids - self.starts[b]

    def to_homo(self, ids: np.ndarray, t: int, what: str) -> np.ndarray:
        total = int(self.offsets[-1, t])
        if ids.size and (ids.min() < 0 or ids.max() >= total):
            raise ValueError(f"{what} ids of type {self.names[t]!r} outside [0, {total})")
        p = np.searchsorted(self.offsets[:, t], ids, side="right") - 1
        return self.starts[p * self.T + t] + ids - self.offsets[p, t]




class RangePartitionBook:
    """Independent: node/edge ownership of a partitioned graph (DGL's ``RangePartitionBook``).

    Built from the partition configuration (the JSON as a dict) and this process's
    partition id.  ``node_ranges`` / ``edge_ranges``: int64 arrays ``[P, 2]`` of
    ``[start, end)``.  Lookups given a torch tensor return torch tensors (int64),
    given anything else NumPy arrays; ``partid2nids``/``partid2eids`` return torch
    tensors, as DGL's do.  ``ntype``/``etype`` arguments (DGL's) make the ids
    per-type ids of that type; without them they are homogeneous ids.
    """

    def __init__(self, config: dict, part_id: int) -> None:
        where = f"partition config '{config.get('graph_name', '?')}'"
        self._n = _TypedRanges(config, "node_map", "ntypes", where)
        self._e = _TypedRanges(config, "edge_map", "etypes", where)
        self.node_ranges, self.edge_ranges = self._n.part_ranges, self._e.part_ranges
        num_parts = int(config.get("num_parts", len(self.node_ranges)))
        if len(self.node_ranges) != num_parts or len(self.edge_ranges) != num_parts:
            raise ValueError(f"{where}: node_map/edge_map have {len(self.node_ranges)}/{len(self.edge_ranges)} "
                             f"ranges, num_parts is {num_parts}")
        if not 0 <= int(part_id) < num_parts:
            raise ValueError(f"{where}: part_id {part_id} outside [0, {num_parts})")
        self._partid = int(part_id)
        self._nb = np.append(self.node_ranges[:, 0], self.node_ranges[-1, 1]) if num_parts else np.zeros(1, np.int64)
        self._eb = np.append(self.edge_ranges[:, 0], self.edge_ranges[-1, 1]) if num_parts else np.zeros(1, np.int64)
        self.graph_name = config.get("graph_name")
        self._parts_meta = config.get("parts", [])

    # -- DGL's API -------------------------------------------------------------------
    def num_partitions(self) -> int:
        return len(self.node_ranges)

    @property
    def partid(self) -> int:
        return self._partid

    @property
    def num_nodes(self) -> int:
        return int(self._nb[-1])

    @property
    def num_edges(self) -> int:
        return int(self._eb[-1])

    def metadata(self) -> list[dict]:
        """Per partition: ``machine_id`` (the partition id), ``num_nodes``, ``num_edges``."""
        return [{"machine_id": p, "num_nodes": int(n[1] - n[0]), "num_edges": int(e[1] - e[0])}
                for p, (n, e) in enumerate(zip(self.node_ranges, self.edge_ranges))]

    @staticmethod
    def _lookup(bounds: np.ndarray, ids, what: str) -> np.ndarray:
        ids = _np(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= bounds[-1]):
            raise ValueError(f"{what} ids outside [0, {int(bounds[-1])})")
        return np.searchsorted(bounds, ids, side="right") - 1

    def _homo_n(self, ids, ntype):
        return _np(ids) if ntype is None else self.map_to_homo_nid(_np(ids), ntype)

    def _homo_e(self, ids, etype):
        return _np(ids) if etype is None else self.map_to_homo_eid(_np(ids), etype)

    def nid2partid(self, nids, ntype=None):
        """Partition owning each node id (int64)."""
        return _like(self._lookup(self._nb, self._homo_n(nids, ntype), "node"), nids)

    def eid2partid(self, eids, etype=None):
        """Partition owning each edge id (int64)."""
        return _like(self._lookup(self._eb, self._homo_e(eids, etype), "edge"), eids)

    def _part(self, partid) -> int:
        p = int(partid)
        if not 0 <= p < self.num_partitions():
            raise ValueError(f"partition {p} outside [0, {self.num_partitions()})")
        return p

    def _span(self, kind: str, partid, tname) -> tuple[int, int]:
        """``[start, end)`` of the ids partition ``partid`` owns: every node (edge) id,
        or the per-type ids of ``tname``."""
        p = self._part(partid)
        if tname is None:
            s, e = (self.node_ranges if kind == "node" else self.edge_ranges)[p]
            return int(s), int(e)
        b = self.type_offsets(kind, tname)
        return int(b[p]), int(b[p + 1])

    def partid2nids(self, partid: int, ntype=None):
        """The node ids partition ``partid`` owns (per-type ids of ``ntype`` when given),
        a torch tensor."""
        s, e = self._span("node", partid, ntype)
        return _tensor(np.arange(s, e, dtype=np.int64))

    def partid2eids(self, partid: int, etype=None):
        """The edge ids partition ``partid`` owns (per-type ids of ``etype`` when given),
        a torch tensor."""
        s, e = self._span("edge", partid, etype)
        return _tensor(np.arange(s, e, dtype=np.int64))

    def nid2localnid(self, nids, partid: int, ntype=None):
        """Row of each (owned) node id in partition ``partid``'s node arrays; with
        ``ntype``, of each per-type id among the partition's nodes of that type."""
        return _like(_np(nids) - self._span("node", partid, ntype)[0], nids)

    def eid2localeid(self, eids, partid: int, etype=None):
        """Position of each (owned) edge id in partition ``partid``'s edge arrays (per
        type with ``etype``, as :meth:`nid2localnid`)."""
        return _like(_np(eids) - self._span("edge", partid, etype)[0], eids)

    # -- type mapping -----------------------------------------------------------------
    def map_to_per_ntype(self, ids):
        """``(type ids, per-type ids)`` of homogeneous node ids.  Per-type ids number
        the nodes of a type partition by partition (DGL's convention)."""
        a = _np(ids)
        self._lookup(self._nb, a, "node")
        return _like(self._n.to_per_type(a), ids)

    def map_to_per_etype(self, ids):
        """Edge counterpart of :meth:`map_to_per_ntype`."""
        a = _np(ids)
        self._lookup(self._eb, a, "edge")
        return _like(self._e.to_per_type(a), ids)

    def map_to_homo_nid(self, ids, ntype: str):
        """Homogeneous node ids of per-type ids of ``ntype``."""
        return _like(self._n.to_homo(_np(ids), self.ntype_id(ntype), "node"), ids)

    def map_to_homo_eid(self, ids, etype):
        """Homogeneous edge ids of per-type ids of ``etype`` (see :meth:`etype_id`)."""
        return _like(self._e.to_homo(_np(ids), self.etype_id(etype), "edge"), ids)

    def ntype_id(self, ntype: str) -> int:
        return self._n.type_id(ntype, "node")

    def etype_id(self, etype) -> int:
        """Index of an edge type given as canonical triple, ``"src:rel:dst"`` or a
        relation name that names one type."""
        if isinstance(etype, str) and etype.count(":") == 2:
            etype = tuple(etype.split(":"))
        if isinstance(etype, (tuple, list)):
            triple = tuple(str(x) for x in etype)
            if triple in self.canonical_etypes:
                return self.canonical_etypes.index(triple)
            etype = ":".join(triple)
        if etype in self._e.names:
            return self._e.names.index(etype)
        hits = [i for i, c in enumerate(self.canonical_etypes) if c[1] == etype]
        if len(hits) == 1:
            return hits[0]
        raise ValueError(f"edge type {etype!r} is ambiguous: give the canonical triple" if hits else
                         f"unknown edge type {etype!r}; this partition book has {self._e.names}")

    def type_ranges(self, ntype: str) -> np.ndarray:
        """``[P, 2]``: homogeneous ``[start, end)`` of ``ntype`` in every partition."""
        t, T = self.ntype_id(ntype), self._n.T
        return np.stack([self._n.starts[t:-1:T], self._n.starts[t + 1::T]], axis=1)

    def etype_ranges(self, etype) -> np.ndarray:
        """``[P, 2]``: homogeneous edge id ranges of ``etype`` in every partition."""
        t, T = self.etype_id(etype), self._e.T
        return np.stack([self._e.starts[t:-1:T], self._e.starts[t + 1::T]], axis=1)

    def type_offsets(self, kind: str, tname) -> np.ndarray:
        """``P + 1`` boundaries of the per-type ids of one node (``kind="node"``) or
        edge type: partition ``p`` owns per-type ids ``[b[p], b[p+1])``."""
        if kind == "node":
            return self._n.offsets[:, self.ntype_id(tname)].copy()
        return self._e.offsets[:, self.etype_id(tname)].copy()

    def num_nodes_of(self, ntype: str) -> int:
        return int(self._n.offsets[-1, self.ntype_id(ntype)])

    def num_edges_of(self, etype) -> int:
        return int(self._e.offsets[-1, self.etype_id(etype)])

    @property
    def node_type_boundaries(self) -> np.ndarray:
        """``P * T + 1`` boundaries of the (partition, node type) ranges."""
        return self._n.starts.copy()

    @property
    def edge_type_boundaries(self) -> np.ndarray:
        return self._e.starts.copy()

    @property
    def node_boundaries(self) -> np.ndarray:
        """``P + 1`` node id boundaries (partition ``p``: ``[b[p], b[p+1])``)."""
        return self._nb.copy()

    @property
    def edge_boundaries(self) -> np.ndarray:
        """``P + 1`` edge id boundaries."""
        return self._eb.copy()

    @property
    def ntypes(self) -> list[str]:
        return list(self._n.names)

    @property
    def etypes(self) -> list[str]:
        """Edge type names: canonical ``"src:rel:dst"`` (``_E`` for an untyped graph)."""
        return list(self._e.names)

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        out = []
        for name in self._e.names:
            parts = name.split(":")
            out.append(tuple(parts) if len(parts) == 3 else (self._n.names[0], name, self._n.names[0]))
        return out

    @property
    def is_homogeneous(self) -> bool:
        return self._n.T == 1 and self._e.T == 1

    def __repr__(self) -> str:
        return (f"RangePartitionBook(graph={self.graph_name!r}, parts={self.num_partitions()}, "
                f"partid={self._partid}, nodes={self.num_nodes}, edges={self.num_edges})")
