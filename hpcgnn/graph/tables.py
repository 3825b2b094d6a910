"""A partitioned graph held in MPI windows: its structure and its data, as row tables.

Loaded collectively by every rank of the launch; the owner of partition ``p`` (the
first server of node ``p``, or the single process in standalone mode) reads
``/part{p}`` from the HDF5 file and fills its rows.  Tables, all indexed by global
(new) ids:

==============  ===============  ==========================================
table           rows             row
==============  ===============  ==========================================
``csr``         nodes            ``[first, end)`` global edge ids of the node's stored edges
                                 (typed graphs: one such pair per edge type)
``indices``     edges            the other endpoint of the edge
``rev_degree``  nodes            degree in the other direction (out-degree for in-edges)
node data       nodes            one table per ``/part{p}/node/<name>`` (a feature
                                 partitioned as bfloat16: its ``uint16`` bits)
edge data       edges            one table per ``/part{p}/edge/<name>``
==============  ===============  ==========================================

Edge ``e`` of partition ``p`` sits at position ``e - edge_start[p]`` of that
partition's CSR, so ``csr`` rows are global edge ids and sampling needs nothing else;
an edge's owner endpoint is found from ``csr`` (:mod:`hpcgnn.graph.edge_owner`).

The owner checks what it reads against the JSON: the group's counts, and the
checksum of every dataset of the group the JSON has one for (the arrays as read;
datasets the tables do not hold are read for it), unless ``HPCGNN_VERIFY=0``.  A
failure on any owner is raised alike on every rank of the launch.
"""
from __future__ import annotations

import os

import numpy as np

from ..comm.agree import agreed
from ..comm.rma.rowstore import RowStore
from ..partition.config import read_config, verify_enabled
from ..partition.featdtype import LOGICAL_KEY
from ..partition.verify import PartChecks, structure_problems
from ..errors import InputError
from ..io.h5 import open_h5
from ..partition.book import RangePartitionBook


def _read_into(dset, rows: np.ndarray) -> np.ndarray:
    """``dset``'s rows read straight into the window memory ``rows`` (no second copy of
    a partition's features); returns ``rows``."""
    if dset.dtype == rows.dtype and rows.flags.c_contiguous and dset.shape == rows.shape:
        dset.read_direct(rows)
    else:
        rows[...] = dset[:]
    return rows


class GraphTables:
    """Every rank's handle on a loaded graph (collective to create and to free)."""

    def __init__(self, ctx, name: str, config_path: str, owners: list[int]):
        self.name = name
        self.config_path = os.path.abspath(config_path)
        self.config, base = read_config(config_path)
        self.h5_path = os.path.join(base, self.config["h5_file"])
        self.book = RangePartitionBook(self.config, 0)
        self.num_parts = self.book.num_partitions()
        self.edge_dir = self.config.get("edge_dir", "in")
        self.owners = list(owners)
        nb = np.append(self.book.node_ranges[:, 0], self.book.node_ranges[-1, 1])
        eb = np.append(self.book.edge_ranges[:, 0], self.book.edge_ranges[-1, 1])
        self.node_bounds, self.edge_bounds = nb, eb
        rank = ctx.rank
        mine = [p for p in range(self.num_parts) if self.owners[p] == rank]

        def table(what, bounds, row_shape, dtype):
            return RowStore.create(ctx, f"{name}:{what}", bounds, row_shape, dtype, owners=self.owners)

        # typed graphs: one [first, end) range per edge type (edges are etype-major in a partition)
        self.num_etypes = len(self.book.etypes)
        self.csr = table("csr", nb, (2,) if self.num_etypes == 1 else (self.num_etypes, 2), np.int64)
        self.indices = table("indices", eb, (), np.int64)
        self.rev_degree = table("rev_degree", nb, (), np.int64)
        self.ndata = {k: table(f"ndata:{k}", nb, tuple(v["shape"]), np.dtype(v["dtype"]))
                      for k, v in sorted(self.config.get("node_feats", {}).items())}
        self.edata = {k: table(f"edata:{k}", eb, tuple(v["shape"]), np.dtype(v["dtype"]))
                      for k, v in sorted(self.config.get("edge_feats", {}).items())}
        try:
            with agreed(ctx.world):          # an owner's failure (a checksum): every rank raises it
                if mine:
                    self._fill(mine)
        except Exception:
            self.free()
            raise
        self.csr.barrier()
        # degree in the other direction: every owner counts its stored endpoints
        if mine:
            lo, hi = self.indices.local_range
            # a count per node, not a sorted copy of every edge (8 bytes per node, not per edge)
            counts = np.bincount(self.indices.local_rows[: hi - lo], minlength=self.num_nodes)
            ids = np.flatnonzero(counts)
            self.rev_degree.accumulate(ids, counts[ids].astype(np.int64), op="sum")
            del counts
        self.rev_degree.barrier()

    def _fill(self, parts: list[int]) -> None:
        """Owner: copy my partitions' rows from the HDF5 file into my window memory,
        checking each dataset against the JSON's checksum as it is read."""
        nrow0 = erow0 = 0
        verify = verify_enabled()
        try:
            f = open_h5(self.h5_path, "r")
        except OSError as e:
            raise InputError(f"{self.h5_path}: cannot read the partition file ({e})") from None
        with f:
            for p in parts:
                ns, ne = int(self.node_bounds[p]), int(self.node_bounds[p + 1])
                es, ee = int(self.edge_bounds[p]), int(self.edge_bounds[p + 1])
                n, e = ne - ns, ee - es
                T = self.num_etypes
                g = self._check_part(f, p, n, e, T)
                sums = PartChecks(self.config, p, self.h5_path, self.config_path, enabled=verify)
                indptr = g["csr/indptr"][:]
                where = f"{self.h5_path} (named by {self.config_path})"
                if indptr[0] != 0 or (len(indptr) > 1 and np.any(np.diff(indptr) < 0)):
                    raise InputError(f"{where}: /part{p}/csr/indptr must start at 0 and never decrease")
                sums.check("csr/indptr", indptr)
                csr = self.csr.local_rows[nrow0:nrow0 + n].reshape(n, T, 2)
                csr[:, :, 0] = (es + indptr[:-1]).reshape(T, n).T
                csr[:, :, 1] = (es + indptr[1:]).reshape(T, n).T
                if e:
                    got = self.indices.local_rows[erow0:erow0 + e]
                    g["csr/indices"].read_direct(got)
                    if got.min() < 0 or got.max() >= self.num_nodes:
                        raise InputError(f"{where}: /part{p}/csr/indices holds node ids outside "
                                         f"[0, {self.num_nodes})")
                    sums.check("csr/indices", got)
                for k, st in self.ndata.items():
                    if n:
                        sums.check(f"node/{k}", _read_into(g[f"node/{k}"], st.local_rows[nrow0:nrow0 + n]))
                for k, st in self.edata.items():
                    if e:
                        sums.check(f"edge/{k}", _read_into(g[f"edge/{k}"], st.local_rows[erow0:erow0 + e]))
                sums.check_rest(g)               # what the tables do not hold (halo, ids), and empty ones
                nrow0 += n
                erow0 += e

    def _check_part(self, f, p: int, n: int, e: int, T: int):
        """Partition ``p``'s group, after checking that it holds what the JSON says:
        ``n`` nodes and ``e`` edges (its ``node_map``/``edge_map``), and every node
        and edge dataset with the JSON's dtype and row shape."""
        where = f"{self.h5_path} (named by {self.config_path})"
        if f"part{p}" not in f or "csr/indptr" not in f[f"part{p}"]:
            raise InputError(f"{where}: no group /part{p} with a CSR")
        g = f[f"part{p}"]
        counts = structure_problems(f, p, (int(self.node_bounds[p]), int(self.node_bounds[p + 1])),
                                    (int(self.edge_bounds[p]), int(self.edge_bounds[p + 1])), self.h5_path,
                                    self.config_path)
        if counts:
            raise InputError(counts[0])
        if g["csr/indptr"].shape != (n * T + 1,) or int(g["csr/indptr"][-1]) != e:
            raise InputError(f"{where}: /part{p} holds {g['csr/indptr'].shape[0] - 1} CSR rows and "
                             f"{int(g['csr/indptr'][-1])} edges; the JSON's node_map/edge_map say {n * T} and {e}")
        for kind, tables, rows in (("node", self.ndata, n), ("edge", self.edata, e)):
            for k, st in tables.items():
                d = g.get(f"{kind}/{k}")
                if d is None or d.dtype != st.dtype or d.shape != (rows,) + st.row_shape:
                    got = "missing" if d is None else f"{d.dtype} {d.shape}"
                    raise InputError(f"{where}: /part{p}/{kind}/{k} is {got}; the JSON's {kind}_feats say "
                                     f"{st.dtype} {(rows,) + st.row_shape}")
                want = self.config[f"{kind}_feats"][k].get(LOGICAL_KEY)
                got = d.attrs.get(LOGICAL_KEY)
                if (want or got) and want != (got.decode() if isinstance(got, bytes) else got):
                    raise InputError(f"{where}: /part{p}/{kind}/{k} holds {got or d.dtype} values (attribute "
                                     f"'{LOGICAL_KEY}'); the JSON's {kind}_feats say {want or st.dtype}")
        return g

    @property
    def num_nodes(self) -> int:
        return int(self.node_bounds[-1])

    @property
    def num_edges(self) -> int:
        return int(self.edge_bounds[-1])

    def free(self) -> None:
        """Collective over the world: free every table (reverse creation order)."""
        for st in list(self.edata.values())[::-1] + list(self.ndata.values())[::-1] + \
                [self.rev_degree, self.indices, self.csr]:
            st.free()
