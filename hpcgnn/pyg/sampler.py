"""PyG's :class:`~torch_geometric.sampler.BaseSampler` over hpcgnn's compiled
:class:`~hpcgnn.sampling.NeighborSampler`: ``NodeLoader`` and ``LinkLoader`` sample
a :class:`~hpcgnn.graph.DistGraph` where it lives (one-sided reads, the C kernels).

The class is named ``HpcgnnNeighborSampler`` and exported as
``DistNeighborSampler`` too.  Its ``__name__`` is not ``"DistNeighborSampler"`` on
purpose: PyG's loaders recognise their own deprecated distributed sampler by that
class name and then skip the :class:`FeatureStore` (they read ``x``/``y`` from the
sampler's metadata instead).  hpcgnn's sampler returns the structure only, and the
loader reads features through :class:`~hpcgnn.pyg.DistFeatureStore`, PyG's
documented route."""
from __future__ import annotations

import math
import numbers
import os
from typing import Optional, Union

import numpy as np
import torch
from torch_geometric.sampler import (BaseSampler, EdgeSamplerInput, NegativeSampling, NodeSamplerInput,
                                     SamplerOutput)

from ..errors import InputError
from ..graph import DistGraph
from ..sampling import MiniBatch, NeighborSampler
from .checks import homogeneous_graph
from .feature_store import DistFeatureStore
from .graph_store import DistGraphStore

#: ``subgraph_type`` values of PyG's ``NeighborSampler`` this sampler gives.
SUBGRAPH_TYPES = ("directional",)


def graph_of(data) -> DistGraph:
    """The :class:`DistGraph` behind ``data``: a DistGraph, a :class:`DistGraphStore`
    or a ``(feature_store, graph_store)`` pair as PyG's loaders take."""
    if isinstance(data, DistGraph):
        return data
    if isinstance(data, DistGraphStore):
        return data.graph
    if isinstance(data, (tuple, list)) and len(data) == 2 and isinstance(data[1], DistGraphStore):
        if not isinstance(data[0], DistFeatureStore):
            raise InputError(f"hpcgnn.pyg: the feature store must be a DistFeatureStore, got "
                             f"{type(data[0]).__name__}")
        return data[1].graph
    raise InputError("hpcgnn.pyg sampler: data must be a DistGraph, a DistGraphStore or the pair "
                     f"(DistFeatureStore, DistGraphStore) from hpcgnn.pyg.to_pyg_backend; got {type(data).__name__}")


class HpcgnnNeighborSampler(BaseSampler):
    """``HpcgnnNeighborSampler(data, num_neighbors)``: PyG's ``NeighborSampler``
    arguments where hpcgnn has them.  ``data``: ``(feature_store, graph_store)``
    from :func:`~hpcgnn.pyg.to_pyg_backend` (or the DistGraph); ``num_neighbors``:
    fanout per hop, the seeds' hop first (``-1``: all neighbours); ``replace``:
    with replacement; ``weight_attr``: an edge feature of the graph used as
    sampling weights; ``seed``: seeds this sampler's generator (batches repeat
    for the same seed and order); ``nthreads``: OpenMP threads of the kernel.
    Neighbours are those the graph was partitioned for (``edge_dir='in'``:
    in-neighbours, as PyG samples); ``edge_index`` row 0 is the neighbour, row 1
    the node it was sampled for.  Temporal and disjoint sampling are refused.
    Creation is independent; sampling is independent (one-sided reads).  Use the
    loaders with ``num_workers=0``: the sampler reads MPI windows of this process."""

    def __init__(self, data, num_neighbors, *, replace: bool = False, subgraph_type: str = "directional",
                 disjoint: bool = False, time_attr: Optional[str] = None, weight_attr: Optional[str] = None,
                 seed: Optional[int] = None, nthreads: int = 1):
        g = homogeneous_graph(graph_of(data), "hpcgnn.pyg sampler",
                              " (typed graphs: hpcgnn.sampling.NeighborSampler and MiniBatch.to_hetero)")
        if isinstance(num_neighbors, dict) or not hasattr(num_neighbors, "__len__") or \
                not all(isinstance(k, numbers.Integral) for k in num_neighbors):
            raise InputError(f"hpcgnn.pyg sampler: num_neighbors must be a list of integers (one per hop), "
                             f"got {num_neighbors!r}")
        if subgraph_type not in SUBGRAPH_TYPES:
            raise InputError(f"hpcgnn.pyg sampler: subgraph_type {subgraph_type!r} is not supported "
                             f"(supported: {SUBGRAPH_TYPES})")
        if disjoint:
            raise InputError("hpcgnn.pyg sampler: disjoint=True (one subgraph per seed) is not supported")
        if time_attr is not None:
            raise InputError(f"hpcgnn.pyg sampler: temporal sampling (time_attr={time_attr!r}) is not supported")
        if weight_attr is not None and weight_attr not in g.edata:
            raise InputError(f"hpcgnn.pyg sampler: weight_attr {weight_attr!r} is not an edge feature of graph "
                             f"{g.graph_name!r} (edge features: {sorted(g.edata) or 'none'})")
        self.graph = g
        self.num_neighbors = [int(k) for k in num_neighbors]
        self.sampler = NeighborSampler(self.num_neighbors, edge_dir=g.edge_dir, replace=replace, prob=weight_attr,
                                       seed=seed, nthreads=nthreads)
        self._pid = os.getpid()

    def _check_process(self) -> None:
        if os.getpid() != self._pid:
            raise InputError("hpcgnn.pyg sampler: called in a DataLoader worker process; use num_workers=0 "
                             "(the sampler reads the graph's MPI windows from the process that created it)")

    def sample(self, seeds) -> MiniBatch:
        """Independent: hpcgnn's multi-hop sample around ``seeds`` (unique global node
        ids), as :meth:`hpcgnn.sampling.NeighborSampler.sample` gives it."""
        self._check_process()
        return self.sampler.sample(self.graph, seeds)

    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs) -> SamplerOutput:
        """Independent: the sample around ``index.node`` (the seeds first in
        ``node``), for ``NodeLoader``."""
        _homogeneous_input(index.input_type, index.time, "NodeLoader")
        seeds = _node_ids(index.node, self.graph.num_nodes(), "NodeLoader: input_nodes")
        if len(np.unique(seeds)) != len(seeds):
            raise InputError("hpcgnn.pyg sampler: a NodeLoader batch holds repeated seed nodes; give "
                             "input_nodes without repeats")
        mb = self.sample(seeds)
        return _output(mb, metadata=(index.input_id, None))

    def sample_from_edges(self, index: EdgeSamplerInput,
                          neg_sampling: Optional[NegativeSampling] = None) -> SamplerOutput:
        """Independent: the sample around the endpoints of ``index`` (and of the
        negatives drawn as ``neg_sampling`` says: ``binary`` pairs or ``triplet``
        destinations), for ``LinkLoader``; metadata in ``LinkLoader``'s order."""
        _homogeneous_input(index.input_type, index.time, "LinkLoader")
        n = self.graph.num_nodes()
        src = torch.from_numpy(_node_ids(index.row, n, "LinkLoader: edge_label_index[0]"))
        dst = torch.from_numpy(_node_ids(index.col, n, "LinkLoader: edge_label_index[1]"))
        num_pos = src.numel()
        label = index.label
        mode = None if neg_sampling is None else NegativeSampling.cast(neg_sampling)
        if mode is not None and num_pos:
            num_neg = math.ceil(num_pos * mode.amount)
            if mode.is_binary():
                src = torch.cat([src, mode.sample(num_neg, "src", n).to(torch.long)])
                dst = torch.cat([dst, mode.sample(num_neg, "dst", n).to(torch.long)])
                label = torch.ones(num_pos) if label is None else label
                label = torch.cat([label, label.new_zeros((num_neg,) + tuple(label.shape[1:]))])
            else:
                k = max(1, math.ceil(mode.amount))
                dst = torch.cat([dst, mode.sample(num_pos * k, "dst", n).to(torch.long)])
        seeds, inverse = torch.cat([src, dst]).unique(return_inverse=True)
        mb = self.sample(seeds)
        if mode is None or mode.is_binary():
            eli = inverse.view(2, -1)
            meta = (index.input_id, eli, label, None)
        else:
            k = max(1, math.ceil(mode.amount))
            neg = inverse[2 * num_pos:].view(num_pos, k)
            meta = (index.input_id, inverse[:num_pos], inverse[num_pos:2 * num_pos],
                    neg.squeeze(-1) if k == 1 else neg, None)
        return _output(mb, metadata=meta)

    @property
    def edge_permutation(self) -> None:
        """None: ``e_id`` are the graph's global edge ids already."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.graph.graph_name!r}, num_neighbors={self.num_neighbors})"


#: The name the issue and PyG users look for (see the module doc for why the class has another).
DistNeighborSampler = HpcgnnNeighborSampler


def _output(mb: MiniBatch, metadata) -> SamplerOutput:
    """A :class:`MiniBatch` as PyG's record (``row``: neighbour, ``col``: the node
    it was sampled for, local ids)."""
    return SamplerOutput(node=mb.n_id, row=mb.edge_index[0], col=mb.edge_index[1], edge=mb.e_id,
                         batch=None, num_sampled_nodes=list(mb.num_sampled_nodes),
                         num_sampled_edges=list(mb.num_sampled_edges), metadata=metadata)


def _homogeneous_input(input_type, time, what: str) -> None:
    if input_type is not None:
        raise InputError(f"hpcgnn.pyg sampler: {what} input of type {input_type!r}; typed (HeteroData) "
                         "loading is not supported by hpcgnn.pyg, only homogeneous graphs")
    if time is not None:
        raise InputError(f"hpcgnn.pyg sampler: {what} input times (temporal sampling) are not supported")


def _node_ids(ids: Union[torch.Tensor, np.ndarray], n: int, what: str) -> np.ndarray:
    a = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if a.dtype.kind not in "iu" and a.size:
        raise InputError(f"hpcgnn.pyg sampler: {what} must be integer node ids, got dtype {a.dtype}")
    a = np.ascontiguousarray(a.astype(np.int64, copy=False).reshape(-1))
    if a.size and (a.min() < 0 or a.max() >= n):
        raise InputError(f"hpcgnn.pyg sampler: {what}: node id {int(a[(a < 0) | (a >= n)][0])} is out of "
                         f"range [0, {n})")
    return a
