"""ParMETIS (parallel) and METIS (serial) k-way partitioning.

The compiled binding (``hpcgnn._ext``) calls the C libraries with the GIL released;
this module checks the input first, on every rank, so that ParMETIS is never
entered with arrays that would crash it or hang the other ranks.
"""
from __future__ import annotations

import numpy as np

from .. import _ext
from ..comm.agree import agreed
from ..comm.collectives import all_sum, every
from ..comm.mpi import MPI
from ..errors import InputError, PartitionError
from .idx_limits import FIX, check_sizes, fit_weights, size_problem

IDX_DTYPE = _ext.IDX_DTYPE
REAL_DTYPE = _ext.REAL_DTYPE
IDX_T_BYTES = _ext.IDX_T_BYTES


def _ints(a, name, rank, where="part_kway"):
    """``a`` as a 1-D C-contiguous int64 array (InputError for another dtype or shape)."""
    a = np.asarray(a)
    if a.dtype.kind not in "iu":
        raise InputError(f"{where}: {name} has dtype {a.dtype}, expected integers (rank {rank})")
    if a.ndim != 1:
        raise InputError(f"{where}: {name} must be 1-D, got shape {a.shape} (rank {rank})")
    if a.dtype == np.uint64 and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise InputError(f"{where}: {name} holds values beyond int64 (rank {rank})")
    return np.ascontiguousarray(a, dtype=np.int64)


def _idx(a, name, rank, where="part_kway"):
    """``a`` (checked int64) as ParMETIS' ``idx_t``: a last guard, after
    :func:`.idx_limits.check_sizes` and :func:`.idx_limits.fit_weights` made every value fit."""
    if a.size and (a.max() > np.iinfo(IDX_DTYPE).max or a.min() < np.iinfo(IDX_DTYPE).min):
        raise InputError(f"{where}: {name} holds values beyond ParMETIS' {8 * IDX_T_BYTES}-bit idx_t "
                         f"(rank {rank}); {FIX}")
    return np.ascontiguousarray(a, dtype=IDX_DTYPE)


def _weights(ncon, nparts, ubvec, tpwgts, rank, where="part_kway"):
    """``(ubvec, tpwgts)`` as float64 arrays, defaults filled in, checked."""
    ub = np.full(ncon, 1.05) if ubvec is None else np.asarray(ubvec, dtype=np.float64).reshape(-1)
    if len(ub) != ncon or not np.all(ub > 1.0) or not np.all(np.isfinite(ub)):
        raise InputError(f"{where}: ubvec must hold {ncon} finite values > 1, got {ub.tolist()} (rank {rank})")
    if tpwgts is None:
        return ub, np.full(ncon * nparts, 1.0 / nparts)
    tp = np.asarray(tpwgts, dtype=np.float64).reshape(-1)
    if len(tp) != ncon * nparts or not np.all(tp >= 0) or not np.all(np.isfinite(tp)):
        raise InputError(f"{where}: tpwgts must hold nparts*ncon={ncon * nparts} finite non-negative "
                         f"values (rank {rank})")
    return ub, tp


def _check_local(rank, size, vtxdist, xadj, adjncy, vwgt, ncon, nparts, adjwgt, where="part_kway"):
    if vtxdist.ndim != 1 or len(vtxdist) != size + 1:
        raise InputError(f"{where}: vtxdist has {len(vtxdist)} entries, expected {size + 1} (rank {rank})")
    if vtxdist[0] != 0 or np.any(np.diff(vtxdist) < 0):
        raise InputError(f"{where}: vtxdist must start at 0 and not decrease (rank {rank})")
    nlocal = int(vtxdist[rank + 1] - vtxdist[rank])
    nglobal = int(vtxdist[-1])
    if np.any(np.diff(vtxdist) == 0) and size > 1:
        raise InputError(f"{where}: every rank needs at least one vertex (vtxdist={vtxdist.tolist()}); "
                         f"use fewer ranks for this graph (rank {rank})")
    if len(xadj) != nlocal + 1:
        raise InputError(f"{where}: xadj has {len(xadj)} entries, expected {nlocal + 1} (rank {rank})")
    if xadj[0] != 0 or np.any(np.diff(xadj) < 0) or xadj[-1] != len(adjncy):
        raise InputError(f"{where}: xadj must start at 0, not decrease and end at len(adjncy)={len(adjncy)} "
                         f"(rank {rank})")
    if len(adjncy) and (adjncy.min() < 0 or adjncy.max() >= nglobal):
        raise InputError(f"{where}: adjncy holds vertex ids outside [0, {nglobal}) (rank {rank})")
    rows = np.repeat(np.arange(nlocal, dtype=np.int64) + int(vtxdist[rank]), np.diff(xadj).astype(np.int64))
    if np.any(rows == adjncy):
        raise InputError(f"{where}: the graph has self loops, which ParMETIS does not accept (rank {rank})")
    if ncon < 1:
        raise InputError(f"{where}: ncon={ncon} must be >= 1 (rank {rank})")
    if vwgt is not None:
        if len(vwgt) != nlocal * ncon:
            raise InputError(f"{where}: vwgt has {len(vwgt)} entries, expected nlocal*ncon={nlocal * ncon} "
                             f"(rank {rank})")
        if len(vwgt) and vwgt.min() < 0:
            raise InputError(f"{where}: vwgt has negative weights (rank {rank})")
    elif ncon != 1:
        raise InputError(f"{where}: ncon={ncon} needs vwgt with ncon weights per vertex (rank {rank})")
    if adjwgt is not None and len(adjwgt) != len(adjncy):
        raise InputError(f"{where}: adjwgt has {len(adjwgt)} entries, expected {len(adjncy)} (rank {rank})")
    if adjwgt is not None and len(adjwgt) and adjwgt.min() < 0:
        raise InputError(f"{where}: adjwgt has negative weights (rank {rank})")
    if not 1 <= nparts <= max(nglobal, 1):
        raise InputError(f"{where}: nparts={nparts} must be between 1 and the number of vertices "
                         f"{nglobal} (rank {rank})")


def part_kway(comm, vtxdist, xadj, adjncy, vwgt=None, ncon: int = 1, nparts: int = 2, *,
              adjwgt=None, ubvec=None, tpwgts=None, seed: int = 0, return_cut: bool = False, fix: str = FIX):
    """Collective over ``comm``: partition a distributed graph into ``nparts`` parts.

    Rank ``r`` holds vertices ``vtxdist[r]:vtxdist[r+1]`` as a CSR (``xadj`` local
    offsets, ``adjncy`` global neighbor ids).  The graph must be symmetric and
    without self loops.  ``vwgt`` holds ``ncon`` weights per vertex (vertex-major),
    each of which ParMETIS balances within ``ubvec`` (default 1.05).  Returns this
    rank's part vector (int64, one entry per local vertex), and with ``return_cut``
    the pair ``(part, edgecut)`` (ParMETIS' weighted cut).  Bad input raises
    :class:`~hpcgnn.errors.InputError` on every rank before ParMETIS is called, and so
    does a graph past what ParMETIS' ``idx_t`` holds (:mod:`.idx_limits`; ``fix``: what
    the message proposes).  Weight columns whose sums would not fit are scaled down
    (:func:`.idx_limits.fit_weights`; the cut is then in those units).
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    with agreed(comm):
        vtxdist = _ints(vtxdist, "vtxdist", rank)
        xadj = _ints(xadj, "xadj", rank)
        adjncy = _ints(adjncy, "adjncy", rank)
        vwgt = None if vwgt is None else _ints(np.asarray(vwgt).reshape(-1), "vwgt", rank)
        adjwgt = None if adjwgt is None else _ints(adjwgt, "adjwgt", rank)
        ncon, nparts = int(ncon), int(nparts)
        _check_local(rank, size, vtxdist, xadj, adjncy, vwgt, ncon, nparts, adjwgt)
        ub, tp = _weights(ncon, nparts, ubvec, tpwgts, rank)
    # what ParMETIS needs alike on every rank (a difference hangs it or corrupts memory)
    mine = (vtxdist.tobytes(), ncon, nparts, ub.tobytes(), tp.tobytes(), vwgt is None, adjwgt is None, int(seed))
    theirs = comm.allgather(mine)
    with agreed(comm):
        names = ("vtxdist", "ncon", "nparts", "ubvec", "tpwgts", "whether vwgt is given",
                 "whether adjwgt is given", "seed")
        for r, other in enumerate(theirs):
            for name, a, b in zip(names, theirs[0], other):
                if a != b:
                    raise InputError(f"part_kway: {name} differs between ranks 0 and {r} of the communicator; "
                                     f"it must be the same on every rank (rank {rank})")
    nlocal = len(xadj) - 1
    if nparts == 1:
        part = np.zeros(nlocal, dtype=np.int64)
        return (part, 0) if return_cut else part
    if all_sum(comm, len(adjncy)) == 0:
        # No edges: any balanced split has zero cut; cut vertex ids into equal blocks.
        gids = np.arange(vtxdist[rank], vtxdist[rank + 1], dtype=np.int64)
        part = (gids * nparts // int(vtxdist[-1])).astype(np.int64)
        return (part, 0) if return_cut else part
    check_sizes(comm, vtxdist, len(adjncy), "part_kway", fix)   # what idx_t holds, before it is used
    if vwgt is not None:            # sums beyond idx_t scaled down (collective: vwgt given on all ranks)
        vwgt = fit_weights(comm, vwgt.reshape(nlocal, ncon)).reshape(-1)
    if adjwgt is not None:
        adjwgt = fit_weights(comm, adjwgt)
    with agreed(comm):
        vtxdist, xadj, adjncy = (_idx(a, n, rank) for a, n in ((vtxdist, "vtxdist"), (xadj, "xadj"),
                                                                (adjncy, "adjncy")))
        vwgt = None if vwgt is None else _idx(vwgt, "vwgt", rank)
        adjwgt = None if adjwgt is None else _idx(adjwgt, "adjwgt", rank)
    status, cut, part = _ext.parmetis_part_kway(
        comm, vtxdist, xadj, adjncy, vwgt, adjwgt, ncon, nparts,
        np.ascontiguousarray(tp, dtype=REAL_DTYPE), np.ascontiguousarray(ub, dtype=REAL_DTYPE), seed)
    ok = every(comm, status == 1)
    if not ok:
        raise PartitionError(f"ParMETIS_V3_PartKway failed (status {status} on rank {rank})")
    return (part.astype(np.int64), int(cut)) if return_cut else part.astype(np.int64)


def metis_part_kway(xadj, adjncy, vwgt=None, ncon: int = 1, nparts: int = 2, *, ubvec=None,
                    seed: int = 0, adjwgt=None, return_cut: bool = False, fix: str = FIX):
    """Independent: serial METIS k-way partitioning of a whole CSR graph (one process).

    Honours multi-constraint ``vwgt`` and edge weights ``adjwgt``; ``seed`` is METIS'
    own (a different seed, a different partition).  Returns the parts (int64), with
    ``return_cut`` the pair ``(parts, weighted cut)``.  A graph past what ``idx_t``
    holds raises :class:`~hpcgnn.errors.InputError` proposing ``fix``.
    """
    where = "metis_part_kway"
    xadj = _ints(xadj, "xadj", 0, where)
    adjncy = _ints(adjncy, "adjncy", 0, where)
    vwgt = None if vwgt is None else _ints(np.asarray(vwgt).reshape(-1), "vwgt", 0, where)
    adjwgt = None if adjwgt is None else _ints(adjwgt, "adjwgt", 0, where)
    ncon, nparts = int(ncon), int(nparts)
    n = len(xadj) - 1
    if n < 0:
        raise InputError(f"{where}: xadj must hold at least one entry (rank 0)")
    _check_local(0, 1, np.array([0, n], dtype=np.int64), xadj, adjncy, vwgt, ncon, nparts, adjwgt, where)
    ub = None if ubvec is None else np.ascontiguousarray(_weights(ncon, nparts, ubvec, None, 0, where)[0],
                                                         dtype=REAL_DTYPE)
    if nparts == 1:
        return (np.zeros(n, dtype=np.int64), 0) if return_cut else np.zeros(n, dtype=np.int64)
    found = size_problem([0, n], [len(adjncy)])
    if found is not None:
        raise InputError(f"{where}: {found[0]}: {fix} (rank 0)")
    if vwgt is not None:
        vwgt = _idx(fit_weights(MPI.COMM_SELF, vwgt.reshape(n, ncon)).reshape(-1), "vwgt", 0, where)
    if adjwgt is not None:
        adjwgt = _idx(fit_weights(MPI.COMM_SELF, adjwgt), "adjwgt", 0, where)
    xadj, adjncy = _idx(xadj, "xadj", 0, where), _idx(adjncy, "adjncy", 0, where)
    ok, cut, part = _ext.metis_part_kway(xadj, adjncy, vwgt, int(ncon), int(nparts), ub, int(seed), adjwgt)
    if not ok:
        raise PartitionError("METIS_PartGraphKway failed")
    if return_cut:
        return part.astype(np.int64), int(cut)
    return part.astype(np.int64)


def edge_cut(comm, vtxdist, xadj, adjncy, part) -> int:
    """Collective: number of undirected edges cut by ``part`` (symmetric input).

    Needs the part of every neighbor, so it gathers the part vector; meant for tests
    and small graphs.
    """
    all_parts = np.concatenate(comm.allgather(np.asarray(part, dtype=np.int64)))
    rank = comm.Get_rank()
    rows = np.repeat(np.arange(len(xadj) - 1) + int(vtxdist[rank]), np.diff(np.asarray(xadj)))
    local = int(np.count_nonzero(all_parts[rows] != all_parts[np.asarray(adjncy)]))
    return all_sum(comm, local) // 2
