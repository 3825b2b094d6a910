"""DistEmbedding with SparseAdagrad / SparseAdam against dense PyTorch references."""
import numpy as np
import pytest
import torch

import hpcgnn
import hpcgnn.comm
from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import InputError
from hpcgnn.graph import DistEmbedding, SparseAdagrad, SparseAdam

world = MPI.COMM_WORLD
N, D = 50, 4


def _one_process_ctx():
    return hpcgnn.comm.initialize(layout="servers=0,samplers=0,trainers=1", comm=MPI.COMM_SELF)


def _run(opt_name, all_rows, order="plain"):
    ctx = _one_process_ctx()
    g = torch.Generator().manual_seed(0)
    init = torch.randn(N, D, generator=g)
    target = torch.randn(N, D, generator=g)
    emb = DistEmbedding(N, D, name=f"emb_{opt_name}_{all_rows}", init_func=lambda s, d: init.clone(), ctx=ctx)
    ref = torch.nn.Parameter(init.clone())
    if opt_name == "adagrad":
        opt = SparseAdagrad([emb], lr=0.1)
        ref_opt = torch.optim.Adagrad([ref], lr=0.1, eps=1e-10)
    else:
        opt = SparseAdam([emb], lr=0.05)
        ref_opt = torch.optim.Adam([ref], lr=0.05)
    rng = np.random.default_rng(1)
    for _ in range(15):
        if all_rows:
            ids = torch.from_numpy(np.concatenate([rng.permutation(N), rng.integers(0, N, 10)]))
        else:
            ids = torch.from_numpy(rng.integers(0, N, 20))
        if order == "stale":      # a backward never stepped, then zero_grad: forgotten
            ((emb(ids[:5]) + 1) ** 2).sum().backward()
            opt.zero_grad()
        loss = ((emb(ids) - target[ids]) ** 2).sum()
        if order == "dgl":        # forward, zero_grad, backward, step
            opt.zero_grad()
        loss.backward()
        opt.step()
        ref_opt.zero_grad()
        ((ref[ids] - target[ids]) ** 2).sum().backward()
        ref_opt.step()
    got = emb.weight[torch.arange(N)]
    ctx.finalize()
    return got, ref.detach()


def test_sparse_adagrad_matches_dense_adagrad():
    got, want = _run("adagrad", all_rows=False)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


@pytest.mark.parametrize("order", ["dgl", "stale"])
def test_zero_grad_forgets_computed_gradients_only(order):
    got, want = _run("adagrad", all_rows=False, order=order)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


def test_sparse_adam_matches_dense_adam_when_every_row_is_touched():
    got, want = _run("adam", all_rows=True)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


def test_untouched_rows_do_not_move():
    ctx = _one_process_ctx()
    emb = DistEmbedding(10, 2, name="still", init_func=lambda s, d: torch.ones(s), ctx=ctx)
    opt = SparseAdam([emb], lr=0.1)
    (emb(torch.tensor([1, 3])) ** 2).sum().backward()
    opt.step()
    w = emb.weight[torch.arange(10)]
    assert torch.equal(w[[0, 2, 4, 5]], torch.ones(4, 2)) and not torch.equal(w[[1, 3]], torch.ones(2, 2))
    with pytest.raises(InputError, match="DistEmbedding"):
        SparseAdagrad([object()], lr=0.1)
    ctx.finalize()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_several_trainers_converge_to_the_same_optimum():
    size = world.Get_size()
    rpn = 2 if size % 2 == 0 and size >= 4 else None
    layout = "servers=1,samplers=0,trainers=1" if rpn else "servers=1,samplers=0,trainers=rest"
    ctx = hpcgnn.initialize(layout=layout, ranks_per_node=rpn, serve=False)
    if ctx.is_trainer:
        target = torch.arange(N * D, dtype=torch.float32).reshape(N, D) / (N * D)
        emb = DistEmbedding(N, D, name="shared", ctx=ctx)
        opt = SparseAdagrad([emb], lr=0.3)
        rng = np.random.default_rng(ctx.rank)
        for _ in range(150):
            ids = torch.from_numpy(rng.integers(0, N, 16))
            ((emb(ids) - target[ids]) ** 2).sum().backward()
            opt.step()
        emb.weight.barrier()
        w = emb.weight[torch.arange(N)]
        assert torch.allclose(w, target, atol=2e-2), (w - target).abs().max()
        # every trainer sees the same table
        mine = w.numpy()
        first = ctx.trainer_comm.bcast(mine, root=0)
        assert np.array_equal(first, mine)
    else:
        ctx.service.serve()
    ctx.finalize()
