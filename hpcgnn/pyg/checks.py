"""The one input check the PyG adapters share."""
from __future__ import annotations

from ..errors import InputError
from ..graph import DistGraph


def homogeneous_graph(g, where: str, hint: str = "") -> DistGraph:
    """``g`` if it is a DistGraph of one node and one edge type; InputError naming
    ``where`` otherwise (PyG's typed, HeteroData, backend is not offered)."""
    if not isinstance(g, DistGraph):
        raise InputError(f"{where}: expected a DistGraph, got {type(g).__name__}")
    if not g.is_homogeneous:
        raise InputError(f"{where}: graph {g.graph_name!r} has node types {g.ntypes} and edge types "
                         f"{g.canonical_etypes}; PyG's typed (HeteroData) backend is not supported by "
                         f"hpcgnn.pyg, only homogeneous graphs{hint}")
    return g
