"""Which partition each node goes to: ParMETIS on a symmetric view, or a seeded hash.

The stored graph keeps the user's edges; ParMETIS gets, for the partitioner only, the
symmetric, loop-free, duplicate-free view of them, built in parallel: every edge
``(u, v)`` with ``u != v`` is sent as ``(u, v)`` to the owner of ``u`` and as
``(v, u)`` to the owner of ``v``, which sorts and deduplicates its rows.  The pairs
travel in chunks: a first pass counts each row's entries, a second files every pair
into its row's slots of one array of the final size (compiled), so the view costs its
own 16 bytes per edge and a chunk, not a sort of every pair.
"""
from __future__ import annotations

import numpy as np

from .. import _ext
from ..comm.agree import agreed
from ..comm.alltoall import alltoallv
from ..comm.collectives import all_max
from ..errors import InputError
from .parmetis import part_kway

MAX_ONEHOT = 64  # largest number of distinct values of an integer balance array


def owner_of(bounds: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Independent: index ``i`` with ``bounds[i] <= id < bounds[i+1]`` for each id."""
    return np.searchsorted(bounds, ids, side="right") - 1


#: edges per chunk of the symmetric view's exchange (~150 MB in flight per rank; on 1M nodes /
#: 20M edges, 2 ranks: 1 << 18 peaks 0.3 GB lower but takes 1.8x as long, 1 << 22 1 GB higher)
SYM_CHUNK = 1 << 20


def _loop_free_chunks(comm, src: np.ndarray, dst: np.ndarray, chunk: int):
    """Collective: the same number of ``(u, v)`` chunks on every rank (loops dropped;
    a rank out of edges yields empty chunks while the others exchange)."""
    chunk = min(chunk, max(1 << 16, -(-len(src) // 8)))   # in flight: an eighth of the edges at most
    count = all_max(comm, -(-len(src) // chunk))
    for c in range(count):
        u, v = src[c * chunk:(c + 1) * chunk], dst[c * chunk:(c + 1) * chunk]
        keep = u != v
        yield u[keep], v[keep]


def symmetric_csr(comm, vtxdist: np.ndarray, src: np.ndarray, dst: np.ndarray, chunk: int = SYM_CHUNK):
    """Collective: this rank's rows of the symmetric view as (xadj, adjncy), int64."""
    rank = comm.Get_rank()
    lo, nlocal = int(vtxdist[rank]), int(vtxdist[rank + 1] - vtxdist[rank])
    degree = np.zeros(nlocal, dtype=np.int64)
    for u, v in _loop_free_chunks(comm, src, dst, chunk):
        ends = np.concatenate([u, v])
        (got,) = alltoallv(comm, owner_of(vtxdist, ends), ends)
        degree += np.bincount(got - lo, minlength=nlocal)
    xadj = np.zeros(nlocal + 1, dtype=np.int64)
    np.cumsum(degree, out=xadj[1:])
    del degree
    adjncy = np.empty(int(xadj[-1]), dtype=np.int64)
    pos = xadj[:-1].copy()
    for u, v in _loop_free_chunks(comm, src, dst, chunk):
        rows, cols = np.concatenate([u, v]), np.concatenate([v, u])
        ru, rv = alltoallv(comm, owner_of(vtxdist, rows), rows, cols)
        del rows, cols
        with agreed(comm):                  # an inconsistency on one rank ends every rank's loop
            _ext.csr_fill(ru, rv, lo, pos, xadj[1:], adjncy)
    del pos
    with agreed(comm):
        nnz = _ext.csr_sort_dedup(xadj, adjncy)
    adjncy.resize(nnz, refcheck=False)      # the repeats' tail goes back to the allocator
    return xadj, adjncy


def local_degrees(comm, vtxdist: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Collective: for this rank's vertex block, how often each vertex appears in ``ends``."""
    rank = comm.Get_rank()
    (got,) = alltoallv(comm, owner_of(vtxdist, ends), ends)
    lo, nlocal = int(vtxdist[rank]), int(vtxdist[rank + 1] - vtxdist[rank])
    return np.bincount(got - lo, minlength=nlocal).astype(np.int64)


def balance_columns(comm, name: str, values: np.ndarray, path: str, num_values: int | None = None) -> list[np.ndarray]:
    """Collective: weight columns for one ``--balance-ntypes`` array (DGL's semantics).

    A mask (bool, or integers all in {0, 1}) gives one column (1 where set); another
    integer array (node types) gives one one-hot column per value ``0..max``.
    ``num_values`` (node types): always one one-hot column per value
    ``0..num_values-1``, column ``t`` for type ``t``.
    """
    rank = comm.Get_rank()
    with agreed(comm):
        if values.ndim != 1 or values.dtype.kind not in "biu":
            raise InputError(f"{path}: dataset '{name}' used in --balance-ntypes has dtype {values.dtype} "
                             f"shape {values.shape[1:]}, expected a 1-D mask or integer type array "
                             f"(rank {rank})")
        v = values.astype(np.int64)
        if len(v) and v.min() < 0:
            raise InputError(f"{path}: dataset '{name}' used in --balance-ntypes holds negative values "
                             f"(rank {rank})")
    vmax = all_max(comm, int(v.max()) if len(v) else 0)
    if num_values is not None:
        vmax = max(vmax, int(num_values) - 1)
    elif values.dtype.kind == "b" or vmax <= 1:
        return [v]
    with agreed(comm):
        if vmax >= MAX_ONEHOT:
            raise InputError(f"{path}: dataset '{name}' used in --balance-ntypes has {vmax + 1} distinct "
                             f"values; at most {MAX_ONEHOT} constraints are supported (rank {rank})")
    return [(v == t).astype(np.int64) for t in range(vmax + 1)]


def random_parts(ids: np.ndarray, nparts: int, seed: int) -> np.ndarray:
    """Independent: seeded hash (splitmix64) of each node id, mod ``nparts``.

    Depends only on the id, the seed and ``nparts``: the same on any number of ranks.
    """
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15) * np.uint64(seed + 1)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(nparts)).astype(np.int64)


def parmetis_parts(comm, vtxdist, xadj, adjncy, weights: list[np.ndarray], nparts: int, seed: int,
                   ubvec: float = 1.05) -> np.ndarray:
    """Collective: ParMETIS k-way with one constraint per weight column."""
    ncon = len(weights)
    vwgt = np.stack(weights, axis=1).reshape(-1) if ncon > 1 else None
    return part_kway(comm, vtxdist, xadj, adjncy, vwgt=vwgt, ncon=ncon, nparts=nparts,
                     ubvec=np.full(ncon, ubvec), seed=seed)
