"""DistTensor under MPI: rows sharded like the partitions (first server of node p
holds partition p), read and written by trainers while servers wait in a barrier.

Contexts come from :func:`hpcgnn.comm.context.initialize` (every rank returns,
servers included, and waits in ``world.Barrier()`` while trainers read).

Setups: one node holding one partition (any size >= 2), and, at even sizes >= 4,
virtual nodes of two ranks (server + trainer) holding one partition each.
"""
import numpy as np
import pytest
import torch

from hpcgnn.comm.context import initialize as split_roles
from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import InputError
from hpcgnn.graph import DistTensor, PartitionPolicy, RangePartitionBook

world = MPI.COMM_WORLD
LAYOUT = "servers=1,trainers=rest"


def _setups():
    size = world.Get_size()
    out = [None]
    if size >= 4 and size % 2 == 0:
        out.append(2)
    return out


def _ctx(rpn):
    size = world.Get_size()
    if rpn is not None and (size % rpn or size < 2 * rpn):
        pytest.skip(f"ranks_per_node={rpn} does not fit {size} ranks")
    return split_roles(layout=LAYOUT, ranks_per_node=rpn)


def _book(ctx, nparts=None, nodes=200, edges=300):
    """Uneven partitions (the middle one empty when there are three or more)."""
    P = ctx.num_nodes if nparts is None else nparts
    def cuts(n):
        b = [n * (k * k + 1) // (P * P + 1) for k in range(1, P)]
        b = np.maximum.accumulate(np.array([0] + b + [n]))
        if P >= 3:
            b[2] = b[1]
        return [[int(b[i]), int(b[i + 1])] for i in range(P)]
    return RangePartitionBook({"graph_name": "g", "num_parts": P, "node_map": {"_N": cuts(nodes)},
                               "edge_map": {"_E": cuts(edges)}}, min(ctx.host_id, P - 1))


def _global(n, row_shape, dtype):
    if isinstance(dtype, torch.dtype):
        dtype = torch.empty(0, dtype=dtype).numpy().dtype
    k = int(np.prod(row_shape))
    return (np.arange(n * k, dtype=np.int64).reshape((n,) + row_shape) * 7 + 3).astype(dtype)


def _filled(ctx, pol, name, row_shape, dtype, persistent=False):
    n = pol.get_size()
    full = _global(n, row_shape, dtype)
    b = pol.boundaries

    def init(shape, dt):
        # the owner of partition p is node p's first server: its rows start at b[node_id]
        lo = int(b[ctx.host_id])
        return full[lo:lo + shape[0]]
    t = DistTensor((n,) + row_shape, dtype, name, init_func=init, part_policy=pol,
                   persistent=persistent, ctx=ctx)
    return t, full


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("rpn", [None, 2])
@pytest.mark.parametrize("kind,row_shape,dtype", [("node", (3,), torch.float32), ("edge", (), torch.int64),
                                                  ("node", (2, 2), np.float64)])
def test_gather_equals_global_array(rpn, kind, row_shape, dtype):
    if rpn not in _setups():
        pytest.skip("setup does not fit this size")
    ctx = _ctx(rpn)
    try:
        pol = PartitionPolicy(f"{kind}:_{kind[0].upper()}", _book(ctx))
        t, full = _filled(ctx, pol, f"x_{kind}", row_shape, dtype)
        n = len(t)
        assert t.shape == (n,) + row_shape and t.name == f"x_{kind}"
        assert t.dtype == (dtype if isinstance(dtype, torch.dtype) else torch.float64)
        if ctx.is_trainer:
            rng = np.random.default_rng(world.Get_rank())
            for ids in (rng.integers(0, n, 500),                         # duplicates, unsorted
                        np.arange(n)[::-1].copy(), np.arange(n),          # all ids
                        np.array([], dtype=np.int64),                     # empty
                        np.array([n - 1, 0, n - 1])):
                got = t[ids]
                assert isinstance(got, torch.Tensor) and got.shape == (len(ids),) + row_shape
                np.testing.assert_array_equal(got.numpy(), full[ids])
                np.testing.assert_array_equal(t[torch.from_numpy(ids)].numpy(), full[ids])
            ids = rng.integers(0, n, 300)
            buf = torch.empty((300,) + row_shape, dtype=t.dtype)
            assert t.gather(ids, out=buf) is buf                            # into a caller's buffer
            np.testing.assert_array_equal(buf.numpy(), full[ids])
            with pytest.raises(InputError, match="out must be"):
                t.gather(ids, out=np.empty((299,) + row_shape, dtype=full.dtype))
            with pytest.raises(InputError, match="out of range"):
                t[np.array([n])]
            with pytest.raises(InputError):
                t[np.array([0.5])]
        world.Barrier()          # servers wait here (in MPI) while trainers read
        t.free()
    finally:
        ctx.finalize()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("rpn", [None, 2])
def test_concurrent_writes_to_disjoint_rows_all_land(rpn):
    if rpn not in _setups():
        pytest.skip("setup does not fit this size")
    ctx = _ctx(rpn)
    try:
        pol = PartitionPolicy("node:_N", _book(ctx, nodes=1000))
        t = DistTensor((1000, 4), torch.float32, "w", part_policy=pol, ctx=ctx)
        T = len(ctx.ranks_of("trainer"))
        if ctx.is_trainer:
            r = ctx.trainer_comm.Get_rank()
            ids = np.random.default_rng(r).permutation(np.arange(r, 1000, T))
            t[torch.from_numpy(ids)] = torch.from_numpy(np.repeat(ids[:, None], 4, 1).astype(np.float32) + 0.5)
            with pytest.raises(InputError, match="shape"):
                t[ids] = np.zeros((len(ids), 3), np.float32)
            with pytest.raises(InputError, match="cast"):
                t[ids] = np.zeros((len(ids), 4), np.float64)
        t.barrier()
        if ctx.is_trainer:
            want = np.repeat(np.arange(1000)[:, None], 4, 1).astype(np.float32) + 0.5
            np.testing.assert_array_equal(t[np.arange(1000)].numpy(), want)
        world.Barrier()
        t.free()
    finally:
        ctx.finalize()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("rpn", [None, 2])
def test_named_tensor_is_shared_and_lifetimes(rpn):
    if rpn not in _setups():
        pytest.skip("setup does not fit this size")
    ctx = _ctx(rpn)
    try:
        pol = PartitionPolicy("node:_N", _book(ctx))
        a, full = _filled(ctx, pol, "feat", (3,), torch.float32)
        calls = []
        b = DistTensor((200, 3), torch.float32, "feat", part_policy=pol, ctx=ctx,
                       init_func=lambda s, d: calls.append(s) or np.zeros(s, np.float32))
        assert not calls                       # existing storage: no second init
        if ctx.is_trainer and ctx.trainer_comm.Get_rank() == 0:
            a[np.array([5, 6])] = torch.full((2, 3), -1.0)
        b.barrier()
        full[[5, 6]] = -1.0
        if ctx.is_trainer:
            np.testing.assert_array_equal(b[np.arange(200)].numpy(), full)
        world.Barrier()

        # same name, other shape or dtype: the same error on every rank
        with pytest.raises(InputError, match="already exists"):
            DistTensor((200, 4), torch.float32, "feat", part_policy=pol, ctx=ctx)
        with pytest.raises(InputError, match="already exists"):
            DistTensor((200, 3), torch.float64, "feat", part_policy=pol, ctx=ctx)

        # non-persistent free releases the storage for every handle; the name is reusable
        a.free()
        with pytest.raises(InputError, match="freed"):
            b[np.array([0])]
        c = DistTensor((200, 5), torch.float32, "feat", part_policy=pol, ctx=ctx)
        if ctx.is_trainer:
            assert float(c[np.arange(200)].abs().sum()) == 0.0
        world.Barrier()
        c.free()

        # persistent: free() drops the handle only; the rows outlive it, reachable by name
        p, pfull = _filled(ctx, pol, "emb", (2,), torch.float32, persistent=True)
        p.free()
        del p
        q = DistTensor((200, 2), torch.float32, "emb", part_policy=pol, ctx=ctx)
        assert q.persistent
        if ctx.is_trainer:
            np.testing.assert_array_equal(q[np.arange(200)].numpy(), pfull)
        world.Barrier()

        # unnamed tensors are distinct
        u1 = DistTensor((10,), torch.int32, ctx=ctx)
        u2 = DistTensor((10,), torch.int32, ctx=ctx)
        assert u1.name != u2.name
        if ctx.is_trainer and ctx.trainer_comm.Get_rank() == 0:
            u1[np.arange(10)] = np.arange(10, dtype=np.int32)
        u1.barrier()
        if ctx.is_trainer:
            assert u2[np.arange(10)].sum().item() == 0 and u1[np.arange(10)].sum().item() == 45
        world.Barrier()
    finally:
        ctx.finalize()                  # frees q's and u1/u2's storage


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_bad_creation_raises_on_every_rank():
    ctx = _ctx(None)
    try:
        book2 = _book(ctx, nparts=ctx.num_nodes + 1)
        with pytest.raises(InputError, match="partitions but the launch has"):
            DistTensor((200,), torch.float32, "y", part_policy=PartitionPolicy("node:_N", book2), ctx=ctx)
        pol = PartitionPolicy("node:_N", _book(ctx))
        with pytest.raises(InputError, match="shape\\[0\\]=199"):
            DistTensor((199,), torch.float32, "y", part_policy=pol, ctx=ctx)
        with pytest.raises(InputError, match="no NumPy equivalent"):
            DistTensor((200,), torch.bfloat16, "y", part_policy=pol, ctx=ctx)

        def bad_init(shape, dtype):
            return np.zeros((shape[0] + 1,), np.float32)
        with pytest.raises(InputError, match="init_func returned shape"):
            DistTensor((200,), torch.float32, "y", init_func=bad_init, part_policy=pol, ctx=ctx)
        # the failed creation left nothing registered: the name is free
        t = DistTensor((200, 2), torch.float32, "y", part_policy=pol, ctx=ctx)
        assert t.shape == (200, 2)
        t.free()
    finally:
        ctx.finalize()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_layout_without_servers_raises_on_every_rank():
    ctx = split_roles(layout="servers=0,trainers=rest")
    try:
        with pytest.raises(InputError, match="no server"):
            DistTensor((10,), torch.float32, ctx=ctx)
        with pytest.raises(InputError, match="no server rank"):
            DistTensor((200,), torch.float32, part_policy=PartitionPolicy("node:_N", _book(ctx, nparts=1)),
                       ctx=ctx)
    finally:
        ctx.finalize()
