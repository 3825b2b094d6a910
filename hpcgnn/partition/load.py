"""Reading one partition back (independent: one process, plain h5py)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..io.h5 import open_h5
from .book import RangePartitionBook
from .config import read_config, verify_enabled
from .featdtype import LOGICAL_KEY, logical_dtype
from .verify import PartChecks, structure_problems


@dataclass
class Partition:
    """One partition's arrays (numpy) and metadata.

    ``indptr``/``indices``: CSR over the inner nodes (rows: owner endpoints, local
    row ``i`` is global id ``node_start + i``; ``indices``: other endpoints, global new
    ids); edge ``j`` has global id ``edge_start + j``.  ``node_feats``/``edge_feats``:
    name -> rows of the inner nodes / stored edges, as stored.  ``node_feat_dtypes``:
    name -> logical dtype of the features partitioned with ``--feat-dtype``; a
    ``bfloat16`` one is held as its bit patterns (``uint16``: NumPy has no bfloat16),
    which :func:`hpcgnn.partition.featdtype.to_float32` decodes (DGL's
    ``hpcgnn.distributed.load_partition`` hands it as ``torch.bfloat16``).
    ``orig_nid``/``orig_eid``: present with ``return_mapping``.  ``halo_*``: see
    docs/format.md.
    """

    part_id: int
    graph_name: str
    node_start: int
    node_end: int
    edge_start: int
    edge_end: int
    indptr: np.ndarray
    indices: np.ndarray
    halo_nodes: np.ndarray
    node_feats: dict = field(default_factory=dict)
    edge_feats: dict = field(default_factory=dict)
    node_type: np.ndarray | None = None
    edge_type: np.ndarray | None = None
    orig_nid: np.ndarray | None = None
    orig_eid: np.ndarray | None = None
    halo_hops: np.ndarray | None = None
    halo_indptr: np.ndarray | None = None
    halo_indices: np.ndarray | None = None
    halo_eid: np.ndarray | None = None
    node_feat_dtypes: dict = field(default_factory=dict)
    edge_dir: str = "in"
    book: RangePartitionBook | None = None
    config: dict = field(default_factory=dict)

    @property
    def num_inner_nodes(self) -> int:
        return self.node_end - self.node_start

    @property
    def num_edges(self) -> int:
        return len(self.indices)

    @property
    def num_etypes(self) -> int:
        """Edge types of the CSR: ``indptr`` has ``num_etypes * n + 1`` entries (row
        ``t * n + i``: edges of type ``t`` of inner node ``i``)."""
        return max(1, len(self.config.get("etypes", {})))

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) of the stored edges, as new global ids, in edge-id order."""
        rows = np.arange(len(self.indptr) - 1, dtype=np.int64) % max(self.num_inner_nodes, 1)
        own = self.node_start + np.repeat(rows, np.diff(self.indptr))
        return (self.indices, own) if self.edge_dir == "in" else (own, self.indices)


def _h5_path(conf: dict, base: str) -> str:
    return os.path.join(base, conf["h5_file"])


def load_partition_book(config, part_id: int) -> RangePartitionBook:
    """Independent: the partition book of a partitioned graph, for partition ``part_id``."""
    conf, _ = read_config(config)
    return RangePartitionBook(conf, part_id)


def load_partition(config, part_id: int, *, verify: bool = True) -> Partition:
    """Independent: load partition ``part_id`` of the graph described by ``config``
    (the JSON's path).  The group's counts are checked against the JSON; with
    ``verify`` (and unless ``HPCGNN_VERIFY=0``) every dataset of the group against
    the JSON's checksum, as it is read."""
    conf, base = read_config(config)
    book = RangePartitionBook(conf, part_id)
    path = _h5_path(conf, base)
    name = config if isinstance(config, str) else "the partition configuration"
    g = f"part{part_id}"
    try:
        f = open_h5(path, "r")
    except OSError as e:
        raise InputError(f"{path}: cannot open the partition file named by {config} ({e})") from e
    with f:
        if g not in f:
            raise InputError(f"{path}: group '/{g}' missing")
        problems = structure_problems(f, part_id, tuple(int(v) for v in book.node_ranges[part_id]),
                                      tuple(int(v) for v in book.edge_ranges[part_id]), path, name)
        if problems:
            raise InputError(problems[0])
        grp = f[g]
        sums = PartChecks(conf, part_id, path, name, enabled=verify and verify_enabled())

        def rd(k):
            if k not in grp:
                return None
            rows = grp[k][()]
            sums.check(k, rows)
            return rows

        a = grp.attrs
        part = Partition(
            part_id=part_id, graph_name=conf["graph_name"],
            node_start=int(a["node_start"]), node_end=int(a["node_end"]),
            edge_start=int(a["edge_start"]), edge_end=int(a["edge_end"]),
            indptr=rd("csr/indptr"), indices=rd("csr/indices"), halo_nodes=rd("halo_nodes"),
            node_feats={k: rd(f"node/{k}") for k in grp["node"]} if "node" in grp else {},
            edge_feats={k: rd(f"edge/{k}") for k in grp["edge"]} if "edge" in grp else {},
            node_type=rd("node_type"), edge_type=rd("edge_type"),
            orig_nid=rd("orig_nid"), orig_eid=rd("orig_eid"), halo_hops=rd("halo_hops"),
            halo_indptr=rd("halo_csr/indptr"), halo_indices=rd("halo_csr/indices"),
            halo_eid=rd("halo_csr/eid"), edge_dir=conf.get("edge_dir", "in"), book=book, config=conf,
            node_feat_dtypes={k: logical_dtype(v) for k, v in conf.get("node_feats", {}).items() if LOGICAL_KEY in v})
        sums.check_rest(grp)
        return part
