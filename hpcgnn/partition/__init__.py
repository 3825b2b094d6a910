"""Partitioning: ParMETIS inside the MPI job, and the whole pipeline from a raw graph
file to a partitioned graph (``partition_graph``, ``load_partition``)."""
from .parmetis import part_kway, metis_part_kway, edge_cut
from .pipeline import partition_graph
from .load import Partition, load_partition, load_partition_book

__all__ = ["part_kway", "metis_part_kway", "edge_cut", "partition_graph", "load_partition",
           "load_partition_book", "Partition"]
