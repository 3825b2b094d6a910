"""``DistGraph``: a partitioned graph served from MPI windows, with DGL's names.

Distributed mode: under the launch, after :func:`hpcgnn.initialize`, on trainers::

    ctx = hpcgnn.initialize(layout="servers=1,trainers=rest", part_config="parts/g.json")
    g = DistGraph("g")                         # the graph the servers loaded
    x = g.ndata["feat"][torch.tensor([5, 1, 5])]  # rows wherever they live, in order

Standalone mode (one process, every partition loaded locally; debugging, tests)::

    g = DistGraph("g", part_config="parts/g.json")

All reads are one-sided (see :mod:`hpcgnn.comm.rma.rowstore`): local partitions are read
from shared memory, others with RMA, never waiting for the owner's Python code.
"""
from __future__ import annotations

import os
from collections import namedtuple

import numpy as np
import torch

from ..comm.agree import agreed
from ..comm.context import current_context
from ..comm.context import initialize as split_roles
from ..comm.context import open_context
from ..comm.mpi import MPI
from ..errors import InputError
from ..partition.book import RangePartitionBook
from ..partition.config import read_config
from ..partition.featdtype import LOGICAL_KEY
from .dist_tensor import DistTensor
from .edge_owner import EdgeOwners
from .policy import PartitionPolicy
from .service import Service
from .structure import GraphStructure

Edges = namedtuple("Edges", ["src", "dst", "eid"])
#: A feature's row shape and dtype (``g.node_attr_schemes()["feat"].shape``).
Scheme = namedtuple("Scheme", ["shape", "dtype"])


def expand_ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Independent: ``concatenate([arange(s, e) for s, e in zip(starts, ends)])``,
    vectorised."""
    lens = (ends - starts).astype(np.int64)
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offs = np.repeat(np.cumsum(lens) - lens, lens)
    return np.repeat(starts.astype(np.int64), lens) + (np.arange(total, dtype=np.int64) - offs)


def as_ids(ids, n: int, what: str) -> np.ndarray:
    if isinstance(ids, slice):
        return np.arange(*ids.indices(n), dtype=np.int64)
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    a = np.asarray(ids)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.dtype.kind not in "iu" and not (a.size == 0):
        raise InputError(f"{what}: ids must be integers, got dtype {a.dtype}")
    a = np.ascontiguousarray(a.astype(np.int64, copy=False).reshape(-1))   # kernels read it as memory
    if a.size and (a.min() < 0 or a.max() >= n):
        bad = int(a[(a < 0) | (a >= n)][0])
        raise InputError(f"{what}: id {bad} is out of range [0, {n})")
    return a


class _DataView(dict):
    """``g.ndata`` / ``g.edata``: name -> :class:`DistTensor` (read-only mapping).  On
    a typed graph, a type name that is not a data name gives that type's data,
    indexed by per-type ids: ``g.ndata["paper"]["feat"]`` (= ``g.nodes["paper"].data``)."""

    typed = None
    graph = None
    kind = "node"

    def __missing__(self, key):
        if self.typed is not None:
            try:
                return self.typed[key].data
            except InputError:
                pass
        raise KeyError(key)

    def __setitem__(self, key, value):
        """``g.ndata[name] = DistTensor(...)`` (DGL's way to attach new data): the tensor
        must have one row per node (edge); other values are refused."""
        n = None if self.graph is None else (self.graph.num_nodes() if self.kind == "node"
                                             else self.graph.num_edges())
        _check_attached(self, key, value, n, f"{self.kind} of the graph")
        dict.__setitem__(self, key, value)


def _check_attached(data: dict, key, value, num, what: str) -> None:
    """``value`` may become ``data[key]``: a DistTensor with ``num`` rows, one per
    ``what``, under a name not taken yet."""
    if not isinstance(value, DistTensor):
        raise InputError(f"DistGraph data {key!r}: assign a DistTensor with one row per {what} ({num}), "
                         f"not a {type(value).__name__}")
    if num is not None and value.shape[0] != num:
        raise InputError(f"DistGraph data {key!r}: the DistTensor has {value.shape[0]} rows, one per {what} "
                         f"makes {num}")
    if key in data:
        raise InputError(f"DistGraph data {key!r}: there is already data of this name")


def _check_same_graph(held, graph_name: str, part_config: str) -> None:
    """A graph name held already, named again with a ``part_config``: it must name the
    same partitions (the same HDF5 file), or the first graph would answer silently."""
    if os.path.realpath(part_config) == os.path.realpath(held.config_path):
        return
    cfg, _ = read_config(part_config)
    h5 = os.path.join(os.path.dirname(os.path.abspath(part_config)), cfg["h5_file"])
    if os.path.realpath(h5) != os.path.realpath(held.h5_path):
        raise InputError(f"DistGraph {graph_name!r}: a graph of this name is held already, from "
                         f"{held.config_path}; {part_config} names other partitions ({h5}). Load them under "
                         f"another name: DistGraph('{graph_name}_2', part_config=...)")


class DistGraph:
    """A partitioned graph; see the module doc.  Creation is collective over the
    trainers (distributed mode) or independent (standalone)."""

    def __init__(self, graph_name: str, part_config: str | None = None, *, ctx=None):
        ctx = ctx if ctx is not None else current_context()
        self.standalone = ctx is None
        if ctx is None:
            if part_config is None:
                raise InputError(f"DistGraph {graph_name!r}: no hpcgnn.initialize() in this process and no "
                                 "part_config= for standalone mode")
            ctx = _standalone_context()
        if not ctx.is_trainer:
            raise InputError(f"DistGraph {graph_name!r}: created on a {ctx.role} rank; only trainers use graphs")
        svc = ctx.service
        tcomm = ctx.trainer_comm
        names = sorted({str(n) for n in tcomm.allgather(graph_name)})
        held = graph_name in svc.graphs
        with agreed(tcomm):
            if len(names) > 1:
                raise InputError(f"DistGraph: the trainers name different graphs {names}; creation is "
                                 "collective, every trainer must name the same one")
            if held and part_config is not None:
                _check_same_graph(svc.graphs[graph_name], graph_name, part_config)
            if not held:
                if part_config is None:
                    have = sorted(svc.graphs) or "none"
                    raise InputError(f"DistGraph: no server holds a graph named {graph_name!r} (held: {have}); "
                                     "pass part_config= or hpcgnn.initialize(part_config=...)")
                cfg, _ = read_config(part_config)
                if ctx.size > 1 and not ctx.ranks_of("server"):
                    raise InputError(f"DistGraph {graph_name!r}: layout '{ctx.layout}' has no server rank "
                                     "to hold the graph")
                if cfg["num_parts"] > max(ctx.num_hosts, 1) and ctx.size > 1:
                    raise InputError(f"{part_config}: {cfg['num_parts']} partitions but the launch has "
                                     f"{ctx.num_hosts} host(s); one host serves each partition "
                                     "(launch more hosts or set ranks_per_node)")
        if not held:
            svc.call("load_graph", graph_name, os.path.abspath(part_config))
        self._bind(ctx, graph_name)

    @classmethod
    def attach(cls, ctx, graph_name: str) -> "DistGraph":
        """Independent: a view of a graph this rank's service already holds, on any
        role (sampler ranks read the graph this way)."""
        if graph_name not in ctx.service.graphs:
            raise InputError(f"DistGraph.attach: rank {ctx.rank} holds no graph named {graph_name!r}")
        g = cls.__new__(cls)
        g.standalone = False
        g._bind(ctx, graph_name)
        return g

    def _bind(self, ctx, graph_name: str) -> None:
        svc = ctx.service
        self._ctx = ctx
        self._t = svc.graphs[graph_name]
        self._owners = EdgeOwners(self._t)          # find_edges: owner endpoints from the CSR rows
        self.graph_name = graph_name
        t = self._t
        self._part_id = min(ctx.host_id, t.num_parts - 1)
        self._book = RangePartitionBook(t.config, self._part_id)
        npol, epol = PartitionPolicy("node", self._book), PartitionPolicy("edge", self._book)
        feats = t.config.get("node_feats", {})
        self.ndata = _DataView({k: DistTensor.from_store(ctx, st, f"{graph_name}:ndata:{k}", part_policy=npol,
                                                         logical_dtype=feats.get(k, {}).get(LOGICAL_KEY))
                                for k, st in t.ndata.items()})
        self.edata = _DataView({k: DistTensor.from_store(ctx, st, f"{graph_name}:edata:{k}", part_policy=epol)
                                for k, st in t.edata.items()})
        self._typed_extra = {}        # (kind, type) -> {name: DistTensor} attached per type
        self.ndata.graph, self.ndata.kind = self, "node"
        self.edata.graph, self.edata.kind = self, "edge"
        if not self._book.is_homogeneous:
            self.ndata.typed, self.edata.typed = _TypeViews(self, "node"), _TypeViews(self, "edge")

    # -- sizes and types ---------------------------------------------------------
    def num_nodes(self, ntype=None) -> int:
        """Nodes of type ``ntype`` (all nodes when None)."""
        return self._t.num_nodes if ntype is None else \
            self._book.num_nodes_of(self._book.ntypes[self.get_ntype_id(ntype)])

    def num_edges(self, etype=None) -> int:
        """Edges of type ``etype`` (canonical triple, ``"src:rel:dst"`` or a unique
        relation name; all edges when None)."""
        return self._t.num_edges if etype is None else \
            self._book.num_edges_of(self._book.etypes[self.get_etype_id(etype)])

    @property
    def is_homogeneous(self) -> bool:
        return self._book.is_homogeneous

    @property
    def tables(self) -> GraphStructure:
        """The served structure samplers read: the seam between the graph and whatever
        samples from it (:class:`~hpcgnn.graph.structure.GraphStructure`: ``csr``,
        ``indices``, ``num_etypes``, ``ndata``, ``edata``, ``config``)."""
        return self._t

    @property
    def nodes(self):
        """``g.nodes[ntype].data[name]``: the node data of one type, indexed by
        per-type ids (DGL's typed view); ``g.nodes[ntype].ids(per_type)`` gives the
        homogeneous ids."""
        return _TypeViews(self, "node")

    @property
    def edges(self):
        """``g.edges[etype].data[name]``: edge data of one type, per-type ids."""
        return _TypeViews(self, "edge")

    number_of_nodes = num_nodes
    number_of_edges = num_edges

    @property
    def ntypes(self) -> list[str]:
        return self._book.ntypes

    @property
    def etypes(self) -> list[str]:
        """Relation names (``_E`` for a homogeneous graph), in edge type order."""
        return [c[1] for c in self._book.canonical_etypes]

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return self._book.canonical_etypes

    def to_canonical_etype(self, etype) -> tuple[str, str, str]:
        return self._book.canonical_etypes[self.get_etype_id(etype)]

    def get_ntype_id(self, ntype) -> int:
        """Index of a node type (``None`` on a graph with one type)."""
        if ntype is None:
            if len(self.ntypes) != 1:
                raise InputError(f"DistGraph {self.graph_name!r}: name a node type, the graph has {self.ntypes}")
            return 0
        try:
            return self._book.ntype_id(ntype)
        except ValueError as e:
            raise InputError(f"DistGraph {self.graph_name!r}: {e}") from None

    def get_etype_id(self, etype) -> int:
        """Index of an edge type: a canonical triple, ``"src:rel:dst"`` or a relation
        name that names one type (``None`` on a graph with one type)."""
        if etype is None:
            if len(self.etypes) != 1:
                raise InputError(f"DistGraph {self.graph_name!r}: name an edge type, the graph has "
                                 f"{self.canonical_etypes}")
            return 0
        try:
            return self._book.etype_id(etype)
        except ValueError as e:
            raise InputError(f"DistGraph {self.graph_name!r}: {e}") from None

    def get_node_partition_policy(self, ntype=None):
        """The :class:`PartitionPolicy` of the nodes of ``ntype`` (per-type ids; on a
        graph with one type, every node id)."""
        return PartitionPolicy(f"node:{self.ntypes[self.get_ntype_id(ntype)]}", self._book)

    def get_edge_partition_policy(self, etype=None):
        """The :class:`PartitionPolicy` of the edges of ``etype`` (as
        :meth:`get_node_partition_policy`)."""
        return PartitionPolicy(f"edge:{self._book.etypes[self.get_etype_id(etype)]}", self._book)

    @property
    def idtype(self):
        """The dtype of node and edge ids (int64)."""
        return torch.int64

    @property
    def device(self):
        """Where the graph's structure is read to (the CPU)."""
        return torch.device("cpu")

    def node_types_of(self, nids) -> np.ndarray:
        """Independent: node type index of each homogeneous node id (from the ranges)."""
        return self._book.map_to_per_ntype(as_ids(nids, self._t.num_nodes, "node_types_of"))[0]

    @property
    def edge_dir(self) -> str:
        """``'in'``: edges are stored with their destination (in-edge sampling)."""
        return self._t.edge_dir

    @property
    def context(self):
        return self._ctx

    def node_attr_schemes(self) -> dict:
        """Name -> :data:`Scheme` ``(shape, dtype)``: row shape and dtype of every node feature."""
        return {k: Scheme(tuple(v.shape[1:]), v.dtype) for k, v in self.ndata.items()}

    def edge_attr_schemes(self) -> dict:
        return {k: Scheme(tuple(v.shape[1:]), v.dtype) for k, v in self.edata.items()}

    def get_partition_book(self):
        """The :class:`RangePartitionBook`; ``partid`` is this trainer's partition."""
        return self._book

    def get_partition_config(self) -> dict:
        return self._t.config

    @property
    def local_partition(self):
        """This trainer's partition, read from node-shared memory (zero copies):
        ``indptr`` (local offsets), ``indices`` (global ids), node range."""
        t, p = self._t, self._part_id
        ns, ne = int(t.node_bounds[p]), int(t.node_bounds[p + 1])
        es, ee = int(t.edge_bounds[p]), int(t.edge_bounds[p + 1])
        csr = t.csr.gather(np.arange(ns, ne)).reshape(ne - ns, -1, 2) if ne > ns else np.zeros((0, 1, 2), np.int64)
        indptr = np.append(csr[:, :, 0].T.reshape(-1), ee) - es   # typed: row t * n + i
        return {"part_id": p, "node_range": (ns, ne), "edge_range": (es, ee), "indptr": indptr,
                "indices": t.indices.gather(np.arange(es, ee))}

    def barrier(self) -> None:
        """Collective over the trainers."""
        self._ctx.trainer_comm.Barrier()

    # -- structure ---------------------------------------------------------------
    def _csr_rows(self, nodes: np.ndarray) -> np.ndarray:
        """``[n, T, 2]``: the ``[first, end)`` edge ids of each node, per edge type."""
        T = self._t.num_etypes
        return self._t.csr.gather(nodes).reshape(len(nodes), T, 2) if len(nodes) else np.zeros((0, T, 2), np.int64)

    def _stored_degree(self, v):
        n = as_ids(v, self._t.num_nodes, "degrees")
        rows = self._csr_rows(n)
        return torch.from_numpy((rows[:, :, 1] - rows[:, :, 0]).sum(axis=1))

    def _other_degree(self, v):
        n = as_ids(v, self._t.num_nodes, "degrees")
        return torch.from_numpy(self._t.rev_degree.gather(n) if len(n) else np.zeros(0, np.int64))

    def _degrees(self, v, stored: bool):
        one = isinstance(v, (int, np.integer)) or (hasattr(v, "ndim") and v.ndim == 0)
        v = np.arange(self._t.num_nodes) if v is None else v
        d = self._stored_degree(v) if stored else self._other_degree(v)
        return int(d[0]) if one else d          # one node: an int, as DGL gives

    def in_degrees(self, v=None):
        """In-degree of each node in ``v`` (a tensor; all nodes when ``None``; an int
        for one node id)."""
        return self._degrees(v, self.edge_dir == "in")

    def out_degrees(self, v=None):
        """Out-degree of each node in ``v`` (as :meth:`in_degrees`)."""
        return self._degrees(v, self.edge_dir == "out")

    def find_edges(self, eids):
        """``(src, dst)`` of each edge id, as torch tensors."""
        e = as_ids(eids, self._t.num_edges, "find_edges")
        other = self._t.indices.gather(e) if len(e) else np.zeros(0, np.int64)
        owner = self._owners(e)
        src, dst = (other, owner) if self.edge_dir == "in" else (owner, other)
        return torch.from_numpy(src), torch.from_numpy(dst)

    def _stored_subgraph(self, nodes) -> Edges:
        n = as_ids(nodes, self._t.num_nodes, "subgraph")
        rows = self._csr_rows(n)
        eids = expand_ranges(rows[:, :, 0].reshape(-1), rows[:, :, 1].reshape(-1))
        owner = np.repeat(n, (rows[:, :, 1] - rows[:, :, 0]).sum(axis=1))
        other = self._t.indices.gather(eids) if len(eids) else np.zeros(0, np.int64)
        src, dst = (other, owner) if self.edge_dir == "in" else (owner, other)
        return Edges(torch.from_numpy(src), torch.from_numpy(dst), torch.from_numpy(eids))

    def in_subgraph(self, nodes) -> Edges:
        """Every in-edge of ``nodes``: ``Edges(src, dst, eid)`` (global ids, torch)."""
        if self.edge_dir != "in":
            raise InputError(f"DistGraph {self.graph_name!r}: in_subgraph needs a graph partitioned with "
                             "edge_dir='in' (this one stores out-edges; use out_subgraph)")
        return self._stored_subgraph(nodes)

    def out_subgraph(self, nodes) -> Edges:
        """Every out-edge of ``nodes`` (graphs partitioned with ``edge_dir='out'``)."""
        if self.edge_dir != "out":
            raise InputError(f"DistGraph {self.graph_name!r}: out_subgraph needs a graph partitioned with "
                             "edge_dir='out' (this one stores in-edges; use in_subgraph)")
        return self._stored_subgraph(nodes)

    def __repr__(self):
        return (f"DistGraph({self.graph_name!r}, num_nodes={self.num_nodes()}, num_edges={self.num_edges()}, "
                f"parts={self._t.num_parts}, {'standalone' if self.standalone else 'distributed'})")


class _TypedData(dict):
    """name -> :class:`TypedTensor` of one node or edge type; a :class:`DistTensor`
    with one row per node (edge) of the type may be attached (indexed by per-type ids)."""

    owner = None        # (graph, kind, type name, count)

    def __setitem__(self, key, value):
        g, kind, tname, num = self.owner
        _check_attached(self, key, value, num, f"{kind} of type {tname!r}")
        g._typed_extra.setdefault((kind, tname), {})[key] = value
        dict.__setitem__(self, key, value)


class TypedTensor:
    """Rows of a graph tensor for one type, indexed by per-type ids: ``t[ids]``
    reads, ``t[ids] = v`` writes (through the homogeneous :class:`DistTensor`)."""

    def __init__(self, tensor, to_homo, num: int, name: str):
        self.tensor, self._to_homo, self._num, self.name = tensor, to_homo, num, name

    @property
    def shape(self):
        return (self._num,) + tuple(self.tensor.shape[1:])

    @property
    def dtype(self):
        return self.tensor.dtype

    def __len__(self):
        return self._num

    def __getitem__(self, ids):
        return self.tensor[torch.from_numpy(self._to_homo(as_ids(ids, self._num, self.name)))]

    def __setitem__(self, ids, value):
        self.tensor[torch.from_numpy(self._to_homo(as_ids(ids, self._num, self.name)))] = value

    def __repr__(self):
        return f"TypedTensor({self.name!r}, shape={self.shape}, dtype={self.dtype})"


class _TypeView:
    def __init__(self, g, kind: str, tname):
        book = g._book
        if kind == "node":
            book.ntype_id(tname)
            self.type_name, self.num = tname, book.num_nodes_of(tname)
            self.ids = lambda per: book.map_to_homo_nid(per, tname)
            feats = g.tables.config["node_feats"]
            tensors = {k: v for k, v in g.ndata.items() if tname in feats.get(k, {}).get("ntypes", [tname])}
        else:
            t = book.etype_id(tname)
            self.type_name, self.num = book.etypes[t], book.num_edges_of(tname)
            self.ids = lambda per: book.map_to_homo_eid(per, tname)
            tensors = {k: v for k, v in g.edata.items()}
        self.data = _TypedData({k: TypedTensor(v, self.ids, self.num, f"{kind} {self.type_name}:{k}")
                                for k, v in tensors.items()})
        dict.update(self.data, g._typed_extra.get((kind, self.type_name), {}))   # per-type, as they are
        self.data.owner = (g, kind, self.type_name, self.num)


class _TypeViews:
    def __init__(self, g, kind: str):
        self._g, self._kind = g, kind

    def __getitem__(self, tname):
        try:
            return _TypeView(self._g, self._kind, tname)
        except ValueError as e:
            raise InputError(f"DistGraph {self._g.graph_name!r}: {e}") from None


def _standalone_context():
    """A one-process context (this process is the only trainer and owns everything)."""
    ctx = split_roles(layout="servers=0,samplers=0,trainers=1", comm=MPI.COMM_SELF)
    ctx.service = Service(ctx)
    ctx.service.start_serving()
    return open_context(ctx)
