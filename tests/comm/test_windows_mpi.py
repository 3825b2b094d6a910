"""RowStore: rows in MPI windows, read and written one-sided, at any rank count,
with and without virtual nodes, memory shared per host or per (virtual) node."""
import os
import re
import sys

import numpy as np
import pytest

import hpcgnn
import hpcgnn.comm
from hpcgnn.comm.rma import rowchecks as rs
from hpcgnn.comm.mpi import MPI
from hpcgnn.comm.rma.rowstore import RowStore
from hpcgnn.errors import InputError

world = MPI.COMM_WORLD
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (ranks_per_node, shm scope): real node, one virtual node per rank (shared window
# RMA across virtual nodes), pairs of ranks with memory shared per virtual node
# only (world window RMA between them).
SETUPS = [(None, "host"), (1, "host"), (2, "node"), (1, "node")]


def _ctx(rpn):
    return hpcgnn.comm.initialize(layout="servers=0,samplers=0,trainers=rest", ranks_per_node=rpn)


def _bounds(nrows, size):
    """Uneven ranges, the middle one empty when there are three or more."""
    cuts = sorted({nrows * (k * k + 1) // (size * size + 1) for k in range(1, size)})
    b = np.array([0] + cuts + [nrows], dtype=np.int64)
    if size >= 3:
        b[2] = b[1]
    return np.maximum.accumulate(b)


def _global(nrows, row_shape, dtype):
    full = np.arange(nrows * int(np.prod(row_shape)), dtype=np.int64).reshape((nrows,) + row_shape)
    return (full * 3 + 1).astype(dtype)


def _filled(ctx, name, nrows, row_shape, dtype, shm, owners=None):
    size = world.Get_size()
    b = _bounds(nrows, size)
    st = RowStore.create(ctx, name, b, row_shape, dtype, owners=owners or list(range(size)), shm=shm)
    full = _global(nrows, row_shape, dtype)
    lo, hi = st.local_range
    st.local_rows[:] = full[lo:hi]
    st.barrier()
    return st, full


# ---------------------------------------------------------------- pure helpers
def test_group_keeps_caller_order_inside_each_range():
    b = np.array([0, 10, 10, 30])
    ids = np.array([25, 3, 12, 3, 29, 0])
    perm, counts = rs.group(ids, b)
    assert counts.tolist() == [3, 0, 3]
    assert ids[perm].tolist() == [3, 3, 0, 25, 12, 29]
    assert rs.group(np.array([1, 2, 12]), b)[0] is None     # already grouped: no reorder


def test_combine_and_last_wins():
    ids = np.array([4, 1, 4, 4])
    vals = np.array([[1.0], [2.0], [3.0], [5.0]])
    u, v = rs.combine(ids, vals, "sum")
    assert u.tolist() == [1, 4] and v[:, 0].tolist() == [2.0, 9.0]
    u, v = rs.combine(ids, vals, "max")
    assert v[:, 0].tolist() == [2.0, 5.0]
    u, v = rs.combine(ids, vals, "min")
    assert v[:, 0].tolist() == [2.0, 1.0]
    u, v = rs.last_wins(ids, vals)
    assert u.tolist() == [1, 4] and v[:, 0].tolist() == [2.0, 5.0]


def test_as_ids_rejects_bad_input():
    where = "RowStore 'x' on rank 0"
    with pytest.raises(InputError, match=r"'x' on rank 0: id 10 is out of range \[0, 10\)"):
        rs.as_ids([1, 10], 10, where)
    with pytest.raises(InputError, match="-1 is out of range"):
        rs.as_ids(np.array([-1]), 10, where)
    with pytest.raises(InputError, match="integers"):
        rs.as_ids(np.array([1.0]), 10, where)
    with pytest.raises(InputError, match="1-D"):
        rs.as_ids(np.zeros((2, 2), dtype=np.int64), 10, where)
    with pytest.raises(InputError, match="id 9223372036854775813 is out of range"):   # not a wrapped -9.2e18
        rs.as_ids(np.array([2**63 + 5], dtype=np.uint64), 10, where)
    assert rs.as_ids([], 10, where).dtype == np.int64


# ---------------------------------------------------------------- reads
@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("rpn,shm", SETUPS)
def test_gather_equals_global_array(rpn, shm):
    import torch

    ctx = _ctx(rpn)
    st, full = _filled(ctx, "feat", 2003, (3,), np.float32, shm)
    rng = np.random.default_rng(7 + world.Get_rank())
    for ids in (rng.integers(0, st.nrows, 5000),                    # random, repeats
                np.repeat(rng.integers(0, st.nrows, 50), 3)[::-1],  # repeats, unsorted
                np.arange(st.nrows)[::-1].copy(),                   # all ids
                np.array([], dtype=np.int64),                       # empty
                np.array([st.nrows - 1, 0], dtype=np.int32)):       # ends, int32
        got = st.gather(ids)
        assert got.shape == (len(ids), 3) and got.dtype == np.float32
        np.testing.assert_array_equal(got, full[ids])
    ids = torch.from_numpy(rng.integers(0, st.nrows, 300))
    np.testing.assert_array_equal(st.gather(ids), full[ids.numpy()])
    out = np.empty((300, 3), dtype=np.float32)
    assert st.gather(ids, out=out) is out
    routes = set(st.routes().values())
    size = world.Get_size()
    if size > 1 and rpn == 1:
        assert routes == {"direct", "shm-rma" if shm == "host" else "rma"}
    ctx.finalize()


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("rpn,shm", SETUPS)
def test_addresses_point_at_the_rows_on_every_route(rpn, shm):
    """Row addresses (rows read in place): shared memory where this rank maps the
    range, a fetched buffer where only RMA reaches it; read back, they are the rows."""
    from hpcgnn import _ext

    ctx = _ctx(rpn)
    st, full = _filled(ctx, "feat", 2003, (3,), np.float32, shm)
    rng = np.random.default_rng(11 + world.Get_rank())
    remote = [k for k in range(len(st._bounds) - 1) if not st._direct(k)]
    for ids in (rng.integers(0, st.nrows, 5000), np.arange(st.nrows)[::-1].copy(), np.zeros(0, np.int64)):
        addr, fetched, hits = st.addresses(ids)
        assert hits == 0
        assert addr.dtype == np.uintp and len(addr) == len(ids) and (addr != 0).all()
        got = np.empty((len(ids), 3), np.float32)
        _ext.gather_addresses(addr, got)
        np.testing.assert_array_equal(got, full[ids])
        in_remote = np.isin(np.searchsorted(st._bounds, ids, side="right") - 1, remote)
        assert (fetched is None) == (not in_remote.any())          # fetched: exactly the RMA-only rows
        if fetched is not None:
            assert len(fetched) == int(in_remote.sum())
    with pytest.raises(ValueError, match="has no address"):
        _ext.gather_addresses(np.zeros(2, np.uintp), np.empty((2, 3), np.float32))
    ctx.finalize()


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("rpn,shm", SETUPS[1:3])
def test_gather_other_dtypes_shapes_and_chunks(rpn, shm):
    ctx = _ctx(rpn)
    size = world.Get_size()
    st, full = _filled(ctx, "emb", 501, (2, 2), np.int64, shm)
    st16, full16 = _filled(ctx, "half", 77, (), np.float16, shm)     # no MPI type: rows move as bytes
    st.max_rows_per_op = 7                                           # many Gets per owner
    rng = np.random.default_rng(world.Get_rank())
    ids = rng.integers(0, 501, 1000)
    np.testing.assert_array_equal(st.gather(ids), full[ids])
    st.get_first_piece_bytes = 2 * st.row_bytes                      # other hosts: Rgets of 2, 6, 7, 7.. rows
    np.testing.assert_array_equal(st.gather(ids), full[ids])
    st.get_first_piece_bytes = 0                                     # one Get + Flush per chunk
    np.testing.assert_array_equal(st.gather(ids[::-1]), full[ids[::-1]])
    ids = rng.integers(0, 77, 100)
    np.testing.assert_array_equal(st16.gather(ids), full16[ids])
    with pytest.raises(InputError, match="accumulate needs a dtype"):
        st16.accumulate([0], np.ones(1, dtype=np.float16))
    st16.free()
    st16.free()                                                      # idempotent
    with pytest.raises(InputError, match="freed"):
        st16.gather([0])
    assert size >= 1
    ctx.finalize()


# ---------------------------------------------------------------- writes
@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("rpn,shm", SETUPS)
def test_concurrent_scatters_to_disjoint_rows_all_land(rpn, shm):
    ctx = _ctx(rpn)
    rank, size = world.Get_rank(), world.Get_size()
    st, full = _filled(ctx, "t", 1001, (4,), np.float64, shm)
    mine = np.arange(rank, st.nrows, size)
    rng = np.random.default_rng(rank)
    mine = mine[rng.permutation(len(mine))]
    vals = np.repeat(mine[:, None] * 10.0 + rank, 4, axis=1)
    st.scatter(mine[: len(mine) // 2], vals[: len(mine) // 2])
    st.scatter(mine[len(mine) // 2:], vals[len(mine) // 2:].astype(np.float32))   # safe cast
    st.barrier()
    ids = np.arange(st.nrows)
    np.testing.assert_array_equal(st.gather(ids)[:, 0], ids * 10.0 + ids % size)
    st.barrier()
    # repeated ids in one scatter: the last one wins
    if rank == 0:
        st.scatter([5, 5, 5], np.array([[1.0] * 4, [2.0] * 4, [3.0] * 4]))
    st.barrier()
    assert st.gather([5])[0, 0] == 3.0
    ctx.finalize()


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("rpn,shm", SETUPS)
def test_concurrent_accumulates_to_the_same_rows_sum(rpn, shm):
    ctx = _ctx(rpn)
    rank, size = world.Get_rank(), world.Get_size()
    st = RowStore.create(ctx, "acc", _bounds(300, size), (5,), np.float32, owners=list(range(size)), shm=shm)
    st.barrier()
    rng = np.random.default_rng(rank)
    ids = np.concatenate([np.arange(300), rng.integers(0, 300, 200)])       # every row, some twice
    expect_mine = np.bincount(ids, minlength=300).astype(np.float32)
    for _ in range(3):
        st.accumulate(ids, np.ones((len(ids), 5), dtype=np.float32))
    expect = world.allreduce(expect_mine) * 3
    st.barrier()
    np.testing.assert_array_equal(st.gather(np.arange(300))[:, 0], expect)
    st.barrier()
    # fetch-and-add on one counter row: every rank sees a different old value
    old = st.get_accumulate([7], np.ones((1, 5), dtype=np.float32))
    seen = sorted(world.allgather(float(old[0, 0] - expect[7])))
    assert seen == [float(i) for i in range(size)]
    st.barrier()
    st.accumulate([3], np.full((1, 5), -1e9, dtype=np.float32), op="max")
    st.accumulate([3], np.full((1, 5), -1.0, dtype=np.float32), op=MPI.MIN)
    st.barrier()
    assert st.gather([3])[0, 0] == -1.0
    ctx.finalize()


# ---------------------------------------------------------------- bad input
@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_bad_ids_raise_on_the_calling_rank_only():
    ctx = _ctx(1 if world.Get_size() > 1 else None)
    rank, size = world.Get_rank(), world.Get_size()
    st, full = _filled(ctx, "feat", 100, (2,), np.float32, "host")
    bad = size - 1
    if rank == bad:
        with pytest.raises(InputError, match=rf"RowStore 'feat' on rank {rank}: id 100 is out of range"):
            st.gather([0, 100])
        with pytest.raises(InputError, match="integers"):
            st.gather(np.array([0.5]))
        with pytest.raises(InputError, match="1-D"):
            st.scatter(np.zeros((1, 1), dtype=np.int64), np.zeros((1, 2), np.float32))
        with pytest.raises(InputError, match=r"shape \(3, 2\), expected \(2, 2\)"):
            st.scatter([0, 1], np.zeros((3, 2), np.float32))
        with pytest.raises(InputError, match="does not cast safely"):
            st.accumulate([0], np.zeros((1, 2), np.float64))
        with pytest.raises(InputError, match="distinct"):
            st.get_accumulate([1, 1], np.zeros((2, 2), np.float32))
        with pytest.raises(InputError, match="op must be"):
            st.accumulate([0], np.zeros((1, 2), np.float32), op="avg")
    else:
        np.testing.assert_array_equal(st.gather([99, 0]), full[[99, 0]])
    st.barrier()       # nobody hangs
    ctx.finalize()


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_bad_layout_raises_on_every_rank():
    ctx = _ctx(None)
    size = world.Get_size()
    with pytest.raises(InputError, match="2 row range\\(s\\) but 1 owner"):
        RowStore.create(ctx, "x", [0, 5, 10], owners=[0])
    with pytest.raises(InputError, match="never decrease"):
        RowStore.create(ctx, "x", [0, 5, 3], owners=[0, 0])
    with pytest.raises(InputError, match="outside the"):
        RowStore.create(ctx, "x", [0, 5], owners=[size])
    if size > 1:
        with pytest.raises(InputError, match="disagree"):
            RowStore.create(ctx, "x", [0, 5 + world.Get_rank()], owners=[0])
    ctx.finalize()


# ---------------------------------------------------------------- lifetime
def _osc_segments():
    """Shared-memory window segments mapped by this process, and the /dev/shm
    files of this job's windows."""
    with open(f"/proc/{os.getpid()}/maps") as f:
        maps = sorted({line.split()[5] for line in f if "osc_sm" in line and len(line.split()) > 5})
    return maps


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_free_leaves_no_shared_memory_behind():
    ctx = _ctx(None)
    before = _osc_segments()
    st, _ = _filled(ctx, "big", 10000, (16,), np.float32, "host")
    during = [p for p in _osc_segments() if p not in before]
    if world.Get_size() > 1:            # one rank alone gets private memory, no segment
        assert during, "the table should live in an osc_sm shared-memory segment"
    ctx.finalize()                      # frees the tracked table
    world.Barrier()
    assert st._shwin is None
    assert [p for p in _osc_segments() if p not in before] == []
    assert not [p for p in during if os.path.exists(p)]
    assert not [f for f in os.listdir("/dev/shm") if any(f in p for p in during)]


# ---------------------------------------------------------------- TCP, servers and trainers
@pytest.mark.timeout(240)
@pytest.mark.slow
def test_tcp_servers_and_trainers(mpirun):
    if world.Get_size() > 1 and world.Get_rank() != 0:
        return
    script = os.path.join(ROOT, "tests", "scripts", "windows_tcp_job.py")
    res = mpirun(4, [sys.executable, script], timeout=200,
                 mca=[("btl", "self,tcp"), ("osc", "sm,pt2pt")], env={"HPCGNN_SHM_SCOPE": "node"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert res.stdout.count("windows_tcp_job ok") == 2, res.stdout
    assert res.stdout.count("readstats ok") == 2, res.stdout        # reads across "hosts" timed, one link
    assert "routes {0: 'rma', 2: 'direct'}" in res.stdout or "routes {0: 'direct', 2: 'rma'}" in res.stdout
    # the servers, waiting as they serve, saw the trainers' requests come over their sockets
    # (so they polled on instead of sleeping: hpcgnn.comm.progress)
    polls = [int(x) for x in re.findall(r"server polls with traffic (\d+)", res.stdout)]
    assert len(polls) == 2 and min(polls) > 0, res.stdout


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_gather_bench_runs_over_tcp_and_reports_ratios(mpirun):
    """bench/gather_bench.py (the issue's TCP command, tiny): one JSON line whose
    ratios are positive and whose routes are direct + rma."""
    import json

    if world.Get_size() > 1 and world.Get_rank() != 0:
        return
    script = os.path.join(ROOT, "bench", "gather_bench.py")
    res = mpirun(4, [sys.executable, script, "--rows", "20000", "--dim", "16", "--sizes", "50,3000",
                     "--repeats", "2"], timeout=200,
                 mca=[("btl", "self,tcp"), ("osc", "sm,pt2pt")], env={"HPCGNN_SHM_SCOPE": "node"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])
    assert sorted(out["routes"].values()) == ["direct", "rma"]
    for size in ("50", "3000"):
        r = out["sizes"][size]
        assert r["remote_ratio"] > 0 and r["local_ratio"] > 0 and r["remote_ratio_interleaved_median"] > 0
