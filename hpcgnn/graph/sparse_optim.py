"""Sparse optimizers for :class:`DistEmbedding`: only the rows a mini-batch touched
are updated, with MPI atomic operations on the owners' memory.

Each step combines the recorded gradients per distinct row (several occurrences of a
row in a batch add up), then:

* ``SparseAdagrad``: ``G += g²`` with one ``Get_accumulate`` (the new ``G`` comes back
  atomically), then ``w += -lr·g/(√G + eps)`` with one ``Accumulate``.  Concurrent
  trainers updating the same row each apply their full update, as with a
  parameter server.
* ``SparseAdam``: a per-row step count ``t += 1`` (``Get_accumulate``), the moments
  ``m += (1-β1)(g - m)``, ``v += (1-β2)(g² - v)`` as accumulated deltas, and the
  bias-corrected update of the weights with ``Accumulate``.  With one trainer this
  is Adam on the touched rows with per-row step counts (DGL's lazy sparse Adam);
  with several trainers touching the same row concurrently the moment updates may
  interleave (Hogwild-style), which converges in practice.

The optimizer state lives in DistTensors next to the weights (same sharding), so it
is checkpointed and restored the same way.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import InputError
from .dist_tensor import DistTensor
from .embedding import DistEmbedding


def _combined_grads(emb: DistEmbedding) -> tuple[np.ndarray, np.ndarray] | None:
    trace = emb.take_trace()
    ids, grads = [], []
    for i, rows in trace:
        if rows.grad is not None:
            ids.append(i)
            grads.append(rows.grad.detach().to("cpu", torch.float32))
    if not ids:
        return None
    ids_t = torch.cat(ids)
    g = torch.cat(grads)
    uids, inv = torch.unique(ids_t, return_inverse=True)
    summed = torch.zeros((len(uids), g.shape[1]), dtype=torch.float32)
    summed.index_add_(0, inv, g)
    return uids.numpy().astype(np.int64), summed.numpy()


class _SparseOptimizer:
    def __init__(self, params, lr: float):
        params = list(params)
        if not params or not all(isinstance(p, DistEmbedding) for p in params):
            raise InputError(f"{type(self).__name__}: params must be a non-empty list of DistEmbedding")
        if not lr > 0:
            raise InputError(f"{type(self).__name__}: lr={lr} must be positive")
        self.params = params
        self.lr = float(lr)

    def _state(self, emb: DistEmbedding, what: str, shape) -> DistTensor:
        return DistTensor(shape, torch.float32, name=f"{emb.name}:{what}",
                          part_policy=emb.weight.part_policy, persistent=True, ctx=emb.weight.ctx)

    def zero_grad(self) -> None:
        """Forget the gradients already computed (rows whose backward ran), as
        ``torch.optim``'s ``zero_grad`` does.  Rows gathered by a forward whose
        backward has not run yet are kept, so ``forward, zero_grad, backward, step``
        (the order of some DGL scripts) updates them."""
        for p in self.params:
            p.drop_computed_grads()

    def step(self) -> None:
        """Independent: apply the recorded gradients of every embedding."""
        for emb in self.params:
            got = _combined_grads(emb)
            if got is not None:
                self._update(emb, *got)


class SparseAdagrad(_SparseOptimizer):
    """Adagrad on the touched rows (state: per-element sum of squared gradients)."""

    def __init__(self, params, lr: float, eps: float = 1e-10):
        super().__init__(params, lr)
        self.eps = float(eps)
        self.state = {p.name: self._state(p, "adagrad_sum", (p.num_embeddings, p.embedding_dim))
                      for p in self.params}

    def _update(self, emb, ids, g):
        st = self.state[emb.name].open_store()
        old = st.get_accumulate(ids, g * g, op="sum")
        std = np.sqrt(old + g * g) + self.eps
        emb.weight.open_store().accumulate(ids, (-self.lr * g / std).astype(np.float32), op="sum")


class SparseAdam(_SparseOptimizer):
    """Adam on the touched rows with per-row step counts (see the module doc)."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        super().__init__(params, lr)
        self.b1, self.b2 = (float(b) for b in betas)
        self.eps = float(eps)
        self.m = {p.name: self._state(p, "adam_m", (p.num_embeddings, p.embedding_dim)) for p in self.params}
        self.v = {p.name: self._state(p, "adam_v", (p.num_embeddings, p.embedding_dim)) for p in self.params}
        self.t = {p.name: self._state(p, "adam_t", (p.num_embeddings,)) for p in self.params}

    def _update(self, emb, ids, g):
        tst = self.t[emb.name].open_store()
        # the step count in float64: 1 - b2**t loses digits in float32 when b2 is near 1
        t = tst.get_accumulate(ids, np.ones(len(ids), np.float32), op="sum").astype(np.float64) + 1.0
        mst, vst = self.m[emb.name].open_store(), self.v[emb.name].open_store()
        m_old, v_old = mst.gather(ids), vst.gather(ids)
        dm = (1.0 - self.b1) * (g - m_old)
        dv = (1.0 - self.b2) * (g * g - v_old)
        mst.accumulate(ids, dm.astype(np.float32), op="sum")
        vst.accumulate(ids, dv.astype(np.float32), op="sum")
        m_hat = (m_old + dm) / (1.0 - self.b1 ** t)[:, None]
        v_hat = (v_old + dv) / (1.0 - self.b2 ** t)[:, None]
        upd = -self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
        emb.weight.open_store().accumulate(ids, upd.astype(np.float32), op="sum")
