"""Heterogeneous mini-batches: a typed :class:`~hpcgnn.sampling.MiniBatch` split by
node and edge type, in the layout of PyG's ``HeteroData`` (what ``to_hetero`` and
``HeteroConv`` models take)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import InputError
from .precision import float_features


@dataclass
class HeteroBatch:
    """``n_id[ntype]``: global (homogeneous) ids of the batch's nodes of each type, the
    seeds first in their type; ``per_type_id[ntype]``: the same nodes' per-type ids;
    ``edge_index[(src, rel, dst)]``: ``[2, E]`` local indices into ``n_id[src]`` /
    ``n_id[dst]`` (messages flow towards the seeds); ``e_id[etype]``: the edges' global
    ids; ``x[ntype]``: features of the types that have them; ``y``: labels of the
    ``batch_size`` seeds, all of type ``seed_type``."""
    n_id: dict
    per_type_id: dict
    edge_index: dict
    e_id: dict
    batch_size: int
    seed_type: str
    x: dict = field(default_factory=dict)
    y: torch.Tensor | None = None

    @property
    def x_dict(self) -> dict:
        return self.x

    @property
    def edge_index_dict(self) -> dict:
        return self.edge_index

    def num_nodes_dict(self) -> dict:
        return {t: len(v) for t, v in self.n_id.items()}

    def to_pyg(self):
        """A ``torch_geometric.data.HeteroData`` (needs PyG)."""
        from torch_geometric.data import HeteroData   # PyG loaded by the code that uses it (start-up cost)

        d = HeteroData()
        for t, ids in self.n_id.items():
            d[t].n_id = ids
            d[t].num_nodes = len(ids)
            if t in self.x:
                d[t].x = self.x[t]
        for k, ei in self.edge_index.items():
            d[k].edge_index = ei
            d[k].e_id = self.e_id[k]
        d[self.seed_type].batch_size = self.batch_size
        if self.y is not None:
            d[self.seed_type].y = self.y
        return d


def to_hetero(mb, g, feat: str | None = "feat", label: str | None = "label") -> HeteroBatch:
    """Split a typed mini-batch (sampled on ``g``) by type and gather ``feat`` for the
    node types it describes (its ``ntypes`` in the partition config; every type when
    not set) and ``label`` of the seeds.  Independent (one-sided reads)."""
    if getattr(mb, "n_type", None) is None:
        raise InputError("MiniBatch.to_hetero: the batch has no node types (sampled on a homogeneous graph "
                         "with int fanouts?)")
    if mb.edge_dir != "in":
        raise InputError("MiniBatch.to_hetero: heterogeneous batches need in-edge sampling (edge_dir='in')")
    book = g.get_partition_book()
    names, canon = book.ntypes, book.canonical_etypes
    if len(names) > 1 and book.etypes == ["_E"]:
        raise InputError(f"MiniBatch.to_hetero: graph {g.graph_name!r} has node types but no edge types; give the "
                         "raw graph /edges/type and the etypes attribute ([src_type, relation, dst_type] triples)")
    n_id, nt = mb.n_id.numpy(), mb.n_type.numpy()
    local = np.empty(len(n_id), np.int64)
    ids, per_type = {}, {}
    _, per = book.map_to_per_ntype(n_id)
    for t, name in enumerate(names):
        m = np.flatnonzero(nt == t)
        if len(m) == 0:
            continue
        local[m] = np.arange(len(m))
        ids[name] = torch.from_numpy(n_id[m])
        per_type[name] = torch.from_numpy(per[m])
    seed_types = set(nt[: mb.batch_size].tolist())
    if len(seed_types) > 1:
        raise InputError(f"MiniBatch.to_hetero: seeds of several node types {sorted(names[i] for i in seed_types)}")
    seed_type = names[seed_types.pop()] if mb.batch_size else names[0]
    ei, et, eid = mb.edge_index.numpy(), mb.e_type.numpy(), mb.e_id.numpy()
    edge_index, e_ids = {}, {}
    for t, key in enumerate(canon):
        m = np.flatnonzero(et == t)
        if len(m) == 0:
            continue
        edge_index[key] = torch.from_numpy(np.stack([local[ei[0, m]], local[ei[1, m]]]))
        e_ids[key] = torch.from_numpy(eid[m])
    hb = HeteroBatch(ids, per_type, edge_index, e_ids, mb.batch_size, seed_type)
    x = mb.x
    if x is not None and not isinstance(x, torch.Tensor) and hasattr(x, "materialize"):
        x = x.materialize()            # rows by reference (feature_rows="refs"): read them now
    if feat is not None:
        if feat not in g.ndata:
            raise InputError(f"MiniBatch.to_hetero: {feat!r} is not a node feature of graph {g.graph_name!r}")
        has = g.get_partition_config()["node_feats"][feat].get("ntypes", names)
        for name in has:
            if name in ids:        # rows the loader fetched already (mb.x), else read them now
                m = torch.from_numpy(np.flatnonzero(nt == names.index(name)))
                hb.x[name] = x[m.to(x.device)] if x is not None else \
                    float_features(_as_tensor(g.ndata[feat][ids[name].numpy()]))
    if label is not None:
        if label not in g.ndata:
            raise InputError(f"MiniBatch.to_hetero: {label!r} is not a node feature of graph {g.graph_name!r}")
        hb.y = mb.y[: mb.batch_size] if mb.y is not None else _as_tensor(g.ndata[label][n_id[: mb.batch_size]])
    return hb


def _as_tensor(a):
    return a if isinstance(a, torch.Tensor) else torch.as_tensor(a)
