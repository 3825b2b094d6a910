"""What ParMETIS' ``idx_t`` can hold, checked before ParMETIS is called.

Debian's ParMETIS 4.0.3 (and its METIS 5) is built with a 32-bit ``idx_t``: vertex
ids, CSR offsets, weights and their sums over the ranks are C ``int``.  A graph past
that would wrap around inside the library (a failed allocation that ends the job, a
hang in one of its collectives, or a wrong partition), so :func:`check_sizes`
refuses it first, on every rank alike, naming the limit and the fix, and
:func:`fit_weights` scales a weight column whose sum would not fit (balance is
relative: the parts' shares of a scaled column are the same to within the rounding).

The limits follow the library's own arithmetic (``libparmetis/kmetis.c``,
``graph.c``, ``wspace.c``):

* ``VERTEX_LIMIT``: vertices in all (``vtxdist[npes] + 1`` is computed in ``idx_t``);
* ``ENTRY_LIMIT``: adjacency entries in all (``GlobalSESum(nedges)``);
* ``RANK_VERTEX_LIMIT``: vertices of one rank (its work space, ``10 * nvtxs`` words,
  is counted in ``idx_t``);
* ``RANK_ENTRY_LIMIT``: adjacency entries of one rank (its refinement pool is
  ``2 * nedges``);
* ``WEIGHT_LIMIT``: the sum of each weight column over the ranks (``tvwgt``; the cut).

With a 64-bit ``idx_t`` (``IDXTYPEWIDTH=64``) the same rules leave room for any
graph.  Read at call time, so tests can lower them.
"""
from __future__ import annotations

import numpy as np

from .. import _ext
from ..comm.agree import agreed
from ..comm.alltoall import allgather_rows, allreduce_sum
from ..errors import InputError

IDX_BITS = 8 * _ext.IDX_T_BYTES
IDX_MAX = int(np.iinfo(_ext.IDX_DTYPE).max)
VERTEX_LIMIT = IDX_MAX - 1
ENTRY_LIMIT = IDX_MAX
RANK_VERTEX_LIMIT = IDX_MAX // 10
RANK_ENTRY_LIMIT = IDX_MAX // 2
WEIGHT_LIMIT = IDX_MAX

#: What to do about a graph too large for ParMETIS (the pipeline's options).
FIX = ("coarsen it first (`hpcgnn partition --coarsen lp`, partition_graph(coarsen='lp'); `--coarsen auto` "
       "does from 1M nodes), partition with --method random, or use a ParMETIS built with IDXTYPEWIDTH=64")


def size_problem(vtxdist, entries) -> tuple[str, int] | None:
    """Independent: what ParMETIS cannot hold of a graph of ``vtxdist`` (``R + 1``
    vertex boundaries) whose rank ``r`` holds ``entries[r]`` adjacency entries, as
    ``(text, ranks)``: ``ranks`` > 0 when more ranks would fix it (at least that
    many); None when it fits."""
    counts = np.diff(np.asarray(vtxdist, dtype=np.int64))
    entries = np.asarray(entries, dtype=np.int64).reshape(-1)
    n, e = int(counts.sum()), int(entries.sum())
    held = f"ParMETIS' {IDX_BITS}-bit idx_t holds"
    if n > VERTEX_LIMIT:
        return f"the graph has {n} vertices; {held} at most {VERTEX_LIMIT} (2^31-1 less one)", 0
    if e > ENTRY_LIMIT:
        return (f"the graph has {e} adjacency entries in all (both directions of every edge of its symmetric "
                f"view); {held} at most {ENTRY_LIMIT} (2^31-1)"), 0
    ranks = max(-(-n // max(RANK_VERTEX_LIMIT, 1)), -(-e // max(RANK_ENTRY_LIMIT, 1)), 1)
    if len(counts) and int(counts.max()) > RANK_VERTEX_LIMIT:
        r = int(counts.argmax())
        return (f"rank {r} holds {int(counts[r])} vertices; {held} at most {RANK_VERTEX_LIMIT} per rank "
                f"(it counts 10 words of work space per vertex in idx_t)"), ranks
    if len(entries) and int(entries.max()) > RANK_ENTRY_LIMIT:
        r = int(entries.argmax())
        return (f"rank {r} holds {int(entries[r])} adjacency entries; {held} at most {RANK_ENTRY_LIMIT} per "
                f"rank (it counts 2 refinement slots per entry in idx_t)"), ranks
    return None


def check_sizes(comm, vtxdist, local_entries: int, where: str, fix: str = FIX) -> None:
    """Collective over ``comm``: raise the same :class:`InputError` on every rank when
    ParMETIS cannot hold the graph distributed as ``vtxdist`` with ``local_entries``
    adjacency entries on this rank (see the module's limits), naming ``where``, the
    limit and the fix (``fix``, or more ranks where that is enough)."""
    rank = comm.Get_rank()
    entries = allgather_rows(comm, [int(local_entries)])[:, 0]
    with agreed(comm):
        found = size_problem(vtxdist, entries)
        if found is not None:
            text, ranks = found
            todo = f"run on at least {ranks} ranks, or {fix}" if ranks else fix
            raise InputError(f"{where}: {text}: {todo} (rank {rank})")


def fit_weights(comm, columns) -> np.ndarray:
    """Collective: ``columns`` (non-negative integers, 1-D or ``(n, ncon)``) as int64
    with every column's sum over the ranks at most ``WEIGHT_LIMIT``.  A column past it
    is divided by the smallest ``s`` that makes it fit, rounded to nearest, positive
    entries kept >= 1 (each entry is then at most ``w / s + 1``, so ``s = ceil(sum /
    (WEIGHT_LIMIT - positive entries))`` is enough).  Columns that fit are unchanged;
    so is everything when all fit (the usual case: the input array is returned)."""
    a = np.asarray(columns, dtype=np.int64)
    two = a[:, None] if a.ndim == 1 else a.reshape(a.shape[0], int(np.prod(a.shape[1:])))
    k = two.shape[1]
    tot = allreduce_sum(comm, np.concatenate([two.sum(axis=0), np.count_nonzero(two > 0, axis=0)]))
    sums, positive = tot[:k], tot[k:]
    if np.all(sums <= WEIGHT_LIMIT):
        return a
    out = two.copy()
    for j in np.flatnonzero(sums > WEIGHT_LIMIT):
        s = -(-int(sums[j]) // max(1, WEIGHT_LIMIT - int(positive[j])))
        c = out[:, j]
        c[:] = np.where(c > 0, np.maximum(1, (c + s // 2) // s), 0)
    return out.reshape(a.shape)
