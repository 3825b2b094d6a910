"""Distributed graph objects (issue 4 adds DistGraph, DistTensor, DistEmbedding)."""
from .partition_book import RangePartitionBook

__all__ = ["RangePartitionBook"]
