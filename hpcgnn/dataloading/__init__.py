"""DGL's ``dgl.dataloading`` names for distributed training over hpcgnn
(``import hpcgnn.dataloading as dataloading``): neighbor samplers with DGL's fanout
order (input layer first) and argument order, the negative sampler, and the
distributed data loaders of :mod:`hpcgnn.distributed` (also under DGL's older
names ``NodeDataLoader``/``EdgeDataLoader``, which DGL's distributed tutorial uses
with a DistGraph)."""
from ..distributed.dataloader import DistEdgeDataLoader, DistNodeDataLoader
from . import negative_sampler
from .neighbor_sampler import MultiLayerFullNeighborSampler, MultiLayerNeighborSampler, NeighborSampler

NodeDataLoader = DistNodeDataLoader
EdgeDataLoader = DistEdgeDataLoader

__all__ = ["NeighborSampler", "MultiLayerNeighborSampler", "MultiLayerFullNeighborSampler", "negative_sampler",
           "DistNodeDataLoader", "DistEdgeDataLoader", "NodeDataLoader", "EdgeDataLoader"]
