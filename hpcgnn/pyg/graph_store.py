"""``DistGraphStore``: PyG's :class:`~torch_geometric.data.GraphStore` over a
:class:`~hpcgnn.graph.DistGraph`.

The structure is the partitioned graph: read-only, sampled by
:class:`~hpcgnn.pyg.sampler.HpcgnnNeighborSampler` where it lives.  The graph's
whole ``edge_index`` (what ``LinkLoader`` reads when no ``edge_label_index`` is
given) is gathered on request, up to ``max_edges`` edges."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch_geometric.data import EdgeAttr, GraphStore
from torch_geometric.typing import EdgeTensorType

from ..errors import InputError
from ..graph import DistGraph
from .checks import homogeneous_graph

#: Largest graph whose whole ``edge_index`` :meth:`DistGraphStore.get_edge_index` gathers.
MAX_EDGES = 50_000_000


class DistGraphStore(GraphStore):
    """A PyG graph store over ``g`` (homogeneous graphs).  Creation and reads are
    independent; writes are refused (the structure is the partitioned graph)."""

    def __init__(self, g: DistGraph, max_edges: int = MAX_EDGES) -> None:
        homogeneous_graph(g, "DistGraphStore")
        super().__init__(edge_attr_cls=EdgeAttr)
        self.graph = g
        self.max_edges = int(max_edges)

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes()

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        """Independent: the one edge set, in COO (other layouts PyG converts from it)."""
        n = self.graph.num_nodes()
        return [EdgeAttr(edge_type=None, layout="coo", is_sorted=False, size=(n, n))]

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Optional[EdgeTensorType]:
        """Independent: ``(src, dst)`` of every edge, in edge id order (global ids);
        refused above ``max_edges`` edges."""
        if edge_attr.edge_type is not None or edge_attr.layout.value != "coo":
            return None
        m = self.graph.num_edges()
        if m > self.max_edges:
            raise InputError(f"DistGraphStore: graph {self.graph.graph_name!r} has {m} edges, more than "
                             f"max_edges={self.max_edges} to gather whole; give LinkLoader an edge_label_index "
                             "(e.g. from hpcgnn.graph.edge_split and g.find_edges)")
        src, dst = self.graph.find_edges(np.arange(m, dtype=np.int64))
        return src.to(torch.long), dst.to(torch.long)

    def _put_edge_index(self, edge_index: EdgeTensorType, edge_attr: EdgeAttr) -> bool:
        raise InputError("DistGraphStore: the structure is the partitioned graph and is read-only "
                         "(partition a new graph to change it)")

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        raise InputError("DistGraphStore: the structure is the partitioned graph and is read-only")

    def __repr__(self) -> str:
        return f"DistGraphStore({self.graph!r})"
