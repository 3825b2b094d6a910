"""``partition_graph``, ``load_partition`` and ``load_partition_book`` with DGL's
argument orders and return values.

hpcgnn's :func:`hpcgnn.partition.partition_graph` takes ``(input_path, out_path,
num_parts, *, graph_name=...)`` and partitions a graph file in parallel; DGL's takes
``(g, graph_name, num_parts, out_path, ...)``.  Here ``g`` is the path of a graph in
hpcgnn's raw format (docs/format-raw.md): there is no in-memory DGLGraph.
"""
from __future__ import annotations

import os

import numpy as np
import torch

from ..errors import InputError
from ..io.h5 import open_h5
from ..partition import load_partition as _load_partition
from ..partition import partition_graph as _partition_graph
from ..partition.config import read_config
from ..partition.featdtype import is_bf16
from ..partition.load import load_partition_book as _load_partition_book


def partition_graph(g, graph_name: str, num_parts: int, out_path: str, num_hops: int = 1,
                    part_method: str = "metis", balance_ntypes=None, balance_edges: bool = False,
                    return_mapping: bool = False, num_trainers_per_machine: int = 1, objtype: str = "cut",
                    graph_formats=None, **kwargs):
    """DGL's ``partition_graph(g, graph_name, num_parts, out_path, ...)``: collective
    over ``comm=`` (default ``MPI.COMM_WORLD``; one process works too).

    ``g``: the path of a raw graph file (docs/format-raw.md).  ``balance_ntypes``:
    the name (or names) of node datasets of that file to balance, e.g.
    ``'train_mask'`` (DGL takes the tensor itself).  ``part_method``: ``'metis'``
    (ParMETIS) or ``'random'``.  ``num_trainers_per_machine`` and ``graph_formats``
    are accepted and unused (:func:`~hpcgnn.graph.node_split` gives each trainer ids
    of its own partition).  Other keywords go to :func:`hpcgnn.partition.partition_graph`
    (``comm``, ``edge_dir``, ``seed``, ``overwrite``, ...).  Returns, as DGL, the new
    -> original id maps ``(orig_nids, orig_eids)`` (int64 tensors over all nodes and
    edges, homogeneous ids) with ``return_mapping=True``; otherwise the path of the
    partition config written."""
    if not isinstance(g, (str, os.PathLike)):
        raise InputError(f"partition_graph: g must be the path of a graph file in hpcgnn's raw format "
                         f"(docs/format-raw.md; `hpcgnn convert` writes one), got {type(g).__name__}")
    if objtype != "cut":
        raise InputError(f"partition_graph: objtype={objtype!r}; ParMETIS here minimizes the edge cut "
                         "(objtype='cut')")
    if balance_ntypes is None:
        balance_ntypes = ()
    elif isinstance(balance_ntypes, str):
        balance_ntypes = (balance_ntypes,)
    elif not (isinstance(balance_ntypes, (list, tuple)) and all(isinstance(b, str) for b in balance_ntypes)):
        raise InputError(f"partition_graph: balance_ntypes must name node datasets of {os.fspath(g)!r} "
                         f"(e.g. 'train_mask'), got {type(balance_ntypes).__name__}; the partitioner reads "
                         "the values from the file")
    cfg = _partition_graph(os.fspath(g), out_path, num_parts, graph_name=graph_name, part_method=part_method,
                           balance_ntypes=balance_ntypes, balance_edges=balance_edges, num_hops=num_hops,
                           return_mapping=return_mapping, **kwargs)
    if not return_mapping:
        return cfg
    return read_id_maps(cfg)


def read_id_maps(part_config: str):
    """Independent: ``(orig_nids, orig_eids)``, int64 tensors: the original id of
    every new node and edge id, read from a graph partitioned with
    ``return_mapping=True``."""
    conf, base = read_config(part_config)
    path = os.path.join(base, conf["h5_file"])
    with open_h5(path, "r") as f:
        parts = [f[f"part{p}"] for p in range(int(conf["num_parts"]))]
        if any("orig_nid" not in p for p in parts):
            raise InputError(f"{path}: no '/part{{p}}/orig_nid' datasets; partition with return_mapping=True")
        nids = np.concatenate([p["orig_nid"][()] for p in parts])
        eids = np.concatenate([p["orig_eid"][()] for p in parts])
    return torch.from_numpy(nids.astype(np.int64)), torch.from_numpy(eids.astype(np.int64))


def load_partition_book(part_config: str, part_id: int):
    """DGL's ``load_partition_book(part_config, part_id)``: independent;
    ``(gpb, graph_name, ntypes, etypes)`` with ``ntypes``/``etypes`` dicts from type
    name (edge: canonical triple) to type id."""
    book = _load_partition_book(part_config, part_id)
    return (book, book.graph_name, {t: i for i, t in enumerate(book.ntypes)},
            {t: i for i, t in enumerate(book.canonical_etypes)})


def load_partition(part_config: str, part_id: int, load_feats: bool = True, use_graphbolt: bool = False):
    """DGL's ``load_partition(part_config, part_id)``: independent;
    ``(partition, node_feats, edge_feats, gpb, graph_name, ntypes, etypes)``.

    ``partition`` is hpcgnn's :class:`~hpcgnn.partition.Partition` (CSR arrays over
    the inner nodes, halo), not a DGL graph.  ``node_feats``/``edge_feats`` are keyed
    ``'<ntype>/<name>'`` / ``'<etype>/<name>'`` as DGL's (``'_N/feat'``, ``'_E/w'`` on
    an untyped graph), with the rows of the partition's nodes (edges) of that type,
    as tensors where torch has the dtype (``torch.bfloat16`` for features partitioned
    with ``--feat-dtype bf16``); empty with ``load_feats=False``."""
    p = _load_partition(part_config, part_id)
    book, name, ntypes, etypes = load_partition_book(part_config, part_id)
    nf = _by_type(p.node_feats, p.node_type, book.ntypes, p.config.get("node_feats", {})) if load_feats else {}
    ef = _by_type(p.edge_feats, p.edge_type, book.etypes, {}) if load_feats else {}
    return p, nf, ef, book, name, ntypes, etypes


def _by_type(feats: dict, types, names: list, schemas: dict) -> dict:
    """``'<type>/<name>'`` -> the rows of that type (a node feature some node types
    lack, per its schema's ``ntypes``, is left out for them)."""
    out = {}
    for fname, rows in feats.items():
        has = schemas.get(fname, {}).get("ntypes") or names
        for i, t in enumerate(names):
            if t not in has:
                continue
            sel = rows if types is None or len(names) == 1 else rows[np.asarray(types) == i]
            out[f"{t}/{fname}"] = _tensor(sel, is_bf16(schemas.get(fname, {})))
    return out


def _tensor(a, bf16: bool = False):
    if bf16:                   # bfloat16 bit patterns (uint16): seen as bfloat16
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    try:
        return torch.from_numpy(np.ascontiguousarray(a))
    except TypeError:          # a dtype torch cannot hold: NumPy
        return a
