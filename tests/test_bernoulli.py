"""hpcgnn.bernoulli: PyTorch's CPU bernoulli_ (dropout masks) from the compiled generator."""
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from hpcgnn import bernoulli


@pytest.fixture
def fast():
    was = bernoulli.installed()
    assert bernoulli.install()
    yield
    if not was:
        bernoulli.uninstall()


def _sigmas(x: torch.Tensor, p: float) -> float:
    n = x.numel()
    return abs(float(x.double().mean()) - p) / max((p * (1 - p) / n) ** 0.5, 1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.uint8, torch.bool, torch.bfloat16])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.93, 1.0])
def test_law_of_every_dtype(fast, dtype, p):
    x = torch.full((300_001,), 7, dtype=dtype).bernoulli_(p)
    assert bool(((x == 0) | (x == 1)).all())
    if p in (0.0, 1.0):
        assert bool((x == p).all())
    else:
        assert _sigmas(x, p) < 5


def test_non_contiguous_tensors_are_filled_in_place(fast):
    base = torch.full((400, 600), 3.0)
    view = base.t()
    assert view.bernoulli_(0.25) is view
    assert bool(((base == 0) | (base == 1)).all()) and _sigmas(base, 0.25) < 5


def test_seeded_from_torch_generator(fast):
    torch.manual_seed(3)
    a = torch.empty(10_000).bernoulli_(0.5)
    torch.manual_seed(3)
    b = torch.empty(10_000).bernoulli_(0.5)
    c = torch.empty(10_000).bernoulli_(0.5)                 # the generator moved on
    assert torch.equal(a, b) and not torch.equal(b, c)
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    assert torch.equal(torch.empty(999).bernoulli_(0.3, generator=g1), torch.empty(999).bernoulli_(0.3, generator=g2))
    state = torch.get_rng_state()
    d = torch.empty(5000).bernoulli_(0.7)
    torch.set_rng_state(state)
    assert torch.equal(d, torch.empty(5000).bernoulli_(0.7))


def test_draws_are_not_correlated(fast):
    x = torch.empty(1_000_000).bernoulli_(0.5) * 2 - 1
    for lag in (1, 2, 1024, 2048):                         # neighbours, and across the kernel's chunks
        assert abs(float((x[:-lag] * x[lag:]).mean())) < 5 / (len(x) ** 0.5), lag


def test_dropout_uses_it_and_keeps_its_contract(fast):
    torch.manual_seed(0)
    x = torch.randn(2000, 300, requires_grad=True)
    drop = torch.nn.Dropout(0.4)
    torch.manual_seed(1)
    y = drop(x)
    kept = y != 0
    assert abs(float(kept.float().mean()) - 0.6) < 0.01
    assert torch.allclose(y[kept], x[kept] / 0.6)
    y.sum().backward()
    assert torch.allclose(x.grad, kept.float() / 0.6)
    torch.manual_seed(1)
    assert torch.equal(drop(x), y)


def test_bad_probability_is_refused(fast):
    with pytest.raises(ValueError, match="p=1.5"):
        torch.empty(3).bernoulli_(1.5)


def _script(code: str, **env) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT, **env))
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


DRAW = "import torch; torch.manual_seed(1); print(int(torch.empty(4096).bernoulli_(0.5) @ torch.arange(4096.)))"


@pytest.mark.slow
def test_uninstall_gives_pytorch_its_kernel_back_and_env_turns_it_off():
    torch_own = _script(DRAW)[0]
    out = _script("from hpcgnn import bernoulli as b; print(b.install()); " + DRAW.replace("print(", "print('on', ")
                  + "; b.uninstall(); " + DRAW)
    assert out[0] == "True" and out[1] == "on" and out[2] != torch_own and out[3] == torch_own
    off = _script("from hpcgnn import bernoulli as b; print(b.install(), b.installed()); " + DRAW,
                  HPCGNN_FAST_BERNOULLI="0")
    assert off == ["False", "False", torch_own]
