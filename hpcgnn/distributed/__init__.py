"""DGL's ``dgl.distributed`` names over hpcgnn, in DGL's argument orders, so that a
DGL distributed training script ports by changing its imports
(``import hpcgnn.distributed as dist``; docs/distributed.md, "Porting a DGL script").

Re-exported as they are (their arguments are DGL's already): :class:`DistTensor`,
:class:`DistEmbedding`, :func:`node_split`, :func:`edge_split`,
:class:`PartitionPolicy`, the partition book, the sparse optimizers.  Thin adapters
take DGL's order where hpcgnn's differs: :func:`initialize` (``ip_config`` first,
ignored), :class:`DistGraph` (``gpb`` second), :func:`sample_neighbors`,
:func:`partition_graph`, :func:`load_partition`, :func:`load_partition_book`,
:class:`DistNodeDataLoader`, :class:`DistEdgeDataLoader`; :class:`DistDataLoader` (DGL's loader of a
plain dataset).
"""
from ..graph import DistEmbedding, DistTensor, PartitionPolicy, RangePartitionBook, edge_split, node_split
from . import optim
from .dataloader import DistDataLoader, DistEdgeDataLoader, DistNodeDataLoader
from .graph import DistGraph, sample_neighbors
from .init import exit_client, initialize
from .optim import SparseAdagrad, SparseAdam
from .partition import load_partition, load_partition_book, partition_graph

#: DGL's base class of partition books; hpcgnn has one kind, by id ranges.
GraphPartitionBook = RangePartitionBook

__all__ = ["initialize", "exit_client", "DistGraph", "DistTensor", "DistEmbedding", "node_split", "edge_split",
           "sample_neighbors", "DistDataLoader", "DistNodeDataLoader", "DistEdgeDataLoader", "optim",
           "SparseAdagrad", "SparseAdam", "partition_graph", "load_partition", "load_partition_book",
           "PartitionPolicy", "RangePartitionBook", "GraphPartitionBook"]
