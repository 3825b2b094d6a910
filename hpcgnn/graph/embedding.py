"""``DistEmbedding``: a learnable embedding table sharded over the servers.

Like DGL's: the table is a :class:`DistTensor`; calling the embedding on a batch of
ids gathers those rows (one-sided) as a leaf tensor that records its gradient, and a
sparse optimizer (:mod:`hpcgnn.graph.sparse_optim`) later applies the update to
exactly those rows with MPI atomic operations.  Nothing runs on the servers' Python
side.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import InputError
from .dist_tensor import DistTensor


class DistEmbedding:
    """Collective over the trainers (served launch) or the world: create.

    ``init_func(shape, dtype)`` fills the rows (default zeros); ``part_policy``
    shards rows like the nodes they describe (default: equal ranges per server).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, name: str | None = None,
                 init_func=None, part_policy=None, *, ctx=None):
        if int(num_embeddings) < 0 or int(embedding_dim) < 1:
            raise InputError(f"DistEmbedding {name!r}: num_embeddings={num_embeddings} and "
                             f"embedding_dim={embedding_dim} must be >= 0 and >= 1")
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.weight = DistTensor((self.num_embeddings, self.embedding_dim), torch.float32, name=name,
                                 init_func=init_func, part_policy=part_policy, persistent=True, ctx=ctx)
        self.name = self.weight.name
        self._trace: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, ids, device="cpu") -> torch.Tensor:
        """Independent: the rows of ``ids`` as a float32 tensor on ``device``; under
        autograd the rows are recorded for the next optimizer step."""
        ids = torch.as_tensor(np.asarray(ids) if not isinstance(ids, torch.Tensor) else ids).long().reshape(-1)
        ids = ids.detach().cpu()            # the optimizer groups them on the host (ids on a GPU too)
        rows = self.weight[ids].to(device)
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            self._trace.append((ids, rows))
        return rows

    forward = __call__

    def take_trace(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The (ids, rows) recorded since the last call, and forget them."""
        trace, self._trace = self._trace, []
        return trace

    def reset_trace(self) -> None:
        self._trace = []

    def drop_computed_grads(self) -> None:
        """Forget the recorded rows that already have a gradient; keep those still
        waiting for their backward pass."""
        self._trace = [(i, r) for i, r in self._trace if r.grad is None]

    @property
    def part_policy(self):
        """The rows' :class:`~hpcgnn.graph.PartitionPolicy` (None: equal ranges per server)."""
        return self.weight.part_policy

    def __repr__(self):
        return f"DistEmbedding({self.name!r}, {self.num_embeddings}x{self.embedding_dim})"
