"""Multi-layer neighbor sampling into a PyG-shaped :class:`MiniBatch`."""
from __future__ import annotations

import threading

import numpy as np
import torch

from ..errors import InputError
from ..graph.dist_graph import as_ids
from ..devices import concrete
from .batch import MiniBatch
from .device import LocalCSR, Relabel, sample_hop
from .neighbor import (kernels, check_edge_dir, check_fanout, check_prob, etype_fanouts, make_seed, sample_edges,
                       sample_typed)


class NeighborSampler:
    """``NeighborSampler([15, 10, 5])``: hop ``h`` samples up to ``fanouts[h]``
    neighbors (``-1``: all) of the nodes first reached at hop ``h-1`` (hop 0: the
    seeds), as PyG's ``NeighborLoader`` does (each node is expanded once).  On a graph
    with several edge types a fanout is per edge type: an int for every type, or a
    dict ``{etype: k}`` (types not named: 0); the batch then carries ``e_type`` and
    ``n_type`` and :meth:`MiniBatch.to_hetero` splits it by type.  Node ids
    are relabelled to local ids with a C hash table in first-appearance order.

    ``edge_dir``, ``replace`` and ``prob`` as in :func:`sample_neighbors`.  ``seed``
    (int or None) seeds the sampler's own generator; ``sample(..., rng=)`` overrides
    it per call.  ``nthreads``: OpenMP threads of the kernel (1: this thread only).
    ``device`` (e.g. ``"cuda"``): sample there (:mod:`hpcgnn.sampling.device`): the
    seeds of this host's partitions by the device from its copy or mapping of the
    host's CSR, the others through RMA; the batch's tensors are on that device.  On a
    graph with one node and edge type, uniform (``prob=None``); others sample on the
    host.  The device's draws differ from the host kernel's for the same seed (the
    same distribution).  A copy sent to sampler ranks (pickled) samples on their host.
    """

    def __init__(self, fanouts, edge_dir: str = "in", replace: bool = False, prob: str | None = None,
                 *, seed: int | None = None, nthreads: int = 1, device=None):
        if isinstance(fanouts, (str, bytes)) or not hasattr(fanouts, "__len__"):
            raise InputError(f"NeighborSampler: fanouts must be a list of integers, got {fanouts!r}")
        if len(fanouts) == 0:
            raise InputError("NeighborSampler: fanouts is empty (give one fanout per layer)")
        self.fanouts = [dict(f) if isinstance(f, dict) else check_fanout(f, "NeighborSampler") for f in fanouts]
        for f in self.fanouts:
            if isinstance(f, dict):
                for v in f.values():
                    check_fanout(v, "NeighborSampler")
        if edge_dir not in ("in", "out"):
            raise InputError(f"NeighborSampler: edge_dir must be 'in' or 'out', got {edge_dir!r}")
        if prob is not None and not isinstance(prob, str):
            raise InputError(f"NeighborSampler: prob must be the name of an edge feature, got {prob!r}")
        self.edge_dir, self.replace, self.prob = edge_dir, bool(replace), prob
        self.nthreads = max(1, int(nthreads))
        self.device = None if device is None else concrete(device)
        self._csr: dict = {}
        self._rng = np.random.default_rng(seed)
        self._local = threading.local()

    def __getstate__(self):              # picklable (sent to sampler ranks): no thread-local tables
        state = self.__dict__.copy()
        del state["_local"]
        # a sampler rank that receives it samples on its host: batches cross MPI in host memory
        state["_csr"], state["device"] = {}, None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._local = threading.local()

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def _relabeler(self, ext, expected: int):
        """This thread's relabel table, emptied (reused across batches: a fresh
        table of a few 10 MB costs more to allocate than to clear)."""
        r = getattr(self._local, "relabel", None)
        if r is None:
            r = self._local.relabel = ext.Relabeler(expected)
        else:
            r.reset(expected)
        return r

    def _expected_nodes(self, batch: int, num_nodes: int) -> int:
        """Upper bound on a batch's nodes: sizes the relabel table once (growing it
        mid-batch costs more than the bigger allocation)."""
        total, layer = batch, batch
        for f in self.fanouts:
            k = sum(f.values()) if isinstance(f, dict) and min(f.values(), default=0) >= 0 else \
                (-1 if isinstance(f, dict) else f)
            layer = num_nodes if k < 0 else layer * k
            total += layer
            if total >= num_nodes:
                return num_nodes
        return total

    def sample(self, g, seeds, *, rng=None) -> MiniBatch:
        """Independent: the multi-hop sample around ``seeds`` (unique global node ids;
        their order is kept as ``n_id[:batch_size]``).  Features are not read: call
        :func:`~hpcgnn.sampling.fetch_features` on the result."""
        ext = kernels()
        check_edge_dir(g, self.edge_dir, "NeighborSampler")
        wstore = check_prob(g, self.prob, "NeighborSampler")
        s = as_ids(seeds, g.num_nodes(), "NeighborSampler: seeds")
        rng = self._rng if rng is None else rng
        if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
            rng = np.random.default_rng(int(rng))      # one generator: a fresh kernel seed per hop
        typed = g.tables.num_etypes > 1 or len(g.ntypes) > 1 or any(isinstance(f, dict) for f in self.fanouts)
        if self.device is not None and not typed and wstore is None:
            return self._sample_on_device(g, s, rng)
        relabel = self._relabeler(ext, self._expected_nodes(len(s), g.num_nodes()))
        relabel.map(s)
        if len(relabel) != len(s):
            raise InputError(f"NeighborSampler: seeds must be unique ({len(s) - len(relabel)} repeated)")
        num_nodes, num_edges = [len(s)], []
        srcs, dsts, eids, etypes = [], [], [], []
        if typed and wstore is not None:
            raise InputError("NeighborSampler: prob= is not supported on graphs with several edge types")
        frontier, begin = s, 0
        for f in self.fanouts:
            if typed:
                nbr, idx, eid, et = sample_typed(g, frontier, etype_fanouts(g, f, "NeighborSampler"),
                                                 self.replace, make_seed(rng), self.nthreads)
                etypes.append(et)
                dst = begin + idx
            else:
                nbr, counts, eid = sample_edges(g, frontier, f, self.replace, wstore, make_seed(rng), self.nthreads)
                dst = np.repeat(np.arange(begin, begin + len(frontier), dtype=np.int64), counts)
            before = len(relabel)
            srcs.append(relabel.map(nbr))
            dsts.append(dst)
            eids.append(eid)
            num_edges.append(len(eid))
            num_nodes.append(len(relabel) - before)
            begin = before
            frontier = relabel.nodes()[before:] if len(relabel) > before else np.zeros(0, np.int64)
        edge_index = np.empty((2, sum(num_edges)), np.int64)
        np.concatenate(srcs, out=edge_index[0])
        np.concatenate(dsts, out=edge_index[1])
        n_id = relabel.nodes()
        mb = MiniBatch(n_id=torch.from_numpy(n_id), e_id=torch.from_numpy(np.concatenate(eids)),
                       edge_index=torch.from_numpy(edge_index), batch_size=len(s),
                       num_sampled_nodes=num_nodes, num_sampled_edges=num_edges, edge_dir=self.edge_dir)
        if typed:
            mb.e_type = torch.from_numpy(np.concatenate(etypes))
            mb.n_type = torch.from_numpy(g.node_types_of(n_id))
        return mb

    def local_csr(self, g) -> LocalCSR:
        """This host's CSR where :attr:`device` reads it (made at the first batch on
        ``g``, kept while the graph is open)."""
        key = id(g.tables)
        csr = self._csr.get(key)
        if csr is None:
            csr = self._csr[key] = LocalCSR(g.tables, self.device)
        return csr

    def _sample_on_device(self, g, s: np.ndarray, rng) -> MiniBatch:
        """:meth:`sample` by :attr:`device` (see :mod:`hpcgnn.sampling.device`)."""
        if len(np.unique(s)) != len(s):
            raise InputError(f"NeighborSampler: seeds must be unique ({len(s) - len(np.unique(s))} repeated)")
        csr, dev = self.local_csr(g), self.device
        seed = make_seed(rng)
        gen = torch.Generator(device=dev)
        gen.manual_seed(seed)
        seeds = torch.from_numpy(s).to(dev)
        relabel = Relabel(seeds)
        num_nodes, num_edges, srcs, dsts, eids = [len(s)], [], [], [], []
        frontier, begin = seeds, 0
        for h, f in enumerate(self.fanouts):
            nbr, counts, eid = sample_hop(g, csr, frontier, f, self.replace, gen, seed + 7919 * h, self.nthreads)
            before = relabel.count
            srcs.append(relabel.map(nbr))
            dsts.append(torch.repeat_interleave(torch.arange(begin, begin + len(frontier), device=dev), counts,
                                                output_size=len(nbr)))
            eids.append(eid)
            num_edges.append(len(eid))
            num_nodes.append(relabel.count - before)
            begin = before
            frontier = relabel.parts[-1] if relabel.count > before else seeds[:0]
        edge_index = torch.stack([torch.cat(srcs), torch.cat(dsts)])
        return MiniBatch(n_id=relabel.nodes(), e_id=torch.cat(eids), edge_index=edge_index, batch_size=len(s),
                         num_sampled_nodes=num_nodes, num_sampled_edges=num_edges, edge_dir=self.edge_dir)

    def __repr__(self):
        return (f"NeighborSampler(fanouts={self.fanouts}, edge_dir={self.edge_dir!r}, replace={self.replace}, "
                f"prob={self.prob!r})")


class MultiLayerNeighborSampler(NeighborSampler):
    """DGL's name and fanout order: ``fanouts[i]`` for layer ``i`` counted from the
    input layer, so the seeds' hop uses the last one.  ``MultiLayerNeighborSampler([25,
    10])`` is ``NeighborSampler([10, 25])`` (hpcgnn and PyG list the seeds' hop first)."""

    def __init__(self, fanouts, edge_dir: str = "in", replace: bool = False, prob: str | None = None, **kw):
        if isinstance(fanouts, (str, bytes)) or not hasattr(fanouts, "__len__"):
            raise InputError(f"MultiLayerNeighborSampler: fanouts must be a list of integers, got {fanouts!r}")
        super().__init__(list(fanouts)[::-1], edge_dir, replace, prob, **kw)
