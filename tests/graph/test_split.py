"""node_split / edge_split and PartitionPolicy: pure logic (any process count), and
the split of a DistTensor mask under MPI."""
import numpy as np
import pytest

from hpcgnn.comm.context import initialize as split_roles
from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import InputError
from hpcgnn.graph import DistTensor, PartitionPolicy, RangePartitionBook, edge_split, node_split
from hpcgnn.graph import split as split_mod

world = MPI.COMM_WORLD


def _book(node_sizes, edge_sizes=None, part_id=0):
    nb = np.concatenate([[0], np.cumsum(node_sizes)])
    edge_sizes = node_sizes if edge_sizes is None else edge_sizes
    eb = np.concatenate([[0], np.cumsum(edge_sizes)])
    return RangePartitionBook({"graph_name": "g", "num_parts": len(node_sizes),
                               "node_map": {"_N": [[int(a), int(b)] for a, b in zip(nb[:-1], nb[1:])]},
                               "edge_map": {"_E": [[int(a), int(b)] for a, b in zip(eb[:-1], eb[1:])]}},
                              part_id)


def _shares(mask, book, T, **kw):
    return [node_split(mask, book, rank=i, num_trainers=T, **kw).numpy() for i in range(T)]


def _check_cover(shares, mask):
    allids = np.concatenate(shares)
    assert np.array_equal(np.sort(allids), np.flatnonzero(mask)), "shares must cover the mask exactly once"
    for s in shares:
        assert np.all(np.diff(s) > 0)


CASES = [([100, 100], 2), ([100, 100], 4), ([50, 70, 0, 81], 4), ([30, 30, 30], 2), ([10], 3),
         ([40, 40, 40, 40], 3), ([25, 25], 5)]


@pytest.mark.parametrize("sizes,T", CASES)
@pytest.mark.parametrize("density", [0.0, 0.03, 0.5, 1.0])
def test_force_even_covers_once_and_is_even(sizes, T, density):
    book = _book(sizes)
    rng = np.random.default_rng(len(sizes) * 10 + T)
    mask = rng.random(book.num_nodes) < density
    shares = _shares(mask, book, T)
    _check_cover(shares, mask)
    lens = [len(s) for s in shares]
    assert max(lens) - min(lens) <= 1
    assert all(np.array_equal(a, b) for a, b in zip(_shares(mask, book, T), shares))   # deterministic


@pytest.mark.parametrize("sizes,T", CASES)
def test_not_even_keeps_ids_local(sizes, T):
    book = _book(sizes)
    mask = np.random.default_rng(1).random(book.num_nodes) < 0.4
    shares = _shares(mask, book, T, force_even=False)
    _check_cover(shares, mask)
    P = len(sizes)
    if T >= P:
        for i, s in enumerate(shares):
            home = split_mod.trainer_home(i, T, P)
            assert np.all(book.nid2partid(s) == home)


def test_force_even_prefers_local_partition():
    book = _book([1000, 1000, 1000, 1000])
    mask = np.random.default_rng(7).random(book.num_nodes) < 0.3
    T = 8
    for i, s in enumerate(_shares(mask, book, T)):
        home = split_mod.trainer_home(i, T, 4)
        assert np.mean(book.nid2partid(s) == home) > 0.8


def test_trainer_ids_and_chunks(monkeypatch):
    monkeypatch.setattr(split_mod, "CHUNK", 7)          # many chunks
    book = _book([33, 0, 20])
    rng = np.random.default_rng(3)
    mask = rng.random(53) < 0.6
    tid = rng.integers(0, 3, size=53)
    shares = _shares(mask, book, 3, node_trainer_ids=tid)
    _check_cover(shares, mask)
    for i, s in enumerate(shares):
        assert np.all(tid[s] == i)
    for fe in (True, False):
        _check_cover(_shares(mask, book, 3, force_even=fe), mask)
    with pytest.raises(InputError, match="trainer id"):
        node_split(mask, book, node_trainer_ids=tid + 1, rank=0, num_trainers=3)


def test_edge_split_and_bad_input():
    book = _book([5, 5], [7, 13])
    emask = np.zeros(20, bool)
    emask[[0, 6, 7, 19]] = True
    a = edge_split(emask, book, rank=0, num_trainers=2).numpy()
    b = edge_split(emask, book, rank=1, num_trainers=2).numpy()
    assert a.tolist() == [0, 6] and b.tolist() == [7, 19]
    assert edge_split(emask, book, force_even=False, rank=0, num_trainers=2).numpy().tolist() == [0, 6]
    with pytest.raises(InputError, match="length 10"):
        node_split(emask, book, rank=0, num_trainers=2)
    with pytest.raises(InputError, match="rank 2 outside"):
        node_split(np.ones(10, bool), book, rank=2, num_trainers=2)
    with pytest.raises(InputError, match="node type"):
        node_split(np.ones(10, bool), book, ntype="user", rank=0, num_trainers=2)


def test_partition_policy():
    book = _book([4, 0, 6], [7, 2, 11], part_id=2)
    pol = PartitionPolicy("node:_N", book)
    assert pol.get_size() == 10 and pol.get_part_size() == 6 and pol.get_part_size(1) == 0
    assert pol.to_partid(np.array([0, 3, 4, 9])).tolist() == [0, 0, 2, 2]
    assert pol.to_local([4, 9]).tolist() == [0, 5]
    with pytest.raises(InputError):
        pol.to_local([3])
    with pytest.raises(InputError, match="out of range"):
        pol.to_partid([10])
    epol = PartitionPolicy("edge~_E", book)
    assert epol.policy_str == "edge:_E" and epol.get_part_size() == 11 and epol.to_partid([8]).tolist() == [1]
    assert PartitionPolicy("node", book) == pol
    with pytest.raises(InputError):
        PartitionPolicy("vertex:_N", book)
    with pytest.raises(InputError):
        PartitionPolicy("node:user", book)
    t, i = book.map_to_per_ntype([1, 5])
    assert t.tolist() == [0, 0] and i.tolist() == [1, 5]
    assert book.map_to_homo_nid([2, 3], "_N").tolist() == [2, 3]
    assert book.map_to_per_etype([19])[1].tolist() == [19] and book.map_to_homo_eid([0], "_E").tolist() == [0]
    with pytest.raises(ValueError):
        book.map_to_homo_nid([1], "other")
    with pytest.raises(ValueError):
        book.map_to_per_ntype([10])


# ------------------------------------------------------------------ under MPI
@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_node_split_of_a_dist_tensor_mask():
    size = world.Get_size()
    rpn = 2 if size % 2 == 0 and size >= 4 else None
    ctx = split_roles(layout="servers=1,trainers=rest", ranks_per_node=rpn)
    try:
        P = ctx.num_nodes
        sizes = [37 + 11 * p for p in range(P)]
        book = _book(sizes, part_id=ctx.host_id)
        N = book.num_nodes
        mask = np.random.default_rng(5).random(N) < 0.4
        pol = PartitionPolicy("node:_N", book)
        dmask = DistTensor((N,), "bool", "train_mask", part_policy=pol, ctx=ctx,
                           init_func=lambda shape, dtype: mask[book.node_ranges[ctx.host_id, 0]:][:shape[0]])
        if ctx.is_trainer:
            T = ctx.trainer_comm.Get_size()
            r = ctx.trainer_comm.Get_rank()
            mine = node_split(dmask, book, rank=r, num_trainers=T).numpy()
            assert np.array_equal(mine, node_split(mask, book, rank=r, num_trainers=T).numpy())
            local = node_split(dmask, book, force_even=False, rank=r, num_trainers=T).numpy()
            assert np.all(book.nid2partid(local) == ctx.host_id)
            shares = ctx.trainer_comm.allgather(mine)
            _check_cover(shares, mask)
        world.Barrier()
    finally:
        ctx.finalize()
