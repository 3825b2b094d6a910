"""PyG's remote-backend interfaces over hpcgnn: ``torch_geometric.loader.NodeLoader``
and ``LinkLoader`` sample and read a partitioned :class:`~hpcgnn.graph.DistGraph`::

    from torch_geometric.loader import NodeLoader
    from hpcgnn.pyg import DistNeighborSampler, to_pyg_backend

    feature_store, graph_store = to_pyg_backend(g)          # x <- "feat", y <- "label"
    sampler = DistNeighborSampler((feature_store, graph_store), num_neighbors=[10, 5])
    loader = NodeLoader((feature_store, graph_store), sampler, input_nodes=train_ids, batch_size=512)
    for batch in loader:                                    # PyG Data: x, y, edge_index, n_id, batch_size
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
"""
from __future__ import annotations

from typing import Optional

from ..graph import DistGraph
from .feature_store import DEFAULT_NAMES, DistFeatureStore
from .graph_store import DistGraphStore
from .sampler import DistNeighborSampler, HpcgnnNeighborSampler


def to_pyg_backend(g: DistGraph, names: Optional[dict[str, str]] = None) -> tuple[DistFeatureStore, DistGraphStore]:
    """Independent: ``(feature_store, graph_store)`` over ``g`` for PyG's loaders;
    ``names`` maps PyG's attribute names to the graph's node data (default
    ``{"x": "feat", "y": "label"}``, defaults the graph lacks left out).
    Homogeneous graphs only (an :class:`~hpcgnn.errors.InputError` otherwise)."""
    graph_store = DistGraphStore(g)
    return DistFeatureStore.from_graph(g, names), graph_store


__all__ = ["DistFeatureStore", "DistGraphStore", "DistNeighborSampler", "HpcgnnNeighborSampler",
           "to_pyg_backend", "DEFAULT_NAMES"]
