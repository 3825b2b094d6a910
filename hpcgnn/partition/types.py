"""Node and edge types of the graph being partitioned (heterogeneous graphs).

A raw graph is typed when it has ``/nodes/type`` and the root attribute ``ntypes``
(and, for edges, ``/edges/type`` and ``etypes``: ``[src_type, relation, dst_type]``
triples).  The partitioner then groups each partition's nodes by node type and its
edges by edge type, so that every (partition, type) pair is one contiguous id range:
the partition book maps between homogeneous and per-type ids from those ranges
alone.  Canonical edge type names are ``"src:relation:dst"``.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from . import config as cfg
from .assign import owner_of


def canonical_name(triple) -> str:
    return ":".join(str(x) for x in triple)


class GraphTypes:
    """Independent: the type names of a :class:`~.source.RawSource` and the checks of
    type arrays (call the checks inside :func:`~hpcgnn.comm.agree.agreed`)."""

    def __init__(self, src, path: str) -> None:
        self.path, self.rank = path, src.rank
        has_nt, has_et = "node_type" in src.node_cols, "edge_type" in src.edge_cols
        if has_nt and not src.ntypes:
            raise self._err("attribute 'ntypes'", "missing: /nodes/type needs the list of node type names")
        if has_et and not src.etypes:
            raise self._err("attribute 'etypes'", "missing: /edges/type needs the list of edge types")
        self.ntype_names = [str(t) for t in src.ntypes] if has_nt else [cfg.NTYPE]
        if has_et and not has_nt:     # one node type: the name the triples use (e.g. a knowledge graph's "entity")
            ends = {str(x) for t in src.etypes if isinstance(t, (list, tuple)) and len(t) == 3 for x in (t[0], t[2])}
            if len(ends) == 1:
                self.ntype_names = [ends.pop()]
            elif len(ends) > 1:
                raise self._err("attribute 'etypes'", f"names node types {sorted(ends)} but the graph has no "
                                                      "/nodes/type to say which node has which")
        for name in self.ntype_names:
            if ":" in name:
                raise self._err("attribute 'ntypes'", f"node type name {name!r} contains ':' (reserved for "
                                                      "canonical edge type names src:relation:dst)")
        self.canonical = []
        if has_et:
            for t in src.etypes:
                if not isinstance(t, (list, tuple)) or len(t) != 3:
                    raise self._err("attribute 'etypes'", f"each entry must be [src_type, relation, dst_type], "
                                                          f"got {t!r}")
                for end in (t[0], t[2]):
                    if end not in self.ntype_names:
                        raise self._err("attribute 'etypes'", f"{list(t)!r} names node type {end!r}, not one "
                                                              f"of {self.ntype_names}")
                if ":" in str(t[1]):
                    raise self._err("attribute 'etypes'", f"relation name {t[1]!r} contains ':' (reserved for "
                                                          "canonical edge type names src:relation:dst)")
                self.canonical.append(tuple(str(x) for x in t))
        else:
            self.canonical = [(self.ntype_names[0], cfg.ETYPE, self.ntype_names[0])]
        if len(set(self.ntype_names)) != len(self.ntype_names):
            raise self._err("attribute 'ntypes'", f"repeated names in {self.ntype_names}")
        self.etype_names = [canonical_name(t) for t in self.canonical] if has_et else [cfg.ETYPE]
        if len(set(self.etype_names)) != len(self.etype_names):
            raise self._err("attribute 'etypes'", f"repeated edge types in {self.etype_names}")
        self.num_ntypes = len(self.ntype_names) if has_nt else 1
        self.num_etypes = len(self.etype_names) if has_et else 1
        self._etype_ends = np.array([[self.ntype_names.index(s), self.ntype_names.index(d)]
                                     for s, _, d in self.canonical], dtype=np.int64) if has_et and has_nt \
            else None

    def _err(self, field: str, what: str) -> InputError:
        return InputError(f"{self.path}: {field}: {what} (rank {self.rank})")

    def check_nodes(self, vals: np.ndarray, lo: int) -> np.ndarray:
        """This rank's ``/nodes/type`` rows (starting at row ``lo``) as int64 type ids."""
        v = vals.astype(np.int64)
        bad = np.flatnonzero((v < 0) | (v >= self.num_ntypes))
        if len(bad):
            raise self._err("dataset '/nodes/type'", f"value {int(v[bad[0]])} at row {lo + int(bad[0])} is not "
                                                     f"a node type index in [0, {self.num_ntypes})")
        return v

    def check_edges(self, etype: np.ndarray, layout, src_new: np.ndarray, dst_new: np.ndarray,
                    lo: int) -> None:
        """Edge type ids in range, and each edge joins the node types of its triple
        (``layout``: the typed node :class:`~.relabel.IdLayout` of the new ids)."""
        t = etype.astype(np.int64)
        bad = np.flatnonzero((t < 0) | (t >= self.num_etypes))
        if len(bad):
            raise self._err("dataset '/edges/type'", f"value {int(t[bad[0]])} at row {lo + int(bad[0])} is not "
                                                     f"an edge type index in [0, {self.num_etypes})")
        if self._etype_ends is None or not len(t):
            return
        T = layout.types
        st = owner_of(layout.bin_start, src_new) % T
        dt = owner_of(layout.bin_start, dst_new) % T
        want = self._etype_ends[t]
        bad = np.flatnonzero((st != want[:, 0]) | (dt != want[:, 1]))
        if len(bad):
            i = int(bad[0])
            s, r, d = self.canonical[t[i]]
            raise self._err("dataset '/edges/type'", f"edge at row {lo + i} has type {s}:{r}:{d} but joins a "
                                                     f"{self.ntype_names[st[i]]} node to a "
                                                     f"{self.ntype_names[dt[i]]} node")
