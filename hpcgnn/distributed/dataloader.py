"""``DistNodeDataLoader`` and ``DistEdgeDataLoader`` with DGL's argument order.

DGL's take ``(g, nids, graph_sampler, device=None, **kwargs)`` with ``batch_size``,
``shuffle``, ``drop_last`` by keyword; hpcgnn's
(:class:`hpcgnn.sampling.DistNodeDataLoader`) take ``batch_size`` fourth.  DGL's
loaders read no features (a script reads ``g.ndata[...][input_nodes]`` itself), so
these read none unless ``feat=``/``label=`` are given; then every batch carries
``x``/``y`` gathered ahead, in the background.  The edge loader yields DGL's tuples
``(input_nodes, pair_graph, neg_pair_graph, blocks)`` (:class:`LinkBatch`).
"""
from __future__ import annotations

from ..errors import InputError
from ..sampling import DistEdgeDataLoader as _DistEdgeDataLoader
from ..sampling import DistNodeDataLoader as _DistNodeDataLoader
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
