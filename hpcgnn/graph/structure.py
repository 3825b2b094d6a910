"""The seam between a distributed graph and what samples from it or reads its data:
:class:`GraphStructure`, what ``DistGraph.tables`` is.  The samplers
(:mod:`hpcgnn.sampling`), the loaders and layer-wise inference read a graph only
through it and the graph's public methods; :class:`~hpcgnn.graph.tables.GraphTables`
implements it over the servers' windows."""
from __future__ import annotations

from typing import Protocol

from ..comm.rma.rowstore import RowStore


class GraphStructure(Protocol):
    """A partitioned graph's served structure and data, as row tables."""

    #: Each node's edge range ``[start, end)`` in :attr:`indices`: rows of shape ``(2,)``,
    #: or ``(num_etypes, 2)`` (one range per edge type) on a typed graph.
    csr: RowStore
    #: Each stored edge's other endpoint (the neighbour a sampler draws), by edge id.
    indices: RowStore
    #: Edge types (1 on a homogeneous graph).
    num_etypes: int
    #: Node and edge data by name: one row per node / edge.
    ndata: dict[str, RowStore]
    edata: dict[str, RowStore]
    #: The partitioning's JSON configuration (docs/format.md).
    config: dict
