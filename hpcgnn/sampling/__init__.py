"""Neighbor sampling on a DistGraph: one hop (:func:`sample_neighbors`), multi-hop
(:class:`NeighborSampler`) into a PyG-shaped :class:`MiniBatch`, and the data
loaders that feed training (:class:`DistNodeDataLoader`, :class:`DistEdgeDataLoader`)."""
from . import negative as negative_sampler
from .batch import NID, Block, MiniBatch
from .loader import DistEdgeDataLoader, DistNodeDataLoader
from .neighbor import sample_neighbors
from .sampler import MultiLayerNeighborSampler, NeighborSampler

__all__ = ["sample_neighbors", "NeighborSampler", "MultiLayerNeighborSampler", "MiniBatch", "Block", "NID",
           "DistNodeDataLoader", "DistEdgeDataLoader", "negative_sampler"]
