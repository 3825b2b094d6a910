"""``DistGraph`` and ``sample_neighbors`` with DGL's argument orders.

hpcgnn's :class:`hpcgnn.graph.DistGraph` takes ``(graph_name, part_config=None)``;
DGL's takes ``(graph_name, gpb=None, part_config=None)``.  hpcgnn's
:func:`hpcgnn.sampling.sample_neighbors` takes ``(g, seeds, fanout, edge_dir,
replace, prob)``; DGL's ``(g, nodes, fanout, edge_dir, prob, exclude_edges,
replace)``.  The adapters here take DGL's order and call hpcgnn's.  ``g._client``
(DGL's private key-value client) offers its ``barrier()``, which DGL's examples call.
"""
from __future__ import annotations

from ..errors import InputError
from ..graph import DistGraph as _DistGraph
from ..partition.book import RangePartitionBook
from ..sampling import sample_neighbors as _sample_neighbors


class DistGraph(_DistGraph):
    """DGL's ``DistGraph(graph_name, gpb=None, part_config=None)``: a
    :class:`hpcgnn.graph.DistGraph` (collective over the trainers, as that one).

    ``gpb`` is accepted for DGL's argument order and otherwise unused: the
    partition book comes from the graph's partition config (``g.get_partition_book()``).
    ``part_config``: a graph no server holds yet is loaded from it (or, without an
    :func:`initialize`, opened standalone in this process)."""

    def __init__(self, graph_name: str, gpb=None, part_config: str | None = None, *, ctx=None):
        if gpb is not None and not isinstance(gpb, RangePartitionBook):
            raise InputError(f"DistGraph {graph_name!r}: the second argument is DGL's gpb (a partition book), "
                             f"got {type(gpb).__name__} {gpb!r}; pass the partition config as part_config=")
        super().__init__(graph_name, part_config, ctx=ctx)

    def rank(self) -> int:
        """Independent: this trainer's rank among the trainers (DGL's ``g.rank()``)."""
        tc = getattr(self.context, "trainer_comm", None)
        return tc.Get_rank() if tc is not None else 0

    @property
    def _client(self) -> "_Client":
        """DGL's ``g._client`` (its key-value store client, private, on which DGL's
        examples call ``barrier()``): here only ``barrier()``, the graph's."""
        return _Client(self)


class _Client:
    """What of DGL's ``KVClient`` a script reaches through ``g._client``: ``barrier()``
    (collective over the trainers, :meth:`DistGraph.barrier`)."""

    def __init__(self, g: DistGraph):
        self._g = g

    def barrier(self) -> None:
        self._g.barrier()


def sample_neighbors(g, nodes, fanout, edge_dir: str = "in", prob=None, exclude_edges=None, replace: bool = False,
                     etype_sorted: bool = True, output_device=None, *, rng=None):
    """DGL's ``sample_neighbors(g, nodes, fanout, edge_dir, prob, exclude_edges,
    replace)``: :func:`hpcgnn.sampling.sample_neighbors`, whose result is the sampled
    edges ``Edges(src, dst, eid)`` (global ids), not a DGL graph.  ``prob``: the name
    of an edge feature.  ``exclude_edges`` is not supported (drop them from the
    result by ``eid``); ``etype_sorted`` is accepted and unused (edges come grouped by
    type).  Independent."""
    if exclude_edges is not None:
        raise InputError("sample_neighbors: exclude_edges is not supported; drop those edges from the "
                         "result by eid (or use a data loader's exclude=)")
    if output_device is not None and str(output_device) != "cpu":
        raise InputError(f"sample_neighbors: output_device={output_device!r}: the edges come back in host "
                         "memory; move the tensors with .to(device)")
    return _sample_neighbors(g, nodes, fanout, edge_dir, replace, prob, rng=rng)
