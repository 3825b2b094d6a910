"""``DistNodeDataLoader`` and ``DistEdgeDataLoader`` with DGL's argument order.

DGL's take ``(g, nids, graph_sampler, device=None, **kwargs)`` with ``batch_size``,
``shuffle``, ``drop_last`` by keyword; hpcgnn's
(:class:`hpcgnn.sampling.DistNodeDataLoader`) take ``batch_size`` fourth.  DGL's
loaders read no features (a script reads ``g.ndata[...][input_nodes]`` itself), so
these read none unless ``feat=``/``label=`` are given; then every batch carries
``x``/``y`` gathered ahead, in the background.  The edge loader yields DGL's tuples
``(input_nodes, pair_graph, neg_pair_graph, blocks)`` (:class:`LinkBatch`).  On a
graph of several node or edge types the node loader yields DGL's heterogeneous
batches: ``{ntype: ids}`` dicts and heterogeneous blocks (:class:`HeteroNodeBatch`).
``DistDataLoader`` is DGL's loader of a plain dataset (seed ids) through a
``collate_fn``.
"""
from __future__ import annotations

import torch

from ..errors import InputError
from ..nn.heteroblock import to_hetero_blocks
from ..sampling import DistEdgeDataLoader as _DistEdgeDataLoader
from ..sampling import DistNodeDataLoader as _DistNodeDataLoader
from ..sampling.batch import NID
from ..sampling.pair_graph import pair_graphs


def _dgl_options(what: str, kw: dict, queue_size, num_workers, use_ddp, ddp_seed) -> dict:
    """DGL's loader options: ``queue_size`` becomes ``prefetch`` (batches made
    ahead); ``num_workers`` (sampler ranks come from the layout), ``use_ddp`` (each
    trainer iterates its own ids) and ``ddp_seed`` (``seed=``) are accepted."""
    if queue_size is not None:
        if "prefetch" in kw:
            raise InputError(f"{what}: give queue_size= (DGL's name) or prefetch=, not both")
        kw["prefetch"] = queue_size
    if ddp_seed is not None and "seed" not in kw:
        kw["seed"] = ddp_seed
    return kw


class DistNodeDataLoader(_DistNodeDataLoader):
    """DGL's ``DistNodeDataLoader(g, nids, graph_sampler, device=None, batch_size=1,
    shuffle=False, drop_last=False)``: a :class:`hpcgnn.sampling.DistNodeDataLoader`
    (collective over the trainers to create, independent to iterate).  Batches unpack
    as DGL's ``input_nodes, seeds, blocks``.  ``feat``/``label`` (default None: read
    nothing, as DGL) and hpcgnn's other keywords (``seed``, ``prefetch``, ``mode``,
    ``cache_bytes``, ...) are passed on; ``device`` is where ``x``/``y`` are assembled
    when read (blocks stay in host memory)."""

    def __init__(self, g, nids, graph_sampler, device=None, *, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, feat=None, label=None, queue_size=None, num_workers=None,
                 use_ddp=None, ddp_seed=None, **kw):
        kw = _dgl_options("DistNodeDataLoader", kw, queue_size, num_workers, use_ddp, ddp_seed)
        super().__init__(g, nids, graph_sampler, batch_size, shuffle, drop_last, feat=feat, label=label,
                         device=device, **kw)
        # a graph of several node or edge types yields DGL's heterogeneous batches
        self._typed = len(g.ntypes) > 1 or len(g.canonical_etypes) > 1
        self._seed_types = list(nids) if isinstance(nids, dict) else None

    def __iter__(self):
        epoch = super().__iter__()
        if not self._typed:
            yield from epoch
            return
        try:
            for b in epoch:
                yield HeteroNodeBatch(b, self.g, self._seed_types)
        finally:
            epoch.close()          # an epoch left early releases its producer now


class HeteroNodeBatch(tuple):
    """A node batch of a typed graph as DGL's ``DistNodeDataLoader`` yields it:
    ``(input_nodes, seeds, blocks)`` with ``input_nodes`` ``{ntype: per-type ids}`` of
    the first block's sources (every node type, some maybe empty), ``seeds``
    ``{ntype: per-type ids}`` (the types of the ``nids`` dict, else those with seeds),
    in the order of the last block's destinations (the rows of the model's output),
    and ``blocks`` a list of :class:`~hpcgnn.nn.HeteroBlock` (:func:`~hpcgnn.nn.to_hetero_blocks`).
    Its attributes are those of the typed :class:`~hpcgnn.sampling.MiniBatch` it was
    made from (:attr:`minibatch`: ``n_id``, ``n_type``, ``x`` with ``feat=``, ...)."""

    minibatch = None

    def __new__(cls, b, g, seed_types=None):
        blocks = to_hetero_blocks(b, g, drop_empty_dst=True)
        first, last = blocks[0], blocks[-1]
        input_nodes = {t: first.srcnodes[t].data[NID] for t in first.ntypes}
        types = seed_types if seed_types is not None else [t for t in last.ntypes if last.num_dst_nodes(t)]
        seeds = {t: last.dstnodes[t].data[NID] for t in types}
        self = super().__new__(cls, (input_nodes, seeds, blocks))
        self.minibatch = b
        return self

    def __getattr__(self, name):      # only for names a tuple lacks: the MiniBatch's fields
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.minibatch, name)


class LinkBatch(tuple):
    """A link batch as DGL's ``DistEdgeDataLoader`` yields it: ``(input_nodes,
    pair_graph, neg_pair_graph, blocks)``, or ``(input_nodes, pair_graph, blocks)``
    without a negative sampler.  ``input_nodes`` are the global ids of the first
    block's sources; the pair graphs (:class:`~hpcgnn.sampling.pair_graph.PairGraph`)
    have the last block's destinations as nodes.  Its attributes are those of the
    PyG-shaped :class:`~hpcgnn.sampling.MiniBatch` it was made from
    (``edge_label_index``, ``x`` with ``feat=``, ...; :attr:`minibatch`)."""

    minibatch = None

    def __new__(cls, b):
        pos, neg = pair_graphs(b)
        self = super().__new__(cls, (b.n_id, pos, *((neg,) if neg is not None else ()), b.to_blocks()))
        self.minibatch = b
        return self

    def __getattr__(self, name):      # only for names a tuple lacks: the MiniBatch's fields
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.minibatch, name)


class DistEdgeDataLoader(_DistEdgeDataLoader):
    """DGL's ``DistEdgeDataLoader(g, eids, graph_sampler, device=None, batch_size=1,
    shuffle=False, drop_last=False, exclude=None, reverse_eids=None,
    negative_sampler=None)``: a :class:`hpcgnn.sampling.DistEdgeDataLoader` (collective
    over the trainers to create, independent to iterate).  Its batches are DGL's
    tuples ``(input_nodes, pair_graph, neg_pair_graph, blocks)`` (``(input_nodes,
    pair_graph, blocks)`` without ``negative_sampler``; :class:`LinkBatch`, whose
    attributes are the PyG-shaped batch's: ``edge_label_index``, ``edge_label``).
    ``device`` must be None or the CPU (move the graphs and blocks with
    ``.to(device)``)."""

    def __init__(self, g, eids, graph_sampler, device=None, *, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, feat=None, label=None, reverse_etypes=None, queue_size=None,
                 num_workers=None, use_ddp=None, ddp_seed=None, **kw):
        if device is not None and str(device) != "cpu":
            raise InputError(f"DistEdgeDataLoader: device={device!r}: link batches are made in host memory; "
                             "move them with .to(device)")
        if reverse_etypes is not None:
            raise InputError("DistEdgeDataLoader: reverse_etypes is not supported; exclude='reverse_id' with "
                             "reverse_eids= (homogeneous edge ids) excludes reverse edges")
        kw = _dgl_options("DistEdgeDataLoader", kw, queue_size, num_workers, use_ddp, ddp_seed)
        super().__init__(g, eids, graph_sampler, batch_size, shuffle, drop_last, feat=feat, label=label, **kw)

    def __iter__(self):
        epoch = super().__iter__()
        try:
            for b in epoch:
                yield LinkBatch(b)
        finally:
            epoch.close()          # an epoch left early releases its producer now


class DistDataLoader:
    """DGL's ``DistDataLoader(dataset, batch_size, shuffle=False, collate_fn=None,
    drop_last=False, queue_size=None)``: batches of a dataset (anything with ``len``
    and indexing by position, e.g. a tensor of seed ids), each a list of its items
    passed through ``collate_fn`` as DGL's, made in this process (DGL's sampler
    processes are the layout's sampler ranks in hpcgnn; its graph loaders are
    :class:`DistNodeDataLoader` and :class:`DistEdgeDataLoader`).  Independent."""

    def __init__(self, dataset, batch_size: int, shuffle: bool = False, collate_fn=None, drop_last: bool = False,
                 queue_size=None):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"DistDataLoader: batch_size must be a positive int, got {batch_size!r}")
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, shuffle
        self.collate_fn, self.drop_last = collate_fn, drop_last

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        n = len(self.dataset)
        order = torch.randperm(n) if self.shuffle else torch.arange(n)
        for i in range(len(self)):
            idx = order[i * self.batch_size:(i + 1) * self.batch_size]
            items = [self.dataset[j] for j in idx.tolist()]        # a list of items, as DGL's
            yield self.collate_fn(items) if self.collate_fn is not None else items
