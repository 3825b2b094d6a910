"""The mini-batch record a :class:`~hpcgnn.sampling.NeighborSampler` produces."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import partial
from typing import Callable, NamedTuple

import numpy as np
import torch

from ..devices import pinned, wait_on
from ..graph.row_refs import RowRefs
from .blocks import LayerAdj, build_adjs
from .features import fetch_features
from .hetero import to_hetero


#: The keys of the global ids and the types in ``Block.srcdata`` / ``dstdata`` /
#: ``edata`` (DGL's ``dgl.NID``, ``dgl.EID``, ``dgl.NTYPE``, ``dgl.ETYPE``).
NID = EID = "_ID"
NTYPE = ETYPE = "_TYPE"


class _Count(int):
    """A count that is also callable, for DGL code: ``block.num_dst_nodes()`` and
    ``block.num_dst_nodes`` both give it."""

    def __call__(self, ntype=None) -> int:
        return int(self)


class Block(NamedTuple):
    """One layer's bipartite graph (a DGL message-flow graph): messages go from
    ``src_nodes`` to ``dst_nodes`` (global ids; ``dst_nodes`` is a prefix of
    ``src_nodes``) along ``edge_index`` (``[2, E]``: row 0 indexes ``src_nodes``, row
    1 ``dst_nodes``), ``e_id`` the edges' global ids.  ``adj_of``: gives the layer's
    CSR (:attr:`adj`, built once per batch by the compiled pass, on first use), which
    :mod:`hpcgnn.nn`'s layers aggregate with."""
    src_nodes: torch.Tensor
    dst_nodes: torch.Tensor
    edge_index: torch.Tensor
    e_id: torch.Tensor
    adj_of: Callable | None = None
    e_type: torch.Tensor | None = None     # [E] edge type ids (typed graphs)
    n_type: torch.Tensor | None = None     # [num_src] node type ids (typed graphs)

    is_block = True     # DGL's flag: dst_nodes are the first src_nodes

    @property
    def adj(self) -> LayerAdj | None:
        """The layer's ``[num_dst, num_src]`` CSR with ``edge_index`` sorted by
        destination (:class:`~hpcgnn.sampling.blocks.LayerAdj`), or None."""
        return None if self.adj_of is None else self.adj_of()

    def number_of_src_nodes(self, ntype=None) -> int:
        return len(self.src_nodes)

    def number_of_dst_nodes(self, ntype=None) -> int:
        return len(self.dst_nodes)

    def in_degrees(self) -> torch.Tensor:
        """Edges into each destination (DGL's ``block.in_degrees()``)."""
        return torch.bincount(self.edge_index[1], minlength=len(self.dst_nodes))

    def out_degrees(self) -> torch.Tensor:
        """Edges out of each source within this block."""
        return torch.bincount(self.edge_index[0], minlength=len(self.src_nodes))

    @property
    def num_src_nodes(self) -> int:
        """Source node count (also callable, as DGL's method: ``num_src_nodes()``)."""
        return _Count(len(self.src_nodes))

    @property
    def num_dst_nodes(self) -> int:
        """Destination node count (also callable: ``num_dst_nodes()``)."""
        return _Count(len(self.dst_nodes))

    def num_edges(self, etype=None) -> int:
        """Edge count (DGL's ``block.num_edges()``)."""
        return self.edge_index.shape[1]

    @property
    def srcdata(self) -> dict:
        """``{NID: src_nodes}`` (DGL's ``block.srcdata[dgl.NID]``), and the node types
        under ``NTYPE`` on a typed graph."""
        return {NID: self.src_nodes, **({NTYPE: self.n_type} if self.n_type is not None else {})}

    @property
    def dstdata(self) -> dict:
        """``{NID: dst_nodes}`` (and ``NTYPE``)."""
        nd = len(self.dst_nodes)
        return {NID: self.dst_nodes, **({NTYPE: self.n_type[:nd]} if self.n_type is not None else {})}

    @property
    def edata(self) -> dict:
        """``{EID: e_id}``, and the edge types under ``ETYPE`` on a typed graph (DGL's
        ``block.edata[dgl.ETYPE]``, what ``RelGraphConv`` takes)."""
        return {EID: self.e_id, **({ETYPE: self.e_type} if self.e_type is not None else {})}

    def to(self, device, non_blocking: bool = False) -> "Block":
        """The block with its tensors on ``device`` (DGL's ``block.to(device)``)."""
        moved = [t if t is None or callable(t) else t.to(device, non_blocking=non_blocking) for t in self]
        moved[4] = None if self.adj_of is None else _Moved(self.adj_of, device)
        return Block(*moved)


class _Moved:
    """A block's CSR on another device, moved once, on first use."""

    def __init__(self, adj_of: Callable, device) -> None:
        self.adj_of, self.device, self.adj = adj_of, device, None

    def __call__(self) -> LayerAdj:
        if self.adj is None:
            adj = self.adj_of()
            self.adj = adj if adj[0].device == torch.device(self.device) else adj.to(self.device)
        return self.adj


def _layer_adj(batch: "MiniBatch", i: int) -> LayerAdj:
    return batch.adjs[i]


@dataclass
class MiniBatch:
    """A sampled sub-graph in PyTorch Geometric's layout (what ``NeighborLoader``
    yields).

    ``n_id``: global node ids, the ``batch_size`` seeds first, then the nodes first
    reached at hop 1, hop 2, ...; ``edge_index`` (``[2, E]`` local ids, source ->
    target: row 0 the sampled neighbor, row 1 the node it was sampled for, so
    messages flow towards the seeds; for a graph sampled with ``edge_dir='out'`` this
    is the reverse of the stored edge), ``e_id`` the edges' global ids, the edges of
    hop 1 first.  ``num_sampled_nodes[0] == batch_size`` and ``num_sampled_nodes[h]``
    / ``num_sampled_edges[h-1]`` count hop ``h``: exactly what PyG's
    ``trim_to_layer`` takes.  ``x`` / ``y``: filled by :meth:`fetch_features` (rows
    of every node of ``n_id``, as PyG does; use ``y[:batch_size]``).

    Link prediction batches (:class:`~hpcgnn.sampling.DistEdgeDataLoader`) add, as
    PyG's ``LinkNeighborLoader`` does: ``edge_label_index`` (``[2, B*(1+k)]`` local
    ids: the ``B`` seed edges, then the ``B*k`` negative pairs), ``edge_label`` (1.0
    for the seed edges, 0.0 for the negatives) and ``input_id`` (the seed edges'
    global ids)."""
    n_id: torch.Tensor
    e_id: torch.Tensor
    edge_index: torch.Tensor
    batch_size: int
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    edge_dir: str = "in"
    edge_label_index: torch.Tensor | None = None
    edge_label: torch.Tensor | None = None
    input_id: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)
    n_type: torch.Tensor | None = None
    e_type: torch.Tensor | None = None
    _adjs: list | None = field(default=None, repr=False, compare=False)
    _ready: object = field(default=None, repr=False, compare=False)

    @property
    def num_nodes(self) -> int:
        return len(self.n_id)

    @property
    def num_edges(self) -> int:
        return self.edge_index.shape[1]

    @property
    def adjs(self) -> list[LayerAdj]:
        """Per-layer trimmed blocks, outermost layer first (PyG's ``NeighborSampler``
        convention): entry ``i`` unpacks as ``(adj_t, (num_src, num_dst))``, a
        ``[num_dst, num_src]`` sparse CSR matrix that stock PyG layers aggregate with
        one sparse product, and carries ``edge_index`` / ``e_id`` for layers that need
        edges (:class:`~hpcgnn.sampling.blocks.LayerAdj`).  A model reads them as
        ``for conv, (adj, size) in zip(convs, adjs): x = conv((x, x[:size[1]]), adj)``;
        the last layer's rows are the seeds'.  Built once per batch by one compiled
        pass, in ``x``'s dtype (float32 without features) and on ``x``'s device."""
        if self._adjs is None:
            x = self.x if isinstance(self.x, torch.Tensor) else None
            dtype = x.dtype if x is not None and x.is_floating_point() else torch.float32
            dev = x.device if x is not None else self.edge_index.device
            # built where the edges are (the compiled pass on the host, torch ops on a
            # device), then placed beside x
            self._adjs = build_adjs(self.edge_index, self.e_id, self.num_sampled_nodes, self.num_sampled_edges,
                                    dtype, dev)
        return self._adjs

    def stage(self, device, staging=None) -> "MiniBatch":
        """Make the batch what a model on ``device`` reads, off the training step (a
        loader's thread calls it): ``edge_index``, ``x``, ``y`` and the per-layer
        blocks (built here) on ``device``, copied on ``staging``'s stream
        (:class:`~hpcgnn.devices.Staging`), an event marking when they are there
        (:meth:`wait_ready`).  ``n_id``/``e_id`` stay where they are.  Counts the bytes
        that crossed to the device in ``extra["h2d_bytes"]``.  Returns ``self``."""
        dev = torch.device(device)
        moved, host_edges = 0, self.edge_index
        for name in ("edge_index", "y", "x"):
            t = getattr(self, name)
            if isinstance(t, torch.Tensor) and t.device != dev:
                moved += t.numel() * t.element_size()
                setattr(self, name, pinned(t).to(dev, non_blocking=True))
        if self.edge_label_index is None and len(self.num_sampled_edges) and self._adjs is None:
            x = self.x if isinstance(self.x, torch.Tensor) else None
            dtype = x.dtype if x is not None and x.is_floating_point() else torch.float32
            # the host's compiled pass where the edges were sampled on the host; the CSR then
            # crosses once (row pointers and columns; the values are made there)
            self._adjs = build_adjs(host_edges, self.e_id, self.num_sampled_nodes, self.num_sampled_edges, dtype,
                                    dev, edge_index_there=self.edge_index)
            if host_edges.device != dev and self._adjs:
                a = self._adjs[0].adj_t
                moved += (a.crow_indices().numel() + a.col_indices().numel()) * 8
        self.extra["h2d_bytes"] = self.extra.get("h2d_bytes", 0) + moved
        self._ready = staging.done() if staging is not None else None
        return self

    def wait_ready(self) -> "MiniBatch":
        """On the consuming thread: its device stream waits for :meth:`stage`'s copies
        (no host sync; a no-op on a CPU or for a batch not staged)."""
        ev, self._ready = self._ready, None
        if ev is not None:
            ts = [self.x, self.y, self.edge_index]
            for a in self._adjs or ():
                ts += [a.adj_t.crow_indices(), a.adj_t.col_indices(), a.adj_t.values(), a.edge_index]
            wait_on(ev, ts, self.edge_index.device)
        return self

    @property
    def pyg_edge_index(self):
        """``edge_index`` as PyG's ``EdgeIndex`` sorted by destination, with its
        sparse size: PyG layers then reduce messages by segments instead of scatter
        (``SAGEConv(x, batch.pyg_edge_index)``; ``GraphConv`` fuses it into one sparse
        product).  Every node of the batch is computed in every layer; :attr:`adjs`
        computes only what the next layer reads."""
        from torch_geometric import EdgeIndex  # optional dependency of the batch

        n = self.num_nodes
        return EdgeIndex(self.edge_index, sparse_size=(n, n),
                         sort_order="col" if self.e_type is None else None)

    @property
    def seeds(self) -> torch.Tensor:
        return self.n_id[: self.batch_size]

    # PyG spells them this way in its model arguments
    @property
    def num_sampled_nodes_per_hop(self) -> list[int]:
        return self.num_sampled_nodes

    @property
    def num_sampled_edges_per_hop(self) -> list[int]:
        return self.num_sampled_edges

    def fetch_features(self, g, feat: str | None = "feat", label: str | None = "label",
                       device=None, label_rows: str = "all", feature_rows: str = "copy",
                       keep_half: bool = False) -> "MiniBatch":
        """:func:`hpcgnn.sampling.fetch_features` on this batch (``x`` and ``y``
        gathered from ``g``); returns ``self``."""
        return fetch_features(self, g, feat, label, device, label_rows, feature_rows, keep_half)

    def to(self, device, non_blocking: bool = False) -> "MiniBatch":
        """Move every tensor of the batch to ``device`` (ids, edges, ``x``/``y``, link
        labels, the ``adjs`` once built: their ``e_id`` stays in host memory), in place,
        and return the batch, as PyG's ``batch.to(device)``; ``x`` held as row
        addresses is read into a tensor first."""
        def move(t):
            if isinstance(t, RowRefs):
                t = t.materialize()
            return t.to(device, non_blocking=non_blocking) if isinstance(t, torch.Tensor) else t
        for f in fields(self):
            if f.name not in ("extra", "_adjs", "_ready"):
                setattr(self, f.name, move(getattr(self, f.name)))
        if self._adjs is not None:
            self._adjs = [a.to(device, non_blocking=non_blocking) for a in self._adjs]
        return self

    def to_hetero(self, g, feat: str | None = "feat", label: str | None = "label"):
        """A batch sampled on a graph with several types, split by type into a
        :class:`~hpcgnn.sampling.hetero.HeteroBatch` (``x_dict``, ``edge_index_dict``,
        ``.to_pyg()`` -> ``HeteroData``) with ``feat`` and the seeds' ``label``."""
        return to_hetero(self, g, feat, label)

    def __iter__(self):
        """DGL's loop ``for input_nodes, seeds, blocks in loader`` (node batches):
        ``(n_id, seeds, to_blocks())``.  ``x``/``y`` hold the features and labels
        already (no second read of ``g.ndata`` is needed)."""
        if getattr(self, "edge_label_index", None) is not None:
            raise TypeError("MiniBatch: a link prediction batch does not unpack as DGL's (input_nodes, "
                            "pair_graph, neg_pair_graph, blocks); use its fields (edge_label_index, ...)")
        return iter((self.n_id, self.seeds, self.to_blocks()))

    def to_blocks(self) -> list[Block]:
        """Per-layer bipartite views, outermost layer first (DGL's MFG order): layer
        ``i`` of an ``L``-layer model computes the nodes of hops ``< L-1-i`` from those
        of hops ``<= L-i`` along the edges of hops ``<= L-i``; the last block's
        ``dst_nodes`` are the seeds.  Views, no copies of ``edge_index``."""
        L = len(self.num_sampled_edges)
        ncum = [0]
        for c in self.num_sampled_nodes:
            ncum.append(ncum[-1] + c)
        ecum = [0]
        for c in self.num_sampled_edges:
            ecum.append(ecum[-1] + c)
        blocks = []
        for i in range(L):
            hop = L - i                       # this layer uses hops 1..hop
            ns, nd, ne = ncum[hop + 1], ncum[hop], ecum[hop]
            blocks.append(Block(self.n_id[:ns], self.n_id[:nd], self.edge_index[:, :ne], self.e_id[:ne],
                                partial(_layer_adj, self, i),
                                None if self.e_type is None else self.e_type[:ne],
                                None if self.n_type is None else self.n_type[:ns]))
        return blocks

    def to_pyg(self):
        """A ``torch_geometric.data.Data`` with the same fields (needs PyG)."""
        from torch_geometric.data import Data   # PyG loaded by the code that uses it (start-up cost)

        d = Data(x=self.x, y=self.y, edge_index=self.edge_index, n_id=self.n_id, e_id=self.e_id,
                 batch_size=self.batch_size, num_sampled_nodes=list(self.num_sampled_nodes),
                 num_sampled_edges=list(self.num_sampled_edges), num_nodes=self.num_nodes)
        for k in ("edge_label_index", "edge_label", "input_id"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d

    def drop_edges(self, eids: np.ndarray) -> "MiniBatch":
        """Remove the sampled edges whose global id is in ``eids`` (the hop counts
        follow; nodes stay).  Returns ``self``."""
        ex = np.sort(np.asarray(eids, dtype=np.int64).reshape(-1))
        if len(ex) == 0 or self.num_edges == 0:
            return self
        e = self.e_id.numpy()
        at = np.minimum(np.searchsorted(ex, e), len(ex) - 1)
        keep = ex[at] != e
        if keep.all():
            return self
        ends = np.cumsum(self.num_sampled_edges)
        kept = np.concatenate([[0], np.cumsum(keep)])
        self.num_sampled_edges = [int(kept[b]) - int(kept[a]) for a, b in zip([0, *ends[:-1]], ends)]
        k = torch.from_numpy(keep)
        self.e_id = self.e_id[k]
        self.edge_index = self.edge_index[:, k]
        self._adjs = None
        if self.e_type is not None:
            self.e_type = self.e_type[k]
        return self
