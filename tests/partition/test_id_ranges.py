"""The start from id ranges of the LP-coarsened partitioning (hpcgnn/partition/blockstart.py)."""
import numpy as np
import pytest

from hpcgnn.comm.mpi import MPI
from hpcgnn.partition import coarsen as coarsen_mod
from hpcgnn.partition.blockstart import id_range_parts, within_bounds
from hpcgnn.partition.coarsen import coarsened_parts
from harness import symmetric_csr

comm = MPI.COMM_WORLD


def _blocks(n):
    R, r = comm.Get_size(), comm.Get_rank()
    vtxdist = np.array([n * i // R for i in range(R + 1)], dtype=np.int64)
    return vtxdist, int(vtxdist[r]), int(vtxdist[r + 1])


def _serial_ranges(w, nparts):
    """The same cut of the id line on one process, in Python integers."""
    scale = [(1 << 52) // int(t) for t in w.sum(axis=0)]
    share = [sum(int(x) * s for x, s in zip(row, scale)) for row in w]
    whole, acc, out = sum(share), 0, []
    ends = [whole * i // nparts for i in range(1, nparts)]
    for s in share:
        out.append(int(np.searchsorted(ends, acc + s - s // 2, side="right")))
        acc += s
    return np.array(out)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_id_ranges_do_not_depend_on_the_rank_count():
    """Every rank count cuts the id line where one process does, and the ranges hold
    equal shares of the (scaled) weight columns."""
    n, P = 3001, 4
    rng = np.random.default_rng(5)
    w = np.stack([np.ones(n, dtype=np.int64), (rng.random(n) < 0.3).astype(np.int64),
                  rng.integers(1, 50, n)], axis=1)
    vtxdist, lo, hi = _blocks(n)
    parts = id_range_parts(comm, vtxdist, w[lo:hi], P)
    whole = np.concatenate(comm.allgather(parts))
    np.testing.assert_array_equal(whole, _serial_ranges(w, P))
    assert (np.diff(whole) >= 0).all() and whole[0] == 0 and whole[-1] == P - 1      # ranges, in order
    ones = id_range_parts(comm, vtxdist, w[lo:hi, 0], P)
    counts = np.bincount(np.concatenate(comm.allgather(ones)), minlength=P)
    assert counts.max() - counts.min() <= 1, counts
    assert within_bounds(comm, ones, w[lo:hi, :1], P, 1.001)
    assert not within_bounds(comm, np.zeros(hi - lo, dtype=np.int64), w[lo:hi, :1], P, 1.5)


def _classes(n, k, deg, p_in, order):
    """A graph of ``k`` classes whose edges go to a random member of the source's class
    with probability ``p_in``, else anywhere; ``order`` maps class positions to ids
    (identity: classes in consecutive id ranges)."""
    rng = np.random.default_rng(11)
    m = n * deg // 2
    src = rng.integers(0, n, m)
    size = n // k
    inside = (src // size) * size + rng.integers(0, size, m)
    dst = np.where(rng.random(m) < p_in, inside, rng.integers(0, n, m))
    u, v = order[src], order[dst]
    return symmetric_csr(n, np.unique(np.sort(np.stack([u, v], axis=1)[u != v], axis=1), axis=0))


def _parts(xadj_all, adj_all, P, **kw):
    n = len(xadj_all) - 1
    vtxdist, lo, hi = _blocks(n)
    xadj = xadj_all[lo:hi + 1] - xadj_all[lo]
    adjncy = adj_all[xadj_all[lo]:xadj_all[hi]].copy()
    parts, info = coarsened_parts(comm, vtxdist, xadj, adjncy, [np.ones(hi - lo, dtype=np.int64)], P, 0, 1.05,
                                  cluster_factor=8, **kw)
    whole = np.concatenate(comm.allgather(parts))
    cut = int(np.count_nonzero(whole[np.repeat(np.arange(n), np.diff(xadj_all))] != whole[adj_all]))
    return whole, cut, info


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_id_ranges_start_kept_only_where_it_cuts_less(monkeypatch):
    """Classes in consecutive ids: the id ranges are the classes, and with the
    refinement off (every start stays as projected from the coarsest graph, which cut
    about as a random partition would) they are kept, untouched.  With the same graph
    in random ids they cut as much as a random split and are not refined; the kept
    partition is the best refined start."""
    n, k, P = 8000, 16, 4
    xadj, adj = _classes(n, k, 12, 0.6, np.arange(n))
    inter = np.count_nonzero(np.repeat(np.arange(n), np.diff(xadj)) // (n // P) != adj // (n // P))
    monkeypatch.setattr(coarsen_mod, "REFINE_ROUNDS", 0)
    monkeypatch.setattr(coarsen_mod, "REFINE_PER_RANK", 0)
    whole, cut, info = _parts(xadj, adj, P)
    assert info["id_range_cut"] == inter and inter < min(info["refined_cuts"]), info
    assert info["id_ranges_kept"] and cut == inter
    np.testing.assert_array_equal(whole, np.arange(n) // (n // P))
    monkeypatch.undo()
    _, cut, info = _parts(xadj, adj, P)          # refined: no worse than the ranges
    assert cut <= inter and cut == min(min(info["refined_cuts"]), cut)
    shuffled = np.random.default_rng(2).permutation(n)
    xadj, adj = _classes(n, k, 12, 0.6, shuffled)
    _, cut, info = _parts(xadj, adj, P)
    assert info["id_range_cut"] > 0.6 * len(adj) and not info["id_ranges_kept"], info
    assert cut == min(info["refined_cuts"])
