"""RowStore on bad input and on MPI libraries with faults: the same error on every
rank of a collective call, nothing applied and nothing leaked by a refused
independent call, and get_accumulate never returning wrong old values."""
import numpy as np
import pytest

import hpcgnn.comm
from hpcgnn.comm import probes
from hpcgnn.comm.rma import transfers
from hpcgnn.comm.mpi import MPI
from hpcgnn.comm.rma.rowstore import RowStore
from hpcgnn.errors import HpcgnnError, InputError

world = MPI.COMM_WORLD


def _ctx(rpn=None):
    return hpcgnn.comm.initialize(layout="servers=0,samplers=0,trainers=rest", ranks_per_node=rpn)


def _store(ctx, name, nrows, row_shape, dtype, shm="host"):
    size = world.Get_size()
    b = [nrows * k // size for k in range(size + 1)]
    st = RowStore.create(ctx, name, b, row_shape, dtype, owners=list(range(size)), shm=shm)
    full = (np.arange(nrows * int(np.prod(row_shape))) % 50).astype(dtype).reshape((nrows,) + row_shape)
    lo, hi = st.local_range
    st.local_rows[:] = full[lo:hi]
    st.barrier()
    return st, full


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_a_layout_bad_on_one_rank_leaves_no_message_behind():
    """The failing rank raises before the layout broadcast, the others after it: the
    broadcast must not be left unmatched (the next one would receive it)."""
    ctx = _ctx()
    rank, size = world.Get_rank(), world.Get_size()
    owners = [0] if rank != size - 1 else [0, 1]          # wrong only on the last rank
    with pytest.raises(InputError, match=rf"1 row range\(s\) but 2 owner\(s\) \[rank {size - 1}\]"):
        RowStore.create(ctx, "x", [0, 10], (2,), np.float32, owners=owners)
    assert world.bcast(f"after {rank}", root=0) == "after 0"
    ctx.finalize()


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_object_dtype_is_refused_on_every_rank():
    ctx = _ctx(1 if world.Get_size() > 1 else None)
    with pytest.raises(InputError, match="dtype object cannot live in MPI memory"):
        RowStore.create(ctx, "x", [0, 10], (2,), object, owners=[0], shm="node")
    st, full = _store(ctx, "after", 20, (2,), np.float32)     # the world still works
    np.testing.assert_array_equal(st.gather([19, 0]), full[[19, 0]])
    ctx.finalize()


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_rows_of_zero_bytes_have_as_many_local_rows_as_owned():
    ctx = _ctx()
    st = RowStore.create(ctx, "empty", [0, 100], (0,), np.float32, owners=[0])
    assert st.local_rows.shape == ((100, 0) if world.Get_rank() == 0 else (0, 0))
    assert st.gather([5, 99]).shape == (2, 0)
    ctx.finalize()


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_bad_out_and_cache_are_refused_before_anything_moves():
    ctx = _ctx(1 if world.Get_size() > 1 else None)
    st, full = _store(ctx, "feat", 40, (2, 2), np.int64)
    ids = np.array([1, 39, 20])
    ro = np.empty((3, 2, 2), np.int64)
    ro.flags.writeable = False
    with pytest.raises(InputError, match=r"RowStore 'feat' on rank \d+: out must be a writable"):
        st.gather(ids, out=ro)
    cids = np.array([1, 20, 39], dtype=np.int64)
    rows = np.asfortranarray(full[cids])                      # the same rows, not C-contiguous
    for bad, what in [((cids, rows), "C-contiguous int64 array of shape"),
                      ((cids, full[cids].astype(np.int32)), "C-contiguous int64 array of shape"),
                      ((cids[::-1].copy(), full[cids[::-1]]), "sorted ascending"),
                      ((cids.astype(np.int32), full[cids]), "int64"),
                      (cids, "pair")]:
        with pytest.raises(InputError, match=what):
            st.gather_cached(ids, bad)
        with pytest.raises(InputError, match=what):
            st.addresses(ids, cache=bad)
    # a good cache is served from memory: its rows, not the table's
    fake = np.full((3, 2, 2), 777, np.int64)
    got, hits = st.gather_cached(ids, (cids, fake))
    assert (got == 777).all() and hits == 3
    assert st.addresses(ids, cache=(cids, fake))[2] == 3 and st.addresses(ids)[2] == 0
    ctx.finalize()


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_reductions_mpi_does_not_define_are_refused_and_change_nothing():
    ctx = _ctx(1 if world.Get_size() > 1 else None)
    cases = [(np.bool_, "sum"), (np.complex64, "max"), (np.dtype([("a", "f4"), ("b", "i4")]), "sum")]
    for dt, op in cases:
        st = RowStore.create(ctx, f"t{np.dtype(dt).name}", [0, 4], (2,), dt, owners=[0])
        st.barrier()
        with pytest.raises(InputError, match=rf"RowStore 't\w+' on rank \d+: accumulate: "):
            st.accumulate([1, 2], np.ones((2, 2), dt), op=op)
        with pytest.raises(InputError, match="get_accumulate"):
            st.get_accumulate([1, 2], np.ones((2, 2), dt), op=op)
        st.barrier()
        assert (st.gather([1, 2]) == np.zeros((2, 2), dt)).all()
        st.barrier()
    st = RowStore.create(ctx, "f", [0, 4], (2,), np.float32, owners=[0])
    with pytest.raises(InputError, match=r"RowStore 'f' on rank \d+: get_accumulate: op must be"):
        st.get_accumulate([1], np.ones((1, 2), np.float32), op="avg")
    ctx.finalize()


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_get_accumulate_restores_the_order_of_dtypes_torch_lacks():
    """torch has no index_copy_ for uint32: the old values come back in the caller's
    order anyway (ids that span the ranges out of order need the restore)."""
    ctx = _ctx()
    size = world.Get_size()
    st, full = _store(ctx, "u", 8 * size, (2,), np.uint32)
    if world.Get_rank() == 0:
        ids = np.array([8 * size - 1, 0, 3])
        old = st.get_accumulate(ids, np.full((3, 2), 5, np.uint32))
        np.testing.assert_array_equal(old, full[ids])
    st.barrier()
    expect = full.copy()
    expect[[8 * size - 1, 0, 3]] += 5
    np.testing.assert_array_equal(st.gather(np.arange(8 * size)), expect)
    ctx.finalize()


class _SecondGetFails:
    """A window whose second ``Get`` fails (as MPI would on a bad argument)."""

    def __init__(self, win):
        self.win, self.gets = win, 0

    def Get(self, *args):
        self.gets += 1
        if self.gets == 2:
            raise MPI.Exception(MPI.ERR_ARG)
        return self.win.Get(*args)

    def Flush(self, target):
        return self.win.Flush(target)


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_a_failing_operation_completes_and_frees_what_it_issued(monkeypatch):
    """The second of two pieces fails in MPI: the first piece still lands and every
    datatype is freed before the error reaches the caller."""
    ctx = _ctx()
    st, full = _store(ctx, "p", 64, (4,), np.float32)
    made = []
    real = transfers.blocks_type

    def counting(*a):
        dt = real(*a)
        made.append(dt)
        return dt

    monkeypatch.setattr(transfers, "blocks_type", counting)
    rows = np.zeros((4, 4), np.float32)
    disps = np.arange(4, dtype=np.int64) * 16          # rank 0's first 4 rows of 16 bytes
    with pytest.raises(MPI.Exception):
        transfers.issue(_SecondGetFails(st._shwin), 0, disps, rows, "get", [(0, 2), (2, 4)], MPI.BYTE, 16, 16)
    assert len(made) == 2 and all(dt == MPI.DATATYPE_NULL for dt in made)
    np.testing.assert_array_equal(rows[:2], full[:2])
    st.barrier()
    ctx.finalize()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(90)
def test_integer_get_accumulate_across_hosts_is_right_or_refused():
    """Two virtual hosts (memory shared per node, one rank per node): the world window
    carries the atomics.  Where the MPI library returns wrong old integer values
    (Open MPI 4.1's osc rdma over shared memory) the call is refused and changes
    nothing; elsewhere the old values are right."""
    ctx = _ctx(1)
    size, rank = world.Get_size(), world.Get_rank()
    st, full = _store(ctx, "cnt", 4 * size, (3,), np.int64, shm="node")
    assert st._multi_host
    ok = probes.fetch_ok(world, np.int64)
    assert world.allgather(ok) == [ok] * size
    ids = np.array([4 * size - 1, 1])           # the last rank's row and rank 0's
    if rank == 0:
        if ok:
            np.testing.assert_array_equal(st.get_accumulate(ids, np.ones((2, 3), np.int64)), full[ids])
        else:
            with pytest.raises(HpcgnnError, match="wrong old values of int64 rows across hosts"):
                st.get_accumulate(ids, np.ones((2, 3), np.int64))
    st.barrier()
    expect = full.copy()
    if ok:
        expect[ids] += 1
    np.testing.assert_array_equal(st.gather(np.arange(4 * size)), expect)
    # floats are not probed and work on every component
    fst, ffull = _store(ctx, "fcnt", 4 * size, (3,), np.float64, shm="node")
    if rank == 0:
        np.testing.assert_array_equal(fst.get_accumulate(ids, np.ones((2, 3))), ffull[ids])
    ctx.finalize()
