"""Distributed graph objects with DGL's names: DistGraph, DistTensor, the partition
book and policies, node/edge splits."""
from .dist_graph import DistGraph
from .dist_tensor import DistTensor
from .embedding import DistEmbedding
from ..partition.book import RangePartitionBook
from .policy import PartitionPolicy, map_to_homo_nid, map_to_per_ntype
from .sparse_optim import SparseAdagrad, SparseAdam
from .split import edge_split, node_split

__all__ = ["DistGraph", "DistEmbedding", "SparseAdagrad", "SparseAdam", "RangePartitionBook", "PartitionPolicy", "DistTensor", "node_split", "edge_split",
           "map_to_per_ntype", "map_to_homo_nid"]
