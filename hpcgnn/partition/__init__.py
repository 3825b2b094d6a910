"""Partitioning: ParMETIS inside the MPI job (and, from issue 3, the whole pipeline)."""
from .parmetis import part_kway, metis_part_kway, edge_cut

__all__ = ["part_kway", "metis_part_kway", "edge_cut"]
