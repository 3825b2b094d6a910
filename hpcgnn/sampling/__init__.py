"""Neighbor sampling on a DistGraph: one hop (:func:`sample_neighbors`), multi-hop
(:class:`NeighborSampler`) into a PyG-shaped :class:`MiniBatch`."""
from .batch import Block, MiniBatch
from .neighbor import sample_neighbors
from .sampler import NeighborSampler

__all__ = ["sample_neighbors", "NeighborSampler", "MiniBatch", "Block"]
