"""The ParMETIS binding, on 1-4 ranks: real ParMETIS, checked against what a good
partition must look like."""
import numpy as np
import pytest

from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import InputError
from hpcgnn.partition import edge_cut, metis_part_kway, part_kway

world = MPI.COMM_WORLD


def _distribute(n, adj_of):
    """vtxdist and this rank's CSR for a graph given by a neighbor function."""
    size, rank = world.Get_size(), world.Get_rank()
    vtxdist = np.array([r * n // size for r in range(size + 1)], dtype=np.int64)
    xadj, adjncy = [0], []
    for v in range(vtxdist[rank], vtxdist[rank + 1]):
        adjncy.extend(adj_of(v))
        xadj.append(len(adjncy))
    return vtxdist, np.array(xadj, dtype=np.int64), np.array(adjncy, dtype=np.int64)


def _grid(w, h):
    def adj(v):
        x, y = v % w, v // w
        out = []
        if x > 0: out.append(v - 1)
        if x < w - 1: out.append(v + 1)
        if y > 0: out.append(v - w)
        if y < h - 1: out.append(v + w)
        return out
    return adj


def _all(part):
    return np.concatenate(world.allgather(part))


@pytest.mark.mpi(min_size=1)
def test_two_cliques_zero_cut():
    k = 12  # two disjoint 12-cliques
    vtxdist, xadj, adjncy = _distribute(2 * k, lambda v: [u for u in range((v // k) * k, (v // k + 1) * k) if u != v])
    part = part_kway(world, vtxdist, xadj, adjncy, nparts=2, seed=1)
    assert edge_cut(world, vtxdist, xadj, adjncy, part) == 0
    allp = _all(part)
    assert len(set(allp[:k])) == 1 and len(set(allp[k:])) == 1 and allp[0] != allp[-1]


@pytest.mark.mpi(min_size=1)
def test_grid_balanced_cut_near_optimum():
    w = h = 32
    vtxdist, xadj, adjncy = _distribute(w * h, _grid(w, h))
    part = part_kway(world, vtxdist, xadj, adjncy, nparts=4, seed=3)
    allp = _all(part)
    counts = np.bincount(allp, minlength=4)
    assert counts.max() <= 1.05 * (w * h / 4) + 1
    cut = edge_cut(world, vtxdist, xadj, adjncy, part)
    # optimum for 4 parts of a 32x32 grid is 64 (two straight cuts); random is ~1500
    assert 64 <= cut <= 1.5 * 64


@pytest.mark.mpi(min_size=1)
def test_multi_constraint_balances_both_weights():
    w = h = 40
    n = w * h
    vtxdist, xadj, adjncy = _distribute(n, _grid(w, h))
    rank = world.Get_rank()
    gids = np.arange(vtxdist[rank], vtxdist[rank + 1])
    # second weight: only the left quarter of the grid is "train" nodes
    train = ((gids % w) < w // 4).astype(np.int64)
    vwgt = np.stack([np.ones_like(train), train], axis=1)
    part = part_kway(world, vtxdist, xadj, adjncy, vwgt=vwgt, ncon=2, nparts=2, seed=0)
    allp = _all(part)
    all_train = _all(train)
    nodes = np.bincount(allp, minlength=2)
    trains = np.bincount(allp, weights=all_train, minlength=2)
    assert nodes.max() <= 1.10 * n / 2  # ubvec 1.05 is a target ParMETIS may overshoot a little
    assert trains.max() <= 1.10 * all_train.sum() / 2
    # unconstrained ParMETIS would cut straight down the middle and put all train
    # nodes in one part: the second constraint really was honoured
    assert trains.min() > 0.4 * all_train.sum()


@pytest.mark.mpi(min_size=1)
def test_agrees_with_serial_metis_quality():
    w = h = 48
    vtxdist, xadj, adjncy = _distribute(w * h, _grid(w, h))
    part = part_kway(world, vtxdist, xadj, adjncy, nparts=2, seed=0)
    pcut = edge_cut(world, vtxdist, xadj, adjncy, part)
    # serial METIS on the whole grid, in every rank (small)
    adj = _grid(w, h)
    gx, ga = [0], []
    for v in range(w * h):
        ga.extend(adj(v))
        gx.append(len(ga))
    mpart = metis_part_kway(np.array(gx), np.array(ga), nparts=2)
    mcut = int(np.count_nonzero(mpart[np.repeat(np.arange(w * h), np.diff(gx))] != mpart[np.array(ga)])) // 2
    assert pcut <= 1.3 * mcut + 2


@pytest.mark.mpi(min_size=1)
def test_bad_input_is_rejected_on_every_rank():
    vtxdist, xadj, adjncy = _distribute(16, lambda v: [(v + 1) % 16, (v - 1) % 16])
    bad = adjncy.copy()
    if world.Get_rank() == world.Get_size() - 1 and len(bad):
        bad[0] = 99  # out of range, on one rank only
    with pytest.raises(InputError, match=r"outside \[0, 16\)") as info:
        part_kway(world, vtxdist, xadj, bad, nparts=2)
    assert f"rank {world.Get_size() - 1}" in str(info.value)
    with pytest.raises(InputError, match="nparts=17"):
        part_kway(world, vtxdist, xadj, adjncy, nparts=17)
    loops = adjncy.copy()
    if len(loops):
        loops[0] = vtxdist[world.Get_rank()]
    with pytest.raises(InputError, match="self loops"):
        part_kway(world, vtxdist, xadj, loops, nparts=2)
    with pytest.raises(InputError, match="ncon=2 needs vwgt"):
        part_kway(world, vtxdist, xadj, adjncy, ncon=2, nparts=2)
    with pytest.raises(InputError, match="adjwgt has negative"):
        part_kway(world, vtxdist, xadj, adjncy, nparts=2, adjwgt=-np.ones(len(adjncy), np.int64))
    with pytest.raises(InputError, match="ubvec must hold 1 finite"):
        part_kway(world, vtxdist, xadj, adjncy, nparts=2, ubvec=[float("nan")])
    with pytest.raises(InputError, match="tpwgts must hold"):
        part_kway(world, vtxdist, xadj, adjncy, nparts=2, tpwgts=[0.5, float("nan")])
    world.Barrier()


@pytest.mark.mpi(min_size=2)
def test_arguments_that_differ_between_ranks_are_refused():
    """ParMETIS hangs on different nparts and corrupts memory on different vtxdist."""
    rank = world.Get_rank()
    vtxdist, xadj, adjncy = _distribute(16, lambda v: [(v + 1) % 16, (v - 1) % 16])
    with pytest.raises(InputError, match="nparts differs between ranks 0 and 1") as info:
        part_kway(world, vtxdist, xadj, adjncy, nparts=2 + (rank == 1))
    assert "rank" in str(info.value)
    other = vtxdist.copy()
    if rank == 0:
        other[-1] += 1       # rank 0's own rows still fit: only a comparison finds it
    with pytest.raises(InputError, match="vtxdist differs between ranks 0 and 1"):
        part_kway(world, other, xadj, adjncy, nparts=2)
    with pytest.raises(InputError, match="ubvec differs"):
        part_kway(world, vtxdist, xadj, adjncy, nparts=2, ubvec=[1.05 + 0.01 * (rank == 1)])
    with pytest.raises(InputError, match="seed differs"):
        part_kway(world, vtxdist, xadj, adjncy, nparts=2, seed=rank)
    world.Barrier()


def test_serial_metis_checks_its_input():
    ring = np.array([0, 2, 4, 6]), np.array([1, 2, 0, 2, 0, 1])
    with pytest.raises(InputError, match="metis_part_kway: xadj must start at 0"):
        metis_part_kway(np.array([0, 2, 4, 10**9]), ring[1], nparts=2)
    with pytest.raises(InputError, match=r"metis_part_kway: adjncy holds vertex ids outside \[0, 3\)"):
        metis_part_kway(ring[0], np.array([1, 2, 0, 2, 0, 10**8]), nparts=2)
    with pytest.raises(InputError, match="outside"):
        metis_part_kway(ring[0], np.array([1, 2, 0, 2, 0, -10**8]), nparts=2)
    with pytest.raises(InputError, match="not decrease"):
        metis_part_kway(np.array([0, 5, 1, 6]), ring[1], nparts=2)
    with pytest.raises(InputError, match="vwgt has 1 entries"):
        metis_part_kway(*ring, vwgt=[1], nparts=2)
    with pytest.raises(InputError, match="vwgt has 1 entries, expected nlocal\\*ncon=9"):
        metis_part_kway(*ring, vwgt=[1], ncon=3, nparts=2)
    assert set(metis_part_kway(*ring, nparts=2).tolist()) <= {0, 1}      # valid input still runs


def test_serial_metis_follows_edge_weights_and_seeds():
    """A ring of 40 whose edges weigh 100 but 5-6 and 25-26 (1): the balanced halves
    must cut those two (cut 2, what METIS reports); on a grid, other seeds give other
    partitions."""
    n = 40
    xadj, adj = np.arange(0, 2 * n + 1, 2), np.array([[(v - 1) % n, (v + 1) % n] for v in range(n)]).ravel()
    light = {(5, 6), (6, 5), (25, 26), (26, 25)}
    w = np.array([1 if (v, u) in light else 100 for v in range(n) for u in adj[2 * v:2 * v + 2]])
    parts, cut = metis_part_kway(xadj, adj, nparts=2, adjwgt=w, return_cut=True)
    assert cut == 2
    assert len(set(parts[6:26])) == 1 and set(np.r_[parts[:6], parts[26:]]) == {1 - parts[6]}
    side = 20
    adj_of = [[u for u in (v - 1 if v % side else -1, v + 1 if (v + 1) % side else -1, v - side, v + side)
               if 0 <= u < side * side] for v in range(side * side)]
    gx = np.cumsum([0] + [len(a) for a in adj_of])
    ga = np.concatenate(adj_of)
    got = {tuple(metis_part_kway(gx, ga, nparts=4, seed=s)) for s in range(4)}
    assert len(got) > 1


def test_idx_width_is_reported():
    from hpcgnn import _ext

    assert _ext.IDX_T_BYTES in (4, 8)
    assert np.dtype(_ext.IDX_DTYPE).itemsize == _ext.IDX_T_BYTES
