"""Typed blocks seen as DGL's heterogeneous blocks, what ``HeteroGraphConv`` takes.

hpcgnn samples a graph with several node and edge types as one homogeneous block
whose nodes and edges carry type ids (``Block.n_type``, ``Block.e_type``).  A
:class:`HeteroBlock` splits one such block by type: per node type its sources and
destinations (per-type local ids ``0..n-1``, the destinations first, as in a DGL
block), per canonical edge type ``(src_type, relation, dst_type)`` a
:class:`~hpcgnn.sampling.Block` in those local ids.  Build them from a loader's
batch with :func:`to_hetero_blocks`::

    for batch in loader:                                 # a typed MiniBatch
        blocks = hpcgnn.nn.to_hetero_blocks(batch, g)   # g: the DistGraph
        h = blocks[0].split_src(batch.x)                 # {ntype: features}
        for layer, block in zip(model.layers, blocks):
            h = layer(block, h)                          # HeteroGraphConv(...)
        logits = h["paper"]                              # the seeds' type
"""
from __future__ import annotations

import contextlib

import torch

from ..errors import DGLError, InputError
from ..sampling.batch import EID, NID, Block, MiniBatch

__all__ = ["HeteroBlock", "to_hetero_blocks"]


class _NodeSpace:
    """``block.srcnodes[ntype]``: ``.data[NID]`` the nodes' ids."""

    def __init__(self, ids: torch.Tensor) -> None:
        self.data = {NID: ids}


class _NodeView:
    """``block.srcnodes(ntype)`` (local ids ``0..n-1``) and ``block.srcnodes[ntype].data``."""

    def __init__(self, ids: dict, device) -> None:
        self._ids, self._device = ids, device

    def __getitem__(self, ntype) -> _NodeSpace:
        return _NodeSpace(self._ids[ntype])

    def __call__(self, ntype=None) -> torch.Tensor:
        if ntype is None and len(self._ids) != 1:
            raise DGLError(f"HeteroBlock: name a node type, the block has {list(self._ids)}")
        key = ntype if ntype is not None else next(iter(self._ids))
        return torch.arange(len(self._ids[key]), device=self._device)


def _one(d: dict):
    """DGL's data views: a dict per type, the tensor itself with a single type."""
    return next(iter(d.values())) if len(d) == 1 else d


class HeteroBlock:
    """One typed block split by type (DGL's heterogeneous block).

    ``canonical_etypes`` / ``ntypes`` (= ``srctypes`` = ``dsttypes``) are the graph's
    (a relation without edges in this block is present, with no edges, as in DGL);
    ``block[etype]`` is the relation's :class:`~hpcgnn.sampling.Block` (``etype`` a
    canonical triple or a relation name); ``num_src_nodes(ntype)`` /
    ``num_dst_nodes(ntype)``, ``srcdata[NID]`` / ``dstdata[NID]`` (per type: per-type
    ids when built with a partition book, else the homogeneous ids), ``edata[EID]``
    (per canonical type).  ``src_index[ntype]`` / ``dst_index[ntype]``: the rows of
    those nodes in the homogeneous block (:meth:`split_src`, :meth:`merge_dst`).
    ``block`` is the homogeneous block it was made from.  ``drop_empty_dst=True``:
    ``dsttypes`` are only the node types with destinations in this block and
    ``canonical_etypes`` only the relations into them (so a ``HeteroGraphConv`` makes no
    0-row outputs; what DGL's loader-fed scripts such as its distributed R-GCN expect
    of the last layer: the seeds' types alone)."""

    is_block = True

    def __init__(self, block: Block, ntypes, canonical_etypes, book=None, *, drop_empty_dst: bool = False) -> None:
        if not isinstance(block, Block):
            raise InputError(f"HeteroBlock: expected a hpcgnn.sampling.Block, got {type(block).__name__}")
        if block.e_type is None or block.n_type is None:
            raise InputError(f"HeteroBlock: the block ({len(block.src_nodes)} sources, {block.edge_index.shape[1]} "
                             "edges) has no node or edge types (n_type / e_type is None): it was sampled on a "
                             "graph with one type")
        self.block = block
        self.ntypes = [str(t) for t in ntypes]
        self.canonical_etypes = [tuple(c) for c in canonical_etypes]
        if not self.ntypes or not self.canonical_etypes:
            raise InputError(f"HeteroBlock: no node types ({self.ntypes}) or edge types ({self.canonical_etypes})")
        for c in self.canonical_etypes:
            if len(c) != 3 or c[0] not in self.ntypes or c[2] not in self.ntypes:
                raise InputError(f"HeteroBlock: canonical edge type {c} is not (src_type, relation, dst_type) "
                                 f"over the node types {self.ntypes}")
        self._dsttypes = list(self.ntypes)
        self._split(block, book)
        if drop_empty_dst:
            self._dsttypes = [t for t in self.ntypes if len(self._dst_ids[t])]
            self.canonical_etypes = [c for c in self.canonical_etypes if c[2] in self._dsttypes]

    def _split(self, block: Block, book) -> None:
        dev = block.edge_index.device
        T, R = len(self.ntypes), len(self.canonical_etypes)
        ns, nd, E = len(block.src_nodes), len(block.dst_nodes), block.edge_index.shape[1]
        n_type, e_type = block.n_type.to(dev).long(), block.e_type.to(dev).long()
        if n_type.shape != (ns,) or e_type.shape != (E,):
            raise InputError(f"HeteroBlock: n_type {tuple(n_type.shape)} / e_type {tuple(e_type.shape)} do not "
                             f"match the block's {ns} sources / {E} edges")
        src, dst = block.edge_index[0], block.edge_index[1]
        idx = {t: i for i, t in enumerate(self.ntypes)}
        ends = torch.tensor([[idx[c[0]] for c in self.canonical_etypes], [idx[c[2]] for c in self.canonical_etypes]],
                            dtype=torch.long, device=dev)
        out_n = ((n_type < 0) | (n_type >= T)).sum()
        out_e = ((e_type < 0) | (e_type >= R)).sum()
        n_type, e_c = n_type.clamp(0, T - 1), e_type.clamp(0, R - 1)     # safe to index with; refused below
        mixed = ((n_type[src] != ends[0, e_c]) | (n_type[dst] != ends[1, e_c])).sum()
        counts = torch.cat([torch.bincount(n_type, minlength=T), torch.bincount(n_type[:nd], minlength=T),
                            torch.bincount(e_c, minlength=R), torch.stack([out_n, out_e, mixed])]).tolist()
        if counts[-3] or counts[-2]:                     # one host read above, for all of it
            raise InputError(f"HeteroBlock: {counts[-3]} node type ids outside [0, {T}) / {counts[-2]} edge type ids "
                             f"outside [0, {R}): the graph has node types {self.ntypes} and edge types "
                             f"{self.canonical_etypes}")
        if counts[-1]:
            raise InputError(f"HeteroBlock: {counts[-1]} edges join nodes of other types than their canonical edge "
                             f"type says (are ntypes {self.ntypes} and canonical_etypes in the graph's order?)")
        n_src, n_dst, n_edge = counts[:T], counts[T:2 * T], counts[2 * T:2 * T + R]
        order = torch.argsort(n_type, stable=True)        # by type, in block order within a type
        starts = torch.cumsum(torch.tensor([0] + n_src[:-1], device=dev), 0)
        local = torch.empty(ns, dtype=torch.long, device=dev)
        local[order] = torch.arange(ns, device=dev) - starts.repeat_interleave(torch.tensor(n_src, device=dev))
        self.src_index = dict(zip(self.ntypes, torch.split(order, n_src)))
        self.dst_index = {t: self.src_index[t][:n_dst[i]] for i, t in enumerate(self.ntypes)}
        nid, eid = block.src_nodes, block.e_id
        if book is not None:
            nid = book.map_to_per_ntype(nid.cpu())[1].to(nid.device)
            eid = book.map_to_per_etype(eid.cpu())[1].to(eid.device)
        self._src_ids = {t: nid[p.to(nid.device)] for t, p in self.src_index.items()}
        self._dst_ids = {t: ids[:n_dst[i]] for i, (t, ids) in enumerate(self._src_ids.items())}
        e_order = torch.argsort(e_c, stable=True)
        self._rel = {}
        for c, rows in zip(self.canonical_etypes, torch.split(e_order, n_edge)):
            ei = torch.stack([local[src[rows]], local[dst[rows]]])
            self._rel[c] = Block(self._src_ids[c[0]], self._dst_ids[c[2]], ei, eid[rows.to(eid.device)])

    # -- DGL's heterograph API ---------------------------------------------------------
    @property
    def srctypes(self) -> list:
        return list(self.ntypes)

    @property
    def dsttypes(self) -> list:
        return list(self._dsttypes)

    @property
    def etypes(self) -> list:
        return [c[1] for c in self.canonical_etypes]

    def to_canonical_etype(self, etype) -> tuple:
        """The canonical triple of ``etype`` (a triple, ``"src:rel:dst"`` or a relation name)."""
        if isinstance(etype, str) and etype.count(":") == 2:
            etype = tuple(etype.split(":"))
        if isinstance(etype, tuple):
            if etype in self._rel:
                return etype
        else:
            hits = [c for c in self.canonical_etypes if c[1] == etype]
            if len(hits) == 1:
                return hits[0]
            if hits:
                raise DGLError(f"HeteroBlock: edge type {etype!r} is ambiguous ({hits}); give the canonical triple")
        raise DGLError(f"HeteroBlock: no edge type {etype!r}; the block has {self.canonical_etypes}")

    def __getitem__(self, etype) -> Block:
        return self._rel[self.to_canonical_etype(etype)]

    def _ntype(self, ntype, ids: dict) -> str:
        if ntype is None:
            if len(self.ntypes) != 1:
                raise DGLError(f"HeteroBlock: name a node type, the block has {self.ntypes}")
            return self.ntypes[0]
        if ntype not in ids:
            raise DGLError(f"HeteroBlock: no node type {ntype!r}; the block has {self.ntypes}")
        return ntype

    def num_src_nodes(self, ntype=None) -> int:
        return len(self._src_ids[self._ntype(ntype, self._src_ids)])

    def num_dst_nodes(self, ntype=None) -> int:
        return len(self._dst_ids[self._ntype(ntype, self._dst_ids)])

    number_of_src_nodes = num_src_nodes
    number_of_dst_nodes = num_dst_nodes

    def num_edges(self, etype=None) -> int:
        """Edges of ``etype``, or of every type."""
        if etype is None:
            return int(self.block.edge_index.shape[1])
        return int(self[etype].edge_index.shape[1])

    number_of_edges = num_edges

    @property
    def srcnodes(self) -> _NodeView:
        return _NodeView(self._src_ids, self.block.edge_index.device)

    @property
    def dstnodes(self) -> _NodeView:
        return _NodeView(self._dst_ids, self.block.edge_index.device)

    @property
    def srcdata(self) -> dict:
        return {NID: _one(self._src_ids)}

    @property
    def dstdata(self) -> dict:
        return {NID: _one(self._dst_ids)}

    @property
    def edata(self) -> dict:
        return {EID: _one({c: b.e_id for c, b in self._rel.items()})}

    # -- between the homogeneous rows and the per-type ones -----------------------------
    def split_src(self, x: torch.Tensor) -> dict:
        """Rows ``[num_src, ...]`` in the homogeneous block's order (``MiniBatch.x``)
        as ``{ntype: rows of that type}`` (types without sources left out)."""
        if x.shape[0] != len(self.block.src_nodes):
            raise InputError(f"HeteroBlock.split_src: {tuple(x.shape)} rows, the block has "
                             f"{len(self.block.src_nodes)} sources")
        return {t: x[p.to(x.device)] for t, p in self.src_index.items() if len(p)}

    def split_dst(self, x: torch.Tensor) -> dict:
        """As :meth:`split_src` for ``[num_dst, ...]`` destination rows."""
        if x.shape[0] != len(self.block.dst_nodes):
            raise InputError(f"HeteroBlock.split_dst: {tuple(x.shape)} rows, the block has "
                             f"{len(self.block.dst_nodes)} destinations")
        return {t: x[p.to(x.device)] for t, p in self.dst_index.items() if len(p)}

    def merge_dst(self, h: dict) -> torch.Tensor:
        """``{ntype: [num_dst(ntype), ...]}`` back in the homogeneous block's order
        ``[num_dst, ...]`` (rows of types missing from ``h`` are zeros)."""
        if not isinstance(h, dict) or not h:
            raise InputError(f"HeteroBlock.merge_dst: expected a non-empty dict node type -> tensor, got {h!r}")
        first = next(iter(h.values()))
        out = first.new_zeros((len(self.block.dst_nodes), *first.shape[1:]))
        for t, v in h.items():
            p = self.dst_index[self._ntype(t, self._dst_ids)].to(v.device)
            if v.shape[0] != len(p) or v.shape[1:] != first.shape[1:]:
                raise InputError(f"HeteroBlock.merge_dst: {t!r} has shape {tuple(v.shape)}, expected "
                                 f"({len(p)}, {', '.join(map(str, first.shape[1:]))})")
            out = out.index_copy(0, p, v)
        return out

    def local_var(self) -> "HeteroBlock":
        """DGL's ``local_var()``: the block itself (its data views are built afresh on
        each read, so nothing a layer writes into them outlives the layer)."""
        return self

    @contextlib.contextmanager
    def local_scope(self):
        """DGL's ``with block.local_scope():`` (see :meth:`local_var`)."""
        yield self

    def to(self, device, non_blocking: bool = False) -> "HeteroBlock":
        """The block with its tensors on ``device``."""
        new = object.__new__(HeteroBlock)
        new.__dict__.update(self.__dict__)

        def mv(d):
            return {k: v.to(device, non_blocking=non_blocking) for k, v in d.items()}
        new.block = self.block.to(device, non_blocking)
        new.src_index, new.dst_index = mv(self.src_index), mv(self.dst_index)
        new._src_ids, new._dst_ids = mv(self._src_ids), mv(self._dst_ids)
        new._rel = {c: b.to(device, non_blocking) for c, b in self._rel.items()}
        return new

    def __repr__(self) -> str:
        return (f"HeteroBlock(num_src_nodes={ {t: len(v) for t, v in self._src_ids.items()} }, "
                f"num_dst_nodes={ {t: len(v) for t, v in self._dst_ids.items()} }, "
                f"num_edges={ {c: b.edge_index.shape[1] for c, b in self._rel.items()} })")


def _book(g):
    if g is None:
        return None
    if hasattr(g, "get_partition_book"):
        return g.get_partition_book()
    return g if hasattr(g, "map_to_per_ntype") else None


def to_hetero_blocks(data, g=None, *, ntypes=None, canonical_etypes=None, drop_empty_dst: bool = False):
    """DGL-style heterogeneous blocks of a typed batch: ``data`` a typed
    :class:`~hpcgnn.sampling.MiniBatch` (or the list ``batch.to_blocks()``; one
    :class:`~hpcgnn.sampling.Block` gives one :class:`HeteroBlock`), outermost layer
    first, for ``HeteroGraphConv`` layers.  ``g``: the graph (a ``DistGraph``, or its
    partition book): its ``ntypes`` and ``canonical_etypes`` name the types, and its
    partition book makes ``srcdata[NID]`` / ``edata[EID]`` per-type ids, as DGL's.
    Without ``g`` give ``ntypes`` and ``canonical_etypes`` (in the graph's type id
    order); the ids are then the homogeneous ones.  ``drop_empty_dst``: see
    :class:`HeteroBlock`."""
    names = ntypes if ntypes is not None else getattr(g, "ntypes", None)
    canon = canonical_etypes if canonical_etypes is not None else getattr(g, "canonical_etypes", None)
    if names is None or canon is None:
        raise InputError("to_hetero_blocks: give the graph (g=) or both ntypes= and canonical_etypes=")
    if isinstance(data, MiniBatch):
        if data.n_type is None or data.e_type is None:
            raise InputError("to_hetero_blocks: the batch has no node/edge types (sampled on a graph with one "
                             "type?)")
        blocks = data.to_blocks()
    elif isinstance(data, Block):
        return HeteroBlock(data, names, canon, _book(g), drop_empty_dst=drop_empty_dst)
    elif isinstance(data, (list, tuple)) and all(isinstance(b, Block) for b in data):
        blocks = list(data)
    else:
        raise InputError(f"to_hetero_blocks: expected a MiniBatch, a Block or a list of Blocks, got "
                         f"{type(data).__name__}")
    book = _book(g)
    return [HeteroBlock(b, names, canon, book, drop_empty_dst=drop_empty_dst) for b in blocks]
