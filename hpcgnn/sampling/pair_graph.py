"""DGL's pair graphs of a link-prediction batch: what DGL's ``DistEdgeDataLoader``
yields beside the blocks, ``(input_nodes, pair_graph, neg_pair_graph, blocks)``.

A link batch (:class:`~hpcgnn.sampling.MiniBatch` from
:class:`~hpcgnn.sampling.DistEdgeDataLoader`) samples around the endpoints of its
seed edges and negative pairs: ``n_id[:batch_size]``, the last block's destinations.
Its pair graphs (:class:`PairGraph`) have those nodes (local ids ``0 .. batch_size-1``, as the
rows of the model's output) and, as edges, the seed edges (``pair_graph``,
``edata[EID]`` their global ids) or the negative pairs (``neg_pair_graph``):
``edge_label_index`` split at the seed count.  A loss writes the model's output into
``ndata`` and scores the edges with ``apply_edges`` (a built-in of
:mod:`hpcgnn.function`, e.g. ``fn.u_dot_v("h", "h", "score")``, or a function of an
:class:`EdgeBatch`), inside ``local_scope()``.  One node and edge type (ids are
homogeneous, as the batch's); no message passing (``update_all``): the blocks carry
that.  Everything is one tensor op over all edges, where the tensors are.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from ..errors import DGLError
from ..function import MessageFunction
from .batch import EID, NID

#: DGL's ``dgl.base.ALL``: every edge.
ALL = "__ALL__"


class _Frame(dict):
    """``ndata`` / ``edata``: name -> tensor with one row per node (edge); setting a
    tensor of another row count raises DGLError, as DGL does."""

    def __init__(self, num: int, kind: str, items=()):
        super().__init__(items)
        self.num, self.kind = num, kind

    def __setitem__(self, key, value):
        if not isinstance(value, torch.Tensor):
            raise DGLError(f"PairGraph.{self.kind}data[{key!r}]: expected a tensor, got {type(value).__name__}")
        if value.dim() == 0 or value.shape[0] != self.num:
            raise DGLError(f"PairGraph.{self.kind}data[{key!r}]: expected {self.num} rows (one per "
                           f"{'node' if self.kind == 'n' else 'edge'}), got shape {tuple(value.shape)}")
        super().__setitem__(key, value)

    def __missing__(self, key):      # a KeyError, as DGL's frames raise
        raise KeyError(f"PairGraph.{self.kind}data has no {key!r} (it has {sorted(map(str, self))})")

    def update(self, other=(), **kw):
        for k, v in dict(other, **kw).items():
            self[k] = v

    def copy(self) -> "_Frame":
        return _Frame(self.num, self.kind, dict.items(self))

    def moved(self, device, non_blocking: bool) -> "_Frame":
        return _Frame(self.num, self.kind, ((k, v.to(device, non_blocking=non_blocking)) for k, v in self.items()))


class _Rows:
    """A frame's rows at ``index`` (all rows with None), read on first use."""

    def __init__(self, frame: _Frame, index):
        self.frame, self.index = frame, index

    def __getitem__(self, key):
        t = self.frame[key]
        return t if self.index is None else t[self.index]

    def __contains__(self, key):
        return key in self.frame

    def keys(self):
        return self.frame.keys()


class EdgeBatch:
    """What a user-defined function of :meth:`PairGraph.apply_edges` gets (DGL's
    ``EdgeBatch``): ``edges.src[name]``, ``edges.dst[name]``, ``edges.data[name]``,
    one row per edge; it returns ``{out_name: tensor}``."""

    def __init__(self, g: "PairGraph", eids):
        self._g, self._eids = g, eids
        u, v = g._src, g._dst
        self._u, self._v = (u, v) if eids is None else (u[eids], v[eids])
        self.src, self.dst = _Rows(g.ndata, self._u), _Rows(g.ndata, self._v)
        self.data = _Rows(g.edata, eids)

    def edges(self):
        """``(u, v, eid)`` of the edges in the batch (local ids)."""
        eids = torch.arange(self._g.num_edges(), device=self._u.device) if self._eids is None else self._eids
        return self._u, self._v, eids

    def batch_size(self) -> int:
        return int(self._u.numel())

    def __len__(self):
        return self.batch_size()


class PairGraph:
    """DGL's pair graph: ``num_nodes`` nodes, edges ``src[i] -> dst[i]`` (local ids,
    int64 tensors).  ``ndata`` starts with ``{NID: the nodes' global ids}``,
    ``edata`` with what is given (``{EID: global edge ids}`` for the seed edges).
    ``srcdata``/``dstdata`` are ``ndata`` (one node set)."""

    is_block = False
    ntypes = ["_N"]
    etypes = ["_E"]
    canonical_etypes = [("_N", "_E", "_N")]

    def __init__(self, src: torch.Tensor, dst: torch.Tensor, num_nodes: int, ndata: dict | None = None,
                 edata: dict | None = None):
        self._src, self._dst, self._num_nodes = src, dst, int(num_nodes)
        self._ndata = _Frame(self._num_nodes, "n")
        self._edata = _Frame(int(src.numel()), "e")
        self._ndata.update(ndata or {})
        self._edata.update(edata or {})

    # -- structure ---------------------------------------------------------------
    def num_nodes(self, ntype=None) -> int:
        return self._num_nodes

    def num_edges(self, etype=None) -> int:
        return int(self._src.numel())

    number_of_nodes = num_src_nodes = num_dst_nodes = num_nodes
    number_of_edges = num_edges

    def edges(self, form: str = "uv", order: str = "eid", etype=None):
        """DGL's ``g.edges(form)``: ``(u, v)``, ``(u, v, eid)`` (``form='all'``) or the
        edge ids (``'eid'``), in edge id order."""
        if form == "uv":
            return self._src, self._dst
        eids = torch.arange(self.num_edges(), device=self._src.device)
        if form == "eid":
            return eids
        if form == "all":
            return self._src, self._dst, eids
        raise DGLError(f"PairGraph.edges: form must be 'uv', 'eid' or 'all', got {form!r}")

    def in_degrees(self, v=ALL, etype=None) -> torch.Tensor:
        d = torch.bincount(self._dst, minlength=self._num_nodes)
        return d if isinstance(v, str) and v == ALL else d[v]

    def out_degrees(self, u=ALL, etype=None) -> torch.Tensor:
        d = torch.bincount(self._src, minlength=self._num_nodes)
        return d if isinstance(u, str) and u == ALL else d[u]

    @property
    def device(self) -> torch.device:
        return self._src.device

    @property
    def idtype(self):
        return self._src.dtype

    # -- data --------------------------------------------------------------------
    @property
    def ndata(self) -> _Frame:
        return self._ndata

    srcdata = dstdata = ndata

    @property
    def edata(self) -> _Frame:
        return self._edata

    @contextmanager
    def local_scope(self):
        """DGL's ``with g.local_scope():``: data set (or removed) inside is dropped
        at the end; tensors stored before are shared, not copied."""
        nd, ed = self._ndata, self._edata
        self._ndata, self._edata = nd.copy(), ed.copy()
        try:
            yield
        finally:
            self._ndata, self._edata = nd, ed

    def apply_edges(self, func, edges=ALL, etype=None) -> None:
        """DGL's ``g.apply_edges(func, edges=ALL)``: compute a feature of each edge
        (of ``edges``, local edge ids, or all) into ``edata``.  ``func``: a built-in
        of :mod:`hpcgnn.function` (``fn.u_dot_v("h", "h", "score")``) or a function
        of an :class:`EdgeBatch` returning ``{name: tensor}``.  Writing some edges of
        a new feature fills the others with zeros, as DGL."""
        eids = None
        if not (isinstance(edges, str) and edges == ALL):
            eids = torch.as_tensor(edges, device=self.device).reshape(-1).long()
            if eids.numel() and (int(eids.min()) < 0 or int(eids.max()) >= self.num_edges()):
                raise DGLError(f"PairGraph.apply_edges: edges holds ids outside [0, {self.num_edges()})")
        if isinstance(func, MessageFunction):
            batch = EdgeBatch(self, eids)
            rows = [self._operand(func, batch, target, field) for target, field in func.operands]
            out = {func.out: func(*rows)}
        elif callable(func):
            out = func(EdgeBatch(self, eids))
            if not isinstance(out, dict):
                raise DGLError(f"PairGraph.apply_edges: the function must return a dict {{name: tensor}}, "
                               f"got {type(out).__name__}")
        else:
            raise DGLError(f"PairGraph.apply_edges: func must be a built-in of hpcgnn.function (fn.u_dot_v, ...) "
                           f"or a function of the edges, got {type(func).__name__}")
        for name, val in out.items():
            if eids is None:
                self._edata[name] = val
                continue
            full = self._edata[name].clone() if name in self._edata else \
                val.new_zeros((self.num_edges(),) + tuple(val.shape[1:]))
            full[eids] = val
            self._edata[name] = full

    def _operand(self, func, batch: EdgeBatch, target: str, field: str) -> torch.Tensor:
        frame, rows = {"u": (self._ndata, batch.src), "v": (self._ndata, batch.dst),
                       "e": (self._edata, batch.data)}[target]
        if field not in frame:
            raise DGLError(f"PairGraph.apply_edges({func!r}): '{field}' is not in the graph's "
                           f"{'edata' if target == 'e' else 'ndata'} (it has {sorted(map(str, frame))})")
        return rows[field]

    # -- moving ------------------------------------------------------------------
    def to(self, device, non_blocking: bool = False) -> "PairGraph":
        """The graph with its edges and data on ``device`` (DGL's ``g.to(device)``)."""
        g = PairGraph.__new__(PairGraph)
        g._src = self._src.to(device, non_blocking=non_blocking)
        g._dst = self._dst.to(device, non_blocking=non_blocking)
        g._num_nodes = self._num_nodes
        g._ndata = self._ndata.moved(device, non_blocking)
        g._edata = self._edata.moved(device, non_blocking)
        return g

    def __repr__(self):
        return (f"PairGraph(num_nodes={self._num_nodes}, num_edges={self.num_edges()}, "
                f"ndata={sorted(map(str, self._ndata))}, edata={sorted(map(str, self._edata))})")


def pair_graphs(b) -> tuple[PairGraph, PairGraph | None]:
    """``(pair_graph, neg_pair_graph)`` of a link batch ``b`` (a
    :class:`~hpcgnn.sampling.MiniBatch` with ``edge_label_index``); the second is
    None for a batch without negatives."""
    if b.edge_label_index is None:
        raise DGLError("pair_graphs: not a link prediction batch (it has no edge_label_index)")
    n, num_pos = int(b.batch_size), int(b.input_id.numel())
    eli = b.edge_label_index
    seeds = b.n_id[:n]
    pos = PairGraph(eli[0, :num_pos], eli[1, :num_pos], n, {NID: seeds}, {EID: b.input_id})
    if eli.shape[1] == num_pos:
        return pos, None
    return pos, PairGraph(eli[0, num_pos:], eli[1, num_pos:], n, {NID: seeds})
