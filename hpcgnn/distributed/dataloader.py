"""``DistNodeDataLoader`` and ``DistEdgeDataLoader`` with DGL's argument order.

DGL's take ``(g, nids, graph_sampler, device=None, **kwargs)`` with ``batch_size``,
``shuffle``, ``drop_last`` by keyword; hpcgnn's
(:class:`hpcgnn.sampling.DistNodeDataLoader`) take ``batch_size`` fourth.  DGL's
loaders read no features (a script reads ``g.ndata[...][input_nodes]`` itself), so
these read none unless ``feat=``/``label=`` are given; then every batch carries
``x``/``y`` gathered ahead, in the background.
"""
from __future__ import annotations

from ..errors import InputError
from ..sampling import DistEdgeDataLoader as _DistEdgeDataLoader
from ..sampling import DistNodeDataLoader as _DistNodeDataLoader


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


class DistEdgeDataLoader(_DistEdgeDataLoader):
    """DGL's ``DistEdgeDataLoader(g, eids, graph_sampler, device=None, batch_size=1,
    shuffle=False, drop_last=False, exclude=None, reverse_eids=None,
    negative_sampler=None)``: a :class:`hpcgnn.sampling.DistEdgeDataLoader` (collective
    over the trainers to create).  Its batches are PyG-shaped link batches
    (``edge_label_index``, ``edge_label``); they do not unpack as DGL's ``(input_nodes,
    pair_graph, neg_pair_graph, blocks)``.  ``device`` must be None or the CPU."""

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
