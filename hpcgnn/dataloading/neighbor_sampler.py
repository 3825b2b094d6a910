"""DGL's neighbor samplers: fanouts listed from the input layer to the output
layer (the seeds' hop last), arguments in DGL's order.

hpcgnn's :class:`hpcgnn.sampling.NeighborSampler` lists fanouts in hop order (the
seeds' hop first, as PyG) and takes ``(fanouts, edge_dir, replace, prob)``; DGL's
``NeighborSampler([25, 10])`` samples 10 neighbors of each seed and 25 of each of
those, and takes ``(fanouts, edge_dir, prob, mask, replace, ...)``.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import InputError
from ..sampling import NeighborSampler as _HopSampler


class NeighborSampler(_HopSampler):
    """DGL's ``NeighborSampler(fanouts, edge_dir='in', prob=None, mask=None,
    replace=False)``: ``fanouts[i]`` neighbors per node for layer ``i`` counted from
    the input layer (``-1``: all; a dict ``{etype: k}`` per edge type).  ``prob`` and
    ``mask`` name an edge feature: weights, or a 0/1 (numeric) mask of the edges
    that may be drawn; give one of them.  ``prefetch_*`` (DGL puts those features on
    the blocks) is not supported: read ``g.ndata[name][input_nodes]``, or give the
    loader ``feat=``/``label=``.  ``output_device`` must be None or the CPU;
    ``fused`` is accepted and unused.  ``seed``/``nthreads`` as in
    :class:`hpcgnn.sampling.NeighborSampler`, whose ``fanouts`` attribute (hop
    order) this keeps; :attr:`dgl_fanouts` gives DGL's order.  Independent."""

    def __init__(self, fanouts, edge_dir: str = "in", prob: str | None = None, mask: str | None = None,
                 replace: bool = False, prefetch_node_feats=None, prefetch_labels=None, prefetch_edge_feats=None,
                 output_device=None, fused: bool = True, *, seed: int | None = None, nthreads: int = 1):
        what = type(self).__name__
        if isinstance(fanouts, (str, bytes)) or not hasattr(fanouts, "__len__"):
            raise InputError(f"{what}: fanouts must be a list of integers (input layer first), got {fanouts!r}")
        if prob is not None and mask is not None:
            raise InputError(f"{what}: give prob= or mask=, not both")
        for name, v in (("prefetch_node_feats", prefetch_node_feats), ("prefetch_labels", prefetch_labels),
                        ("prefetch_edge_feats", prefetch_edge_feats)):
            if v:
                raise InputError(f"{what}: {name} is not supported: read g.ndata[name][input_nodes] in the loop, "
                                 "or give the data loader feat=/label= (batch.x, batch.y)")
        if output_device is not None and str(output_device) != "cpu":
            raise InputError(f"{what}: output_device={output_device!r}: batches are made in host memory; give "
                             "the data loader device= for the features, or move blocks with .to(device)")
        super().__init__(list(fanouts)[::-1], edge_dir, replace, prob if mask is None else mask, seed=seed,
                         nthreads=nthreads)

    @property
    def dgl_fanouts(self) -> list:
        """The fanouts in DGL's order (input layer first)."""
        return self.fanouts[::-1]

    def __repr__(self):
        return (f"{type(self).__name__}(fanouts={self.dgl_fanouts}, edge_dir={self.edge_dir!r}, prob={self.prob!r}, "
                f"replace={self.replace})")


#: DGL's older name of the same sampler (an alias in DGL too).
MultiLayerNeighborSampler = NeighborSampler


class MultiLayerFullNeighborSampler(NeighborSampler):
    """DGL's ``MultiLayerFullNeighborSampler(num_layers, edge_dir='in', prob=None,
    mask=None)``: every neighbor at every layer (fanout ``-1``); edges of zero weight
    (``prob``) or outside ``mask`` are left out.  Independent."""

    def __init__(self, num_layers: int, edge_dir: str = "in", prob: str | None = None, mask: str | None = None,
                 **kw):
        if isinstance(num_layers, bool) or not isinstance(num_layers, (numbers.Integral, np.integer)) \
                or int(num_layers) < 1:
            raise InputError(f"MultiLayerFullNeighborSampler: num_layers must be a positive integer, "
                             f"got {num_layers!r}")
        super().__init__([-1] * int(num_layers), edge_dir, prob, mask, **kw)
