"""Neighbor sampling on a DistGraph: one hop (:func:`sample_neighbors`), multi-hop
(:class:`NeighborSampler`) into a PyG-shaped :class:`MiniBatch`, and the data
loaders that feed training (:class:`DistNodeDataLoader`, :class:`DistEdgeDataLoader`);
a batch's features and labels read from the graph (:func:`fetch_features`)."""
from . import negative as negative_sampler
from .batch import NID, Block, MiniBatch
from .features import fetch_features
from .loader import DistEdgeDataLoader, DistNodeDataLoader
from .neighbor import sample_neighbors
from .sampler import MultiLayerNeighborSampler, NeighborSampler

__all__ = ["sample_neighbors", "NeighborSampler", "MultiLayerNeighborSampler", "MiniBatch", "Block", "NID",
           "fetch_features",
           "DistNodeDataLoader", "DistEdgeDataLoader", "negative_sampler"]
