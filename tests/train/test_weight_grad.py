"""The weight gradient that skips the output gradient's zeros (ext/src/weight_grad.c,
hpcgnn.train.kernels.linear_before_dropout) against dense products."""
import numpy as np
import pytest
import torch

pytest.importorskip("hpcgnn._ext")
from hpcgnn import _ext  # noqa: E402
import hpcgnn.train.kernels as K  # noqa: E402
from hpcgnn.train.model import SAGE  # noqa: E402


def _sparse(rng, n, m, density):
    g = rng.standard_normal((n, m)).astype(np.float32)
    g[rng.random((n, m)) >= density] = 0
    return g


# shapes at and around the kernel's blocks: 16 columns of G, 32-64 rows per chunk,
# 128 columns of A per register slab (tails masked), and empty edges
SHAPES = [(1000, 256, 128), (77, 19, 37), (5, 3, 200), (64, 16, 16), (65, 17, 129), (1, 1, 1), (300, 40, 257),
          (0, 4, 4), (130, 256, 64)]


@pytest.mark.parametrize("vectorised", [True, False])
@pytest.mark.parametrize("n,m,k", SHAPES)
def test_weight_grad_equals_the_dense_product(n, m, k, vectorised):
    rng = np.random.default_rng(n * 1000 + m * 10 + k)
    g, a = _sparse(rng, n, m, 0.3), rng.standard_normal((n, k)).astype(np.float32)
    out = np.full((m, k), 7.0, np.float32)              # overwritten, not added to
    _ext.weight_grad(g, a, out, 1, vectorised)
    ref = g.astype(np.float64).T @ a.astype(np.float64)
    scale = np.abs(g.astype(np.float64)).T @ np.abs(a.astype(np.float64)) + 1e-30
    assert np.all(np.abs(out - ref) <= 1e-5 * scale + 1e-30)
    for threads in (2, 3):                              # threads split columns: the same sums
        again = np.empty_like(out)
        _ext.weight_grad(g, a, again, threads, vectorised)
        assert np.array_equal(again, out)


def test_weight_grad_vectorised_and_plain_agree_and_dense_input():
    rng = np.random.default_rng(5)
    g, a = _sparse(rng, 500, 48, 1.0), rng.standard_normal((500, 130)).astype(np.float32)   # no zeros at all
    v, p = np.empty((48, 130), np.float32), np.empty((48, 130), np.float32)
    _ext.weight_grad(g, a, v, 1, True)
    _ext.weight_grad(g, a, p, 1, False)
    assert np.allclose(v, p, rtol=1e-5, atol=1e-5)
    assert np.allclose(v, g.T @ a, rtol=1e-4, atol=1e-4)


def test_weight_grad_zeros_nan_and_bad_shapes():
    a = np.ones((40, 8), np.float32)
    out = np.full((5, 8), 3.0, np.float32)
    _ext.weight_grad(np.zeros((40, 5), np.float32), a, out)
    assert not out.any()
    g = np.zeros((40, 5), np.float32)
    g[33, 2] = np.nan                                   # a NaN gradient is not a zero: it propagates
    _ext.weight_grad(g, a, out)
    assert np.isnan(out[2]).all() and not np.isnan(np.delete(out, 2, 0)).any()
    with pytest.raises(ValueError, match="weight_grad"):
        _ext.weight_grad(g, np.ones((39, 8), np.float32), out)
    with pytest.raises(ValueError, match="want 5 x 8"):
        _ext.weight_grad(g, a, np.empty((8, 5), np.float32))


def test_linear_before_dropout_gradients_match_autograd():
    torch.manual_seed(0)
    x = torch.randn(300, 24, requires_grad=True)
    w = torch.randn(40, 24, requires_grad=True)
    grad = torch.randn(300, 40) * (torch.rand(300, 40) < 0.3)
    y = K.linear_before_dropout(x, w, 0.5, True)
    assert y.grad_fn is not None and "SparseGradLinear" in type(y.grad_fn).__name__
    y.backward(grad)
    x2, w2 = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    y2 = x2 @ w2.t()
    y2.backward(grad)
    assert torch.equal(y, y2)
    assert torch.allclose(w.grad, w2.grad, rtol=1e-5, atol=1e-5)
    assert torch.allclose(x.grad, x2.grad, rtol=1e-6, atol=1e-6)


def test_linear_before_dropout_falls_back_to_the_dense_product():
    x, w = torch.randn(10, 4), torch.randn(3, 4, requires_grad=True)
    for p, training in ((0.5, False), (K.SPARSE_GRAD_MIN_P / 2, True)):
        y = K.linear_before_dropout(x, w, p, training)
        assert "SparseGradLinear" not in type(y.grad_fn).__name__
    y = K.linear_before_dropout(x.double(), w.detach().double().requires_grad_(True), 0.5, True)
    assert y.dtype == torch.float64 and "SparseGradLinear" not in type(y.grad_fn).__name__


def test_sage_step_with_the_sparse_weight_gradient_matches_the_dense_one(monkeypatch):
    """A SAGE training step (dropout 0.5: the first layer's weight gradient skips
    zeros) gives the gradients of the same step with PyTorch's product, up to
    float rounding."""
    g = torch.Generator().manual_seed(2)
    dst1 = torch.sort(torch.randint(0, 20, (150,), generator=g))[0]
    dst2 = torch.sort(torch.randint(20, 120, (700,), generator=g))[0]
    ei = torch.cat([torch.stack([torch.randint(0, 120, (150,), generator=g), dst1]),
                    torch.stack([torch.randint(0, 400, (700,), generator=g), dst2])], 1)
    x = torch.randn(400, 16, generator=g)
    grads = []
    for min_p in (K.SPARSE_GRAD_MIN_P, 2.0):
        monkeypatch.setattr(K, "SPARSE_GRAD_MIN_P", min_p)
        torch.manual_seed(1)
        m = SAGE(16, 64, 5, 2, dropout=0.5)
        out = m(x, ei, [20, 100, 280], [150, 700])
        out.square().sum().backward()
        grads.append([p.grad.clone() for p in m.parameters()])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
