"""Negative samplers for link prediction (DGL's ``negative_sampler`` names)."""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import InputError


class Uniform:
    """``Uniform(k)``: for every positive edge ``(u, v)``, ``k`` pairs ``(u, v')`` with
    ``v'`` drawn uniformly from all nodes.  On a sparse graph a drawn pair is a true
    edge with probability about ``degree(u) / num_nodes``; they are not filtered out
    (as in DGL and PyG)."""

    def __init__(self, k: int):
        if isinstance(k, bool) or not isinstance(k, (numbers.Integral, np.integer)) or int(k) < 1:
            raise InputError(f"negative_sampler.Uniform: k must be a positive integer, got {k!r}")
        self.k = int(k)

    def __call__(self, num_nodes: int, src: np.ndarray, dst: np.ndarray, rng: np.random.Generator):
        """``(neg_src, neg_dst)``: ``len(src) * k`` pairs, the ``k`` of edge ``i`` at
        ``i*k .. i*k+k-1``."""
        neg_src = np.repeat(np.asarray(src, dtype=np.int64), self.k)
        neg_dst = rng.integers(0, num_nodes, len(neg_src), dtype=np.int64)
        return neg_src, neg_dst

    def __repr__(self):
        return f"Uniform({self.k})"
