"""One hop of neighbor sampling on a :class:`~hpcgnn.graph.DistGraph`.

The graph's ``csr`` table holds, for every node, the ``[first, end)`` range of the
global edge ids of its stored edges (in-edges for a graph partitioned with
``edge_dir='in'``), and the ``indices`` table the other endpoint of every edge.  A
hop is therefore, per owner partition, two one-sided reads:

1. ``csr.gather(seeds)``: the seeds' ranges (shared memory for partitions on this
   node, one RMA ``Get`` per remote owner);
2. the compiled kernel (``hpcgnn._ext.sample_ranges``) draws positions in those ranges
   locally; the positions *are* the global edge ids;
3. ``indices.gather(chosen)``: only the chosen edges' other endpoints.

Weighted sampling (``prob=``) needs the weight of every candidate edge of every seed,
so it adds a third read of ``sum(degree(seeds))`` rows of the edge feature (one
``Get`` per owner, 4-8 bytes per candidate edge): the cost grows with the seeds'
degrees, not with the fanout.  Only the weights read are checked for negative values.
"""
from __future__ import annotations

import numbers

import numpy as np
import torch

from ..errors import InputError
from ..graph.dist_graph import Edges, as_ids, expand_ranges

_EDGE_DIRS = ("in", "out")


def kernels():
    from .. import _ext   # when first needed: a build without the kernels fails here with its own message

    if not hasattr(_ext, "sample_ranges"):
        raise RuntimeError("hpcgnn._ext was built without the sampling kernels "
                           "(ext/_ext.pyx must include \"sampling.pxi\"); rebuild the extension")
    return _ext


def check_fanout(fanout, where: str = "sample_neighbors") -> int:
    """``fanout`` as an int: >= 0, or -1 for every neighbor; InputError otherwise."""
    if isinstance(fanout, bool) or not isinstance(fanout, (numbers.Integral, np.integer)):
        raise InputError(f"{where}: fanout must be an integer (>= 0, or -1 for all neighbors), "
                         f"got {fanout!r}")
    f = int(fanout)
    if f < -1:
        raise InputError(f"{where}: fanout must be >= 0, or -1 for all neighbors, got {f}")
    return f


def check_edge_dir(g, edge_dir, where: str = "sample_neighbors") -> None:
    if edge_dir not in _EDGE_DIRS:
        raise InputError(f"{where}: edge_dir must be 'in' or 'out', got {edge_dir!r}")
    if edge_dir != g.edge_dir:
        raise InputError(f"{where}: edge_dir={edge_dir!r} but graph {g.graph_name!r} was partitioned with "
                         f"edge_dir={g.edge_dir!r} (it stores only its {g.edge_dir}-edges per node); "
                         f"sample with edge_dir={g.edge_dir!r} or repartition with edge_dir={edge_dir!r}")


def check_prob(g, prob, where: str = "sample_neighbors"):
    """The edge RowStore of feature ``prob`` (None: uniform)."""
    if prob is None:
        return None
    if not isinstance(prob, str):
        raise InputError(f"{where}: prob must be the name of an edge feature, got {type(prob).__name__}")
    stores = g.tables.edata
    if prob not in stores:
        raise InputError(f"{where}: prob={prob!r} is not an edge feature of graph {g.graph_name!r} "
                         f"(edge features: {sorted(stores) or 'none'})")
    st = stores[prob]
    if int(np.prod(st.row_shape, dtype=np.int64)) != 1 or st.dtype.kind not in "biuf":
        raise InputError(f"{where}: prob feature {prob!r} must hold one number per edge, "
                         f"has rows of shape {st.row_shape} and dtype {st.dtype}")
    return st


def make_seed(rng) -> int:
    """A 63-bit kernel seed from ``rng`` (None: fresh entropy; int; numpy Generator;
    torch Generator)."""
    if rng is None:
        rng = np.random.default_rng()
    elif isinstance(rng, (numbers.Integral, np.integer)) and not isinstance(rng, bool):
        rng = np.random.default_rng(int(rng))
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(0, 2**63 - 1))
    if isinstance(rng, torch.Generator):
        return int(torch.randint(0, 2**62, (1,), generator=rng).item())
    raise InputError(f"rng must be None, an int, a numpy Generator or a torch Generator, got {type(rng).__name__}")


def sample_edges(g, seeds: np.ndarray, fanout: int, replace: bool, wstore, seed: int, nthreads: int = 1):
    """Validated inputs -> ``(nbr, counts, eids)`` as NumPy int64: the sampled edges
    grouped by seed (``counts[i]`` edges for ``seeds[i]``), the other endpoint of each
    and its global edge id.  Internal; see :func:`sample_neighbors`."""
    ext = kernels()
    t = g.tables
    n = len(seeds)
    if n == 0:
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy()
    rows = t.csr.gather(seeds)                                  # round trip 1: ranges
    weights = None
    if wstore is not None:
        cand = expand_ranges(rows[:, 0], rows[:, 1])
        weights = np.ascontiguousarray(wstore.gather(cand).reshape(-1), dtype=np.float64) if len(cand) \
            else np.zeros(0, np.float64)
        if weights.size and not (np.isfinite(weights).all() and (weights >= 0).all()):
            i = int(np.flatnonzero(~(np.isfinite(weights) & (weights >= 0)))[0])
            raise InputError(f"sample_neighbors: prob feature has a negative or non-finite weight "
                             f"({weights[i]!r} at edge {int(cand[i])}); "
                             "weights must be >= 0")
    eids, counts = ext.sample_ranges(rows.reshape(-1), fanout, bool(replace), seed, weights, nthreads)
    nbr = t.indices.gather(eids) if len(eids) else np.zeros(0, np.int64)  # round trip 2: endpoints
    return nbr, counts, eids


def etype_fanouts(g, fanout, where: str) -> list[int]:
    """One fanout per edge type of ``g``: an int applies to every type (DGL's rule);
    a dict ``{etype: k}`` (canonical triple, ``"src:rel:dst"`` or unique relation
    name) gives ``k`` to the types it names and 0 to the others."""
    book = g.get_partition_book()
    T = len(book.etypes)
    if not isinstance(fanout, dict):
        return [check_fanout(fanout, where)] * T
    out = [0] * T
    for k, v in fanout.items():
        try:
            t = book.etype_id(k)
        except ValueError as e:
            raise InputError(f"{where}: {e}") from None
        out[t] = check_fanout(v, where)
    return out


def sample_typed(g, seeds: np.ndarray, fanouts: list[int], replace: bool, seed: int, nthreads: int = 1):
    """Typed graphs: ``(nbr, seed index, eids, etype)`` of up to ``fanouts[t]`` edges
    of every edge type ``t`` per seed, grouped by type then seed (NumPy int64)."""
    ext = kernels()
    t = g.tables
    T = t.num_etypes
    z = np.zeros(0, np.int64)
    if len(seeds) == 0:
        return z, z.copy(), z.copy(), z.copy()
    rows = t.csr.gather(seeds).reshape(len(seeds), T, 2)          # round trip 1: ranges of every type
    idx, eids, types = [], [], []
    for et, k in enumerate(fanouts):
        if k == 0:
            continue
        r = np.ascontiguousarray(rows[:, et, :]).reshape(-1)
        e, counts = ext.sample_ranges(r, k, bool(replace), (seed + 7919 * et) % (2**63 - 1), None, nthreads)
        eids.append(e)
        idx.append(np.repeat(np.arange(len(seeds), dtype=np.int64), counts))
        types.append(np.full(len(e), et, np.int64))
    if not eids:
        return z, z.copy(), z.copy(), z.copy()
    e = np.concatenate(eids)
    nbr = t.indices.gather(e) if len(e) else z                    # round trip 2: endpoints
    return nbr, np.concatenate(idx), e, np.concatenate(types)


def sample_neighbors(g, seeds, fanout, edge_dir: str = "in", replace: bool = False, prob=None, *,
                     rng=None) -> Edges:
    """Sample up to ``fanout`` neighbors of every seed: ``Edges(src, dst, eid)``, global
    ids as torch int64, grouped by seed in the order of ``seeds`` (on a graph with
    several edge types: by edge type first, then by seed).

    ``edge_dir='in'``: in-edges (``dst`` = seed), ``'out'``: out-edges (``src`` = seed);
    it must be the direction the graph was partitioned with.  Without replacement a
    seed with degree <= fanout returns all its edges; ``fanout=-1`` returns every edge.
    ``prob``: an edge feature name used as (non-negative) weights; zero-weight edges
    are never drawn.  ``rng``: None, an int seed, or a numpy/torch Generator (the
    result is a function of the seed drawn from it).  Independent (no collective).
    """
    check_edge_dir(g, edge_dir)
    s = as_ids(seeds, g.num_nodes(), "sample_neighbors: seeds")
    if g.tables.num_etypes > 1 or isinstance(fanout, dict):
        if prob is not None:
            raise InputError("sample_neighbors: prob= is not supported on graphs with several edge types")
        nbr, idx, eids, _ = sample_typed(g, s, etype_fanouts(g, fanout, "sample_neighbors"), replace,
                                         make_seed(rng))
        own = s[idx]
        src, dst = (nbr, own) if edge_dir == "in" else (own, nbr)
        return Edges(torch.from_numpy(src), torch.from_numpy(dst), torch.from_numpy(eids))
    f = check_fanout(fanout)
    wstore = check_prob(g, prob)
    nbr, counts, eids = sample_edges(g, s, f, replace, wstore, make_seed(rng))
    own = np.repeat(s, counts)
    src, dst = (nbr, own) if edge_dir == "in" else (own, nbr)
    return Edges(torch.from_numpy(src), torch.from_numpy(dst), torch.from_numpy(eids))
