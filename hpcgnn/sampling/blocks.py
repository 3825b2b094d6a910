"""Per-layer message-flow blocks that stock PyG layers aggregate with one sparse
product (``MiniBatch.adjs``).

A sampled batch holds its edges hop by hop: the edges of hop ``h`` point into the
nodes first reached at hop ``h-1`` (local ids ``[ncum[h-1], ncum[h])``).  Sorted by
destination, the edges into the first ``ncum[h]`` nodes are therefore exactly the
edges of hops ``1..h``, a prefix.  One compiled pass (``hpcgnn._ext.build_csr``)
builds the CSR of the whole batch; layer ``i`` of an ``L``-layer model
(``h = L - i`` hops) is then a view of its first ``ncum[h] + 1`` row pointers and
the column ids they cover: no copy per layer, no per-edge Python.

Each entry of ``adjs`` unpacks as PyG's classic ``NeighborSampler`` pair
``(adj_t, size)``: ``adj_t`` is a ``torch.sparse_csr`` matrix ``[num_dst, num_src]``
(row = destination) that ``SAGEConv``, ``GraphConv``, ``GINConv``, ``GCNConv`` (with
``normalize=False``; see :meth:`LayerAdj.gcn_norm`) ... take in place of
``edge_index``, and ``size = (num_src, num_dst)``; the destinations are the first
``num_dst`` sources, so a layer is ``conv((x, x[:num_dst]), adj_t)``.  Layers that
need the edges themselves (``GATConv``, ``GATv2Conv``, ``TransformerConv``) take
``adj.edge_index`` (``[2, E]``, sorted by destination) and ``adj.e_id``.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

from .. import _ext
from ..devices import pinned


class LayerAdj(tuple):
    """One layer's bipartite graph.  Unpacks as ``(adj_t, size)``; also carries
    ``edge_index`` (``[2, E]`` local ids, row 0 the source, sorted by destination),
    ``e_id`` (the edges' global ids) and ``num_src`` / ``num_dst``."""

    def __new__(cls, adj_t, size, edge_index, e_id):
        self = tuple.__new__(cls, (adj_t, size))
        self.edge_index, self.e_id = edge_index, e_id
        return self

    @property
    def adj_t(self) -> torch.Tensor:
        return self[0]

    @property
    def size(self) -> tuple[int, int]:
        return self[1]

    @property
    def num_src(self) -> int:
        return self[1][0]

    @property
    def num_dst(self) -> int:
        return self[1][1]

    def to(self, device, non_blocking: bool = False, dtype=None) -> "LayerAdj":
        """The same layer on ``device`` (its matrix's values in ``dtype`` when given)."""
        return LayerAdj(self[0].to(device=device, dtype=dtype, non_blocking=non_blocking), self[1],
                        self.edge_index.to(device, non_blocking=non_blocking), self.e_id)

    def gcn_norm(self, add_self_loops: bool = True, norm: str = "right") -> torch.Tensor:
        """``adj_t`` with GCN's weights and a self-loop per destination (when
        ``add_self_loops``), what ``GCNConv(..., normalize=False, add_self_loops=False)``
        aggregates.  ``norm="right"``: ``1 / deg_dst``, the mean over a destination's
        row (``D^-1 (A + I)``; DGL's ``GraphConv(norm='right')``): a row's weights
        depend on that row alone, so layer-wise inference does not depend on which
        nodes share a batch.  ``norm="both"``: ``1 / sqrt(deg_dst * deg_src)`` with
        both degrees counted within this block (DGL's ``GraphConv(norm='both')`` on a
        block), which do."""
        if norm not in ("right", "both"):
            raise ValueError(f"gcn_norm: norm must be 'right' or 'both', got {norm!r}")
        crow, col = self[0].crow_indices(), self[0].col_indices()
        nd, ns = self.num_dst, self.num_src
        if add_self_loops:
            crow, col = _with_self_loops(crow, col, nd)
        counts = crow[1:] - crow[:-1]
        deg_d = counts.clamp(min=1).to(self[0].dtype)
        if norm == "right":
            val = torch.repeat_interleave(deg_d.reciprocal(), counts)
        else:
            deg_s = torch.bincount(col, minlength=ns).clamp_(min=1).to(self[0].dtype)
            val = torch.repeat_interleave(deg_d.rsqrt(), counts) * deg_s.rsqrt()[col]
        return _csr(crow, col, val, nd, ns)

    def __repr__(self) -> str:
        return f"LayerAdj(num_src={self.num_src}, num_dst={self.num_dst}, num_edges={self.edge_index.shape[1]})"


def adjs_like(adjs: list, x: torch.Tensor) -> list:
    """``adjs`` with their matrices in ``x``'s dtype and on ``x``'s device (the model's
    input may be cast or moved after the batch was made: float16 features fed as
    float32, a batch from a sampler rank fed to a GPU)."""
    if not adjs or not isinstance(x, torch.Tensor):
        return adjs
    a = adjs[0][0]
    if a.dtype == x.dtype and a.device == x.device:
        return adjs
    return [adj.to(x.device, non_blocking=True, dtype=x.dtype) for adj in adjs]


def _with_self_loops(crow: torch.Tensor, col: torch.Tensor, nd: int):
    """Row pointers and columns with ``d -> d`` appended to every row ``d``."""
    new_crow = crow + torch.arange(nd + 1, device=crow.device)
    out = torch.empty(col.numel() + nd, dtype=col.dtype, device=col.device)
    loops = new_crow[1:] - 1                       # the last slot of each row
    keep = torch.ones(out.numel(), dtype=torch.bool, device=col.device)
    keep[loops] = False
    out[keep] = col
    out[loops] = torch.arange(nd, dtype=col.dtype, device=col.device)
    return new_crow, out


def _csr(crow, col, values, rows: int, cols: int) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(crow, col, values, size=(rows, cols), check_invariants=False)


def _cumsum(counts) -> list[int]:
    out = [0]
    for c in counts:
        out.append(out[-1] + int(c))
    return out


def build_adjs(edge_index: torch.Tensor, e_id: torch.Tensor, num_sampled_nodes, num_sampled_edges,
               dtype=torch.float32, device=None, edge_index_there=None) -> list[LayerAdj]:
    """Independent: the per-layer blocks of a sampled batch, outermost layer first
    (see the module docstring).  Edges not sorted by destination (typed sampling)
    are sorted once, stably (the hop prefixes survive the sort).  Built where
    ``edge_index`` is: on the host by the compiled pass, on a device by torch
    operations (:func:`csr_on_device`); ``device``: the blocks' place (a host-built
    CSR crosses once, all layers being views of it; ``edge_index_there``: ``edge_index``
    on ``device`` already, which the blocks then view instead of copying it again)."""
    ncum, ecum = _cumsum(num_sampled_nodes), _cumsum(num_sampled_edges)
    L = len(num_sampled_edges)
    n_rows, n_all, E = ncum[L], ncum[-1], ecum[L]
    src, dst = edge_index[0, :E].contiguous(), edge_index[1, :E].contiguous()
    if src.device.type == "cpu":
        crow, col, order = _csr_on_host(src, dst, n_rows, n_all)
    else:
        crow, col, order = csr_on_device(src, dst, n_rows, n_all)
    ei = edge_index[:, :E] if order is None else torch.stack([src[order], dst[order]])
    eid = e_id[:E] if order is None else e_id[:E][order.to(e_id.device)]
    # each layer's edge count: one read (the host's CSR is in host memory already)
    ends = crow[torch.tensor(ncum[:L + 1], device=crow.device)].tolist()
    dev = crow.device if device is None else torch.device(device)
    if dev != crow.device:
        crow, col = pinned(crow).to(dev, non_blocking=True), pinned(col).to(dev, non_blocking=True)
        there = edge_index_there is not None and order is None and edge_index_there.device == dev
        ei = edge_index_there[:, :E] if there else pinned(ei).to(dev, non_blocking=True)
    ones = torch.ones(E, dtype=dtype, device=dev)
    out = []
    for i in range(L):
        hops = L - i
        nd, ns = ncum[hops], ncum[hops + 1]
        m = ends[hops]
        adj = _csr(crow[: nd + 1], col[:m], ones[:m], nd, ns)
        out.append(LayerAdj(adj, (ns, nd), ei[:, :m], eid[:m]))
    return out


def _csr_on_host(src: torch.Tensor, dst: torch.Tensor, n_rows: int, n_all: int):
    """The compiled pass: ``(crow, col, order)``, ``order`` the stable sort by
    destination where the edges were not sorted (else None)."""
    E = len(src)
    indptr = np.empty(n_rows + 1, np.int64)
    cols = np.empty(E, np.int64)
    rc = _ext.build_csr(src.numpy(), dst.numpy(), n_rows, n_all, False, indptr, cols)
    order = None
    if rc != 0:                                  # not sorted by destination (or ids out of range)
        order = torch.argsort(dst, stable=True)
        rc = _ext.build_csr(src[order].numpy(), dst[order].numpy(), n_rows, n_all, False, indptr, cols)
        if rc != 0:
            raise ValueError(f"MiniBatch.adjs: edge_index holds ids outside the batch's {n_all} nodes "
                             f"(or edges of hop h not into the nodes of hop h-1)")
    return torch.from_numpy(indptr), torch.from_numpy(cols), order


def csr_on_device(src: torch.Tensor, dst: torch.Tensor, n_rows: int, n_all: int):
    """:func:`_csr_on_host` by torch operations on any device (the GPU's blocks; its
    CPU twin is tested against the compiled pass): row pointers from a count of the
    destinations, one stable sort where they are not sorted yet (the homogeneous
    samplers make them sorted), and one host read for that fact and the ids' range."""
    if len(dst) == 0:
        return torch.zeros(n_rows + 1, dtype=torch.int64, device=dst.device), src.contiguous(), None
    facts = torch.stack([(dst[1:] >= dst[:-1]).all(), dst.min() >= 0, dst.max() < n_rows,
                         src.min() >= 0, src.max() < n_all]).tolist()
    if not all(facts[1:]):
        raise ValueError(f"MiniBatch.adjs: edge_index holds ids outside the batch's {n_all} nodes "
                         f"(or edges of hop h not into the nodes of hop h-1)")
    order = None
    if not facts[0]:
        order = torch.argsort(dst, stable=True)
        src, dst = src[order], dst[order]
    crow = torch.zeros(n_rows + 1, dtype=torch.int64, device=dst.device)
    torch.cumsum(torch.bincount(dst, minlength=n_rows), 0, out=crow[1:])
    return crow, src.contiguous(), order
