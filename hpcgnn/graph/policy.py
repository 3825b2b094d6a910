"""``PartitionPolicy``: how the rows of a node or edge tensor follow the partitions.

A policy names one id space of a :class:`~hpcgnn.graph.RangePartitionBook`
and answers, from the ``P + 1`` range boundaries only, which partition owns an id
and where it sits inside it.  ``'node:<ntype>'`` / ``'edge:<etype>'`` (DGL's
``'node~<ntype>'`` spelling too) name the per-type ids of one type, as DGL's do;
the bare ``'node'`` / ``'edge'`` name every node (edge) id, the id space of the
graph's ``ndata``/``edata``.  On a graph with one type both are the same.
Independent (no communication).
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..partition.book import RangePartitionBook

NODE, EDGE = "node", "edge"


def _as_np_ids(ids) -> np.ndarray:
    if hasattr(ids, "detach") and hasattr(ids, "numpy"):  # torch tensor
        ids = ids.detach().cpu().numpy()
    arr = np.asarray(ids)
    if arr.size and arr.dtype.kind not in "iu":
        raise InputError(f"ids must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False).reshape(-1)


class PartitionPolicy:
    """Rows of a tensor laid out like the nodes (``'node:<ntype>'``) or edges
    (``'edge:<etype>'``) of ``partition_book``."""

    def __init__(self, policy_str: str, partition_book: RangePartitionBook) -> None:
        if not isinstance(partition_book, RangePartitionBook):
            raise InputError(f"PartitionPolicy: partition_book must be a RangePartitionBook, "
                             f"got {type(partition_book).__name__}")
        text = str(policy_str)
        cut = min((i for i in (text.find(":"), text.find("~")) if i >= 0), default=-1)
        kind, tname = (text[:cut], text[cut + 1:]) if cut >= 0 else (text, None)
        kind = kind.strip().lower()
        if kind not in (NODE, EDGE):
            raise InputError(f"PartitionPolicy: policy {policy_str!r} must be 'node:<ntype>' or 'edge:<etype>'")
        types = partition_book.ntypes if kind == NODE else partition_book.etypes
        per_type = tname is not None and len(types) > 1
        tname = types[0] if tname is None else tname.strip()
        if kind == EDGE and tname not in types:        # a relation name or triple naming one edge type
            try:
                tname = types[partition_book.etype_id(tname)]
            except ValueError:
                pass
        if tname not in types:
            raise InputError(f"PartitionPolicy: {kind} type {tname!r} not in the partition book ({types})")
        self.kind = kind
        self.per_type = per_type
        self.type_name = tname if per_type or len(types) == 1 else None
        self.policy_str = kind if self.type_name is None else f"{kind}:{tname}"
        self.partition_book = partition_book
        if per_type:
            self._bounds = partition_book.type_offsets(kind, tname)
        else:
            self._bounds = partition_book.node_boundaries if kind == NODE else partition_book.edge_boundaries

    # -- facts -------------------------------------------------------------------
    @property
    def part_id(self) -> int:
        return self.partition_book.partid

    @property
    def is_node(self) -> bool:
        return self.kind == NODE

    @property
    def boundaries(self) -> np.ndarray:
        """``P + 1`` id boundaries of the partitions (int64)."""
        return self._bounds.copy()

    def get_size(self) -> int:
        """Number of ids in the whole id space (all partitions)."""
        return int(self._bounds[-1])

    def get_part_size(self, part_id: int | None = None) -> int:
        """Number of ids in partition ``part_id`` (default: this process's)."""
        p = self.part_id if part_id is None else int(part_id)
        return int(self._bounds[p + 1] - self._bounds[p])

    # -- lookups -----------------------------------------------------------------
    def to_partid(self, ids) -> np.ndarray:
        """Partition owning each id (int64 array; :class:`InputError` when out of range)."""
        arr = _as_np_ids(ids)
        if arr.size and (arr.min() < 0 or arr.max() >= self._bounds[-1]):
            bad = int(arr.min()) if arr.min() < 0 else int(arr.max())
            raise InputError(f"PartitionPolicy {self.policy_str}: id {bad} is out of range "
                             f"[0, {int(self._bounds[-1])})")
        return np.searchsorted(self._bounds, arr, side="right") - 1

    def to_local(self, ids, part_id: int | None = None) -> np.ndarray:
        """Offset of each id inside partition ``part_id`` (default: this process's);
        :class:`InputError` for an id that partition does not own."""
        p = self.part_id if part_id is None else int(part_id)
        arr = _as_np_ids(ids)
        lo, hi = int(self._bounds[p]), int(self._bounds[p + 1])
        if arr.size and (arr.min() < lo or arr.max() >= hi):
            raise InputError(f"PartitionPolicy {self.policy_str}: ids outside partition {p} [{lo}, {hi})")
        return arr - lo

    def __eq__(self, other) -> bool:
        return (isinstance(other, PartitionPolicy) and self.policy_str == other.policy_str
                and np.array_equal(self._bounds, other._bounds))

    def __hash__(self) -> int:
        return hash((self.policy_str, tuple(self._bounds.tolist())))

    def __repr__(self) -> str:
        return f"PartitionPolicy({self.policy_str!r}, parts={len(self._bounds) - 1}, part_id={self.part_id})"


def map_to_per_ntype(partition_book: RangePartitionBook, ids):
    """Module form of :meth:`RangePartitionBook.map_to_per_ntype`."""
    return partition_book.map_to_per_ntype(ids)


def map_to_homo_nid(partition_book: RangePartitionBook, ids, ntype: str = "_N"):
    """Module form of :meth:`RangePartitionBook.map_to_homo_nid`."""
    return partition_book.map_to_homo_nid(ids, ntype)


__all__ = ["PartitionPolicy", "map_to_per_ntype", "map_to_homo_nid"]
