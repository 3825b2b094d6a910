"""The partition book: which partition owns a node or edge id, from a few boundaries.

Partition ``p`` owns the new node ids ``[node_start[p], node_start[p+1])`` and edge
ids ``[edge_start[p], edge_start[p+1])`` (one range per type; a homogeneous graph
has the single types ``_N`` and ``_E``).  Lookups are ``searchsorted`` over the
``P + 1`` boundaries: nothing here is the size of the graph.
"""
from __future__ import annotations

import numpy as np


def _ranges(d: dict, key: str, where: str) -> tuple[str, np.ndarray]:
    m = d.get(key)
    if not isinstance(m, dict) or len(m) != 1:
        raise ValueError(f"{where}: key '{key}' must map one type name to [[start, end], ...] "
                         "(heterogeneous partition books come with issue 4)")
    (tname, rng), = m.items()
    r = np.asarray(rng, dtype=np.int64).reshape(-1, 2)
    if len(r) and (r[0, 0] != 0 or np.any(r[1:, 0] != r[:-1, 1]) or np.any(r[:, 1] < r[:, 0])):
        raise ValueError(f"{where}: key '{key}' ranges are not contiguous from 0: {r.tolist()}")
    return tname, r


class RangePartitionBook:
    """Independent: node/edge ownership of a partitioned graph (DGL's ``RangePartitionBook``).

    Built from the partition configuration (the JSON as a dict) and this process's
    partition id.  ``node_ranges`` / ``edge_ranges``: int64 arrays ``[P, 2]`` of
    ``[start, end)``.
    """

    def __init__(self, config: dict, part_id: int) -> None:
        where = f"partition config '{config.get('graph_name', '?')}'"
        self.ntype, self.node_ranges = _ranges(config, "node_map", where)
        self.etype, self.edge_ranges = _ranges(config, "edge_map", where)
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
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= bounds[-1]):
            raise ValueError(f"{what} ids outside [0, {int(bounds[-1])})")
        return np.searchsorted(bounds, ids, side="right") - 1

    def nid2partid(self, nids) -> np.ndarray:
        """Partition owning each node id (int64 array)."""
        return self._lookup(self._nb, nids, "node")

    def eid2partid(self, eids) -> np.ndarray:
        """Partition owning each edge id (int64 array)."""
        return self._lookup(self._eb, eids, "edge")

    def partid2nids(self, partid: int) -> np.ndarray:
        s, e = self.node_ranges[partid]
        return np.arange(s, e, dtype=np.int64)

    def partid2eids(self, partid: int) -> np.ndarray:
        s, e = self.edge_ranges[partid]
        return np.arange(s, e, dtype=np.int64)

    def nid2localnid(self, nids, partid: int) -> np.ndarray:
        """Row of each (owned) node id in partition ``partid``'s node arrays."""
        return np.asarray(nids, dtype=np.int64) - self.node_ranges[partid, 0]

    def eid2localeid(self, eids, partid: int) -> np.ndarray:
        """Position of each (owned) edge id in partition ``partid``'s edge arrays."""
        return np.asarray(eids, dtype=np.int64) - self.edge_ranges[partid, 0]

    # -- type mapping (homogeneous: one node type, one edge type) -------------------
    def map_to_per_ntype(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """``(type ids, per-type ids)`` of homogeneous node ids: with one node type,
        every type id is 0 and per-type ids are the ids themselves."""
        ids = np.asarray(ids, dtype=np.int64)
        self._lookup(self._nb, ids, "node")
        return np.zeros(ids.shape, dtype=np.int64), ids.copy()

    def map_to_per_etype(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """Edge counterpart of :meth:`map_to_per_ntype`."""
        ids = np.asarray(ids, dtype=np.int64)
        self._lookup(self._eb, ids, "edge")
        return np.zeros(ids.shape, dtype=np.int64), ids.copy()

    def map_to_homo_nid(self, ids, ntype: str) -> np.ndarray:
        """Homogeneous node ids of per-type ids of ``ntype`` (the identity here)."""
        if ntype != self.ntype:
            raise ValueError(f"unknown node type {ntype!r}; this partition book has {self.ntypes}")
        ids = np.asarray(ids, dtype=np.int64)
        self._lookup(self._nb, ids, "node")
        return ids.copy()

    def map_to_homo_eid(self, ids, etype: str) -> np.ndarray:
        """Homogeneous edge ids of per-type ids of ``etype`` (the identity here)."""
        if etype != self.etype:
            raise ValueError(f"unknown edge type {etype!r}; this partition book has {self.etypes}")
        ids = np.asarray(ids, dtype=np.int64)
        self._lookup(self._eb, ids, "edge")
        return ids.copy()

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
        return [self.ntype]

    @property
    def etypes(self) -> list[str]:
        return [self.etype]

    def __repr__(self) -> str:
        return (f"RangePartitionBook(graph={self.graph_name!r}, parts={self.num_partitions()}, "
                f"partid={self._partid}, nodes={self.num_nodes}, edges={self.num_edges})")
