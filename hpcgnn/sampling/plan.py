"""Which seeds go into which mini-batch: a pure function of the loader's settings.

A loader's batch ``step`` of epoch ``epoch`` on trainer ``rank`` holds the seeds at
positions ``[step*B, (step+1)*B)`` of this trainer's ids, permuted per epoch when
``shuffle`` (a NumPy generator seeded with ``(seed, epoch, rank)``); the random
draws of its sampling come from a generator seeded with ``(seed, epoch, rank,
step)``.  So a batch does not depend on which thread or rank produced it, or on
what was produced before: the inline, background-thread and sampler-rank paths
yield the same batches, and a resumed run picks up at any step.

**Same number of steps on every trainer.**  DDP needs every trainer to run the
same number of optimizer steps per epoch.  The loaders agree on the largest step
count over the trainers (one ``allreduce`` at creation); a trainer with fewer ids
wraps around its permutation for its last batches, so no id is dropped and a few
are seen twice in an epoch.  (``node_split(force_even=True)``, the default, makes
the shares differ by at most one id.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EpochPlan:
    """One trainer's batches.  ``ids``: its seed ids (int64, as given);
    ``steps``: the agreed steps per epoch (>= the trainer's own count)."""
    ids: np.ndarray
    batch_size: int
    shuffle: bool
    drop_last: bool
    seed: int
    rank: int
    steps: int

    @staticmethod
    def own_steps(n: int, batch_size: int, drop_last: bool) -> int:
        return n // batch_size if drop_last else -(-n // batch_size)

    def order(self, epoch: int) -> np.ndarray:
        """Positions of ``ids`` in epoch ``epoch``'s order."""
        n = len(self.ids)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        return np.random.default_rng([self.seed, epoch, self.rank]).permutation(n)

    def is_padding(self, step: int) -> bool:
        """Whether batch ``step`` only repeats this trainer's ids (it has fewer steps
        than the agreed count): a training step like any other, but an evaluation
        must not count its seeds again."""
        return step >= self.own_steps(len(self.ids), self.batch_size, self.drop_last)

    def seeds(self, epoch: int, step: int, order: np.ndarray | None = None) -> np.ndarray:
        """The seeds of batch ``step`` of ``epoch``: ids taken from ``ids`` (node ids
        for a node loader, edge ids for an edge loader), not a sampled batch;
        positions past the end wrap around."""
        if order is None:
            order = self.order(epoch)
        n, b = len(self.ids), self.batch_size
        lo = step * b
        if step < self.own_steps(n, b, self.drop_last):
            pos = np.arange(lo, min(lo + b, n), dtype=np.int64)
        else:                          # padding up to the agreed count: wrap around
            pos = np.arange(lo, lo + min(b, n), dtype=np.int64) % n
        return self.ids[order[pos]]

    def rng(self, epoch: int, step: int) -> np.random.Generator:
        """The generator of batch ``step``'s sampling draws."""
        return np.random.default_rng([self.seed, epoch, self.rank, step, 0x5A])
