"""``partition_graph``: a raw graph file in, a partitioned graph (JSON + HDF5) out, in
one MPI job, with no rank ever holding the whole graph.

Phases (each rank works on its block of nodes and edges):

1. validate the options, the input file and the output directory (agreed);
2. read this rank's node and edge blocks;
3. assign partitions: ParMETIS on the symmetric view with one constraint per weight
   column, or a seeded hash (``random``);
4. relabel: partition ``p`` owns new ids ``[node_start[p], node_start[p+1])``
   (:mod:`.relabel`); map edge endpoints to new ids by asking their owners;
5. move each edge to the rank holding its owner endpoint and build the CSR
   (:mod:`.edges`), then the halo up to ``num_hops``;
6. write ``<out>/<name>.h5`` (every rank its slices, :mod:`.writer`), rename it into
   place, and write ``<out>/<name>.json`` last, atomically (:mod:`.config`).
"""
from __future__ import annotations

import os
import resource
import time

import numpy as np

from ..comm.agree import agreed
from ..comm.alltoall import allreduce_sum
from ..comm.collectives import all_sum, allreduce
from ..comm.mpi import MPI
from ..comm.rss import current_rss_bytes, peak_rss_bytes, rss_summary
from ..errors import InputError
from ..io import diskspace
from ..io.checksum import CHECKSUM_ALGORITHM
from ..io.partial import commit, remove_quietly
from . import config as cfg
from . import steps
from .coarsen import COARSEN_METHODS, resolve_coarsen
from .assign import random_parts
from .edges import Halo, LocalEdges
from .featdtype import DEFAULT_FIELDS, LOGICAL_KEY, resolve
from .idx_limits import check_sizes
from .relabel import IdLayout
from .source import RawSource, block
from .frequency import DEFAULT_FANOUTS, REFINE_METHODS
from .writer import PartFile

METHODS = {"parmetis": "parmetis", "metis": "parmetis", "random": "random", "frequency": "frequency"}


def _check_options(num_parts, part_method, edge_dir, num_hops, balance_ntypes, coarsen, rank, refine="none",
                   fanouts=DEFAULT_FANOUTS, ubvec=1.05):
    if not isinstance(num_parts, (int, np.integer)) or num_parts < 1:
        raise InputError(f"num_parts: {num_parts!r} must be an integer >= 1 (rank {rank})")
    if part_method not in METHODS:
        raise InputError(f"part_method: {part_method!r} is not one of {sorted(set(METHODS))} (rank {rank})")
    if edge_dir not in ("in", "out"):
        raise InputError(f"edge_dir: {edge_dir!r} must be 'in' or 'out' (rank {rank})")
    if not isinstance(num_hops, (int, np.integer)) or num_hops < 1:
        raise InputError(f"num_hops: {num_hops!r} must be an integer >= 1 (rank {rank})")
    if coarsen not in COARSEN_METHODS:
        raise InputError(f"coarsen: {coarsen!r} is not one of {list(COARSEN_METHODS)} (rank {rank})")
    if not (isinstance(ubvec, (int, float, np.floating)) and ubvec > 1.0):
        raise InputError(f"ubvec: {ubvec!r} must be a number > 1 (1.05: 5% imbalance allowed) (rank {rank})")
    if refine not in REFINE_METHODS:
        raise InputError(f"refine: {refine!r} is not one of {list(REFINE_METHODS)} (rank {rank})")
    try:
        ok = len(fanouts) > 0 and all(int(k) == k and (k > 0 or k == -1) for k in fanouts)
    except TypeError:
        ok = False
    if not ok:
        raise InputError(f"fanouts: {fanouts!r} must be a list of neighbour counts per hop (> 0, or -1 for all) "
                         f"(rank {rank})")
    if isinstance(balance_ntypes, str):
        raise InputError(f"balance_ntypes: pass a list of dataset names, not the string {balance_ntypes!r} "
                         f"(rank {rank})")


class _Clock:
    """Per phase: its time (slowest rank) and the RSS high-water mark summed over the
    ranks at its end (``memory``: where the peak was reached)."""

    def __init__(self, comm):
        self.comm, self.t, self.phases, self.memory = comm, time.perf_counter(), {}, {}

    def lap(self, name):
        now = time.perf_counter()
        self.phases[name] = round(float(allreduce(self.comm, [now - self.t], "max")[0]), 4)
        self.memory[name] = {"peak_rss_bytes_sum": all_sum(self.comm, peak_rss_bytes()),
                             "rss_bytes_now_sum": all_sum(self.comm, current_rss_bytes())}
        self.t = time.perf_counter()


def partition_graph(input_path: str, out_path: str, num_parts: int, *, graph_name: str | None = None,
                    comm=None, part_method: str = "parmetis", balance_ntypes=(), balance_edges: bool = False,
                    num_hops: int = 1, edge_dir: str = "in", return_mapping: bool = False, seed: int = 0,
                    ubvec: float = 1.05, balance_tol: float = 0.03, overwrite: bool = False,
                    coarsen: str = "auto", refine: str = "none", fanouts=DEFAULT_FANOUTS,
                    seeds: str = "train_mask", feat_dtype: str | None = None,
                    feat_fields=DEFAULT_FIELDS) -> str:
    """Collective over ``comm`` (default ``MPI.COMM_WORLD``): partition a raw graph.

    Reads ``input_path`` (docs/format-raw.md), writes ``out_path/<graph_name>.json``
    and ``out_path/<graph_name>.h5`` (docs/format.md) and returns the JSON's path.
    Works in one process or under ``mpirun -n R`` for any ``R`` (ParMETIS needs
    ``R <= num_nodes``).  ``part_method``: ``parmetis`` (``metis`` is an alias) or
    ``random``.  ``balance_ntypes``: node datasets whose values become extra
    constraints (a mask: one constraint; an integer type array: one per type).
    ``balance_edges``: the degree (in-degree for ``edge_dir='in'``) is a constraint.
    ``return_mapping``: store the original node and edge ids.  ``num_hops``: halo
    depth.  ``ubvec``: ParMETIS' imbalance goal per constraint; ``balance_tol``: after
    ParMETIS, 0/1 constraints (masks, types) are brought within this fraction of even
    by moving the fewest lowest-degree nodes (:mod:`.balance`).  ``coarsen``: ``none``
    runs ParMETIS on the whole symmetric view; ``lp`` first coarsens it by levels of
    size-constrained label propagation, runs ParMETIS on the small coarsest graph and
    refines back up (:mod:`.coarsen`): several times faster on graphs of millions of
    nodes, at a cut within a few percent; ``auto`` (default) is ``lp`` from
    ``coarsen.AUTO_LP_NODES`` (1M) nodes on, ``none`` below.
    ``part_method='frequency'`` (seeds spread by a seeded hash) or
    ``refine='frequency'`` (after ParMETIS or random): every node that is not a seed
    (``seeds``, a mask: the training nodes) moves to the partition whose seeds read it
    most often under a sampler with ``fanouts`` (hop order, seeds
    first), within ``ubvec`` of even node counts (:mod:`.frequency`).  ``feat_dtype``:
    ``bf16``, ``fp16`` or ``float32`` stores the node data named in ``feat_fields``
    (floating, default ``feat``) at that dtype, rounded to nearest even
    (:mod:`.featdtype`); None keeps the raw dtype.  Bad input raises
    :class:`~hpcgnn.errors.InputError` on every rank and leaves no configuration behind.

    The phases are :mod:`.steps`' functions, the JSON description :func:`_describe`;
    what is left here is their order.
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    rank, R = comm.Get_rank(), comm.Get_size()
    clock = _Clock(comm)
    balance_ntypes = list(balance_ntypes or ())
    with agreed(comm):
        _check_options(num_parts, part_method, edge_dir, num_hops, balance_ntypes, coarsen, rank, refine, fanouts,
                       ubvec)
        resolve(feat_dtype, rank)
        if not (isinstance(seed, (int, np.integer)) and 0 <= seed < 2**31):
            raise InputError(f"seed: {seed!r} must be an integer in [0, 2**31) (rank {rank})")
    method = METHODS[part_method]
    num_parts, num_hops = int(num_parts), int(num_hops)
    src = RawSource(input_path, comm)
    try:
        name = graph_name or src.graph_name
        N = src.num_nodes
        convs = steps.check_inputs(comm, src, input_path, out_path, name, num_parts, method, balance_ntypes,
                                   feat_dtype, feat_fields, overwrite)
        vtxdist = np.array([block(N, r, R)[0] for r in range(R)] + [N], dtype=np.int64)
        lo, hi = int(vtxdist[rank]), int(vtxdist[rank + 1])
        whole = method == "parmetis" and num_parts > 1 and resolve_coarsen(coarsen, N) == "none"
        if whole:                       # ParMETIS on the whole graph: what its idx_t holds, vertices first
            check_sizes(comm, vtxdist, 0, input_path)
        ends = list(src.read_edges())   # [src_ids, dst_ids]: the phases empty it when done with them
        clock.lap("read_edges")
        weights, zero_one = steps.node_weights(comm, src, input_path, vtxdist, balance_ntypes, balance_edges,
                                               edge_dir, *ends)
        names = list(weights)
        totals = allreduce_sum(comm, np.array([int(weights[k].sum()) for k in names], dtype=np.int64))
        constraints = [k for k, t in zip(names, totals) if t > 0]
        clock.lap("weights")
        rebalanced, coarse_info = 0, {}
        if method in ("random", "frequency"):
            parts = random_parts(np.arange(lo, hi, dtype=np.int64), num_parts, seed)
        else:
            parts, rebalanced, coarse_info = steps.graph_parts(
                comm, vtxdist, ends, weights, zero_one, constraints, num_parts, seed, coarsen=coarsen, ubvec=ubvec,
                balance_tol=balance_tol, whole=whole, input_path=input_path, clock=clock)
        clock.lap("assign")
        if not ends:
            ends = list(src.read_edges())
        freq_info = {}
        if (method == "frequency" or refine == "frequency") and num_parts > 1:
            freq_info, moved = steps.frequency_step(
                comm, src, input_path, vtxdist, *ends, parts, weights, zero_one, constraints, seeds=seeds,
                fanouts=fanouts, edge_dir=edge_dir, num_parts=num_parts, ubvec=ubvec, balance_tol=balance_tol)
            rebalanced += moved
            clock.lap("frequency")
        weight_sums = steps.part_weights(comm, parts, weights, num_parts)
        del weights
        types, layout, bins, order, edges, halo, cut = steps.move_edges(
            comm, src, input_path, vtxdist, parts, ends, num_parts, edge_dir=edge_dir, num_hops=num_hops,
            return_mapping=return_mapping, clock=clock)
        h5_tmp = cfg.partial_h5_path(out_path, name)
        checksums, nbytes = _write_h5(comm, h5_tmp, src, layout, bins, order, edges, halo,
                                      return_mapping, lo, hi, convs)
        clock.lap("write")
    finally:
        src.close()

    config = _describe(comm, src, input_path, name, convs, types, layout, edges, halo, cut, weight_sums,
                       checksums, nbytes, clock, num_parts=num_parts, method=method, coarsen=coarsen, seed=seed,
                       balance_ntypes=balance_ntypes, balance_edges=balance_edges, constraints=constraints,
                       ubvec=ubvec, balance_tol=balance_tol, rebalanced=rebalanced, edge_dir=edge_dir,
                       num_hops=num_hops, return_mapping=return_mapping, coarse_info=coarse_info,
                       freq_info=freq_info)
    path = cfg.config_path(out_path, name)
    with agreed(comm):
        if rank == 0:
            final = os.path.join(out_path, cfg.h5_name(name))
            try:
                remove_quietly(path)            # the old JSON (overwrite) goes only now
                commit(h5_tmp, final)
                cfg.write_config_atomic(path, config)
            except OSError as e:
                for p in (h5_tmp, final):       # never an HDF5 file without its JSON
                    remove_quietly(p)
                raise InputError(f"{out_path}: cannot write the output files ({e}) (rank {rank})") from e
    return path


def _describe(comm, src, input_path, name, convs, types, layout, edges, halo, cut, weight_sums, checksums, nbytes,
              clock, *, num_parts, method, coarsen, seed, balance_ntypes, balance_edges, constraints, ubvec,
              balance_tol, rebalanced, edge_dir, num_hops, return_mapping, coarse_info, freq_info) -> dict:
    """Collective (the memory summary): the partitioning's JSON description (docs/format.md)."""
    schema_n = {k: dict({"dtype": str(c.dtype), "shape": list(c.tail)},
                        **({"ntypes": src.col_ntypes[k]} if src.col_ntypes.get(k) else {}))
                for k, c in src.node_cols.items() if k != "node_type"}
    for k, conv in convs.items():
        schema_n[k].update(conv.schema(schema_n[k]["shape"]))
    schema_e = {k: {"dtype": str(c.dtype), "shape": list(c.tail)}
                for k, c in src.edge_cols.items() if k != "edge_type"}
    memory = rss_summary(comm)
    P = num_parts
    config = {
        "format": cfg.FORMAT,
        "version": cfg.VERSION_LOGICAL if any(LOGICAL_KEY in v for v in schema_n.values()) else cfg.VERSION,
        "graph_name": name, "num_nodes": int(src.num_nodes), "num_edges": int(src.num_edges), "num_parts": P,
        "h5_file": cfg.h5_name(name),
        "node_map": {t: layout.type_ranges(i) for i, t in enumerate(types.ntype_names)},
        "edge_map": {t: edges.type_ranges(i) for i, t in enumerate(types.etype_names)},
        "ntypes": {t: i for i, t in enumerate(types.ntype_names)},
        "etypes": {t: i for i, t in enumerate(types.etype_names)},
        "raw_node_types": src.ntypes, "raw_edge_types": src.etypes,
        "num_classes": src.num_classes,
        "part_method": method, "coarsen": resolve_coarsen(coarsen, src.num_nodes) if method == "parmetis" else "none",
        "refine": "frequency" if freq_info else "none", "frequency": freq_info,
        "seed": int(seed), "num_ranks": comm.Get_size(),
        "balance_ntypes": balance_ntypes, "balance_edges": bool(balance_edges),
        "constraints": constraints, "ubvec": float(ubvec),
        "balance_tol": float(balance_tol), "rebalanced_nodes": int(rebalanced),
        "edge_dir": edge_dir, "num_hops": num_hops, "return_mapping": bool(return_mapping),
        "node_feats": schema_n, "edge_feats": schema_e,
        "feat_dtype": {"dtype": next(iter(convs.values())).logical, "fields": sorted(convs)} if convs else None,
        "has_node_type": "node_type" in src.node_cols, "has_edge_type": "edge_type" in src.edge_cols,
        "edge_cut": int(cut.sum()),
        "parts": [{"part_id": p, "group": f"/part{p}", "num_inner_nodes": layout.part_size(p),
                   "num_halo_nodes": halo.layout.part_size(p),
                   "num_edges": edges.edge_layout.part_size(p), "num_cut_edges": int(cut[p]),
                   "weights": {k: int(v[p]) for k, v in weight_sums.items()}} for p in range(P)],
        "checksums": {"algorithm": CHECKSUM_ALGORITHM, "datasets": checksums},
        "source": {"path": os.path.abspath(input_path), "graph_name": src.graph_name},
        "stats": {"bytes_written": int(nbytes), "coarsening": coarse_info, **memory,
                  "timings_s": clock.phases, "memory_by_phase": clock.memory},
    }
    return config


#: node rows reordered and written at a time (not a reordered copy of the whole block)
WRITE_CHUNK_ROWS = 1 << 16
#: a node column is read in this many slabs of a rank's block while it is written (the
#: features are not held whole beside the edges: 1M nodes / 20M edges on 4 ranks, 48.3
#: -> 40.7 bytes per edge, the symmetric view's peak again)
NODE_SLABS = 4


def _write_h5(comm, h5_path, src, layout, bins, order, edges, halo, return_mapping, lo, hi, convs):
    """Collective: create and fill the HDF5 file; on failure remove it and raise everywhere.
    ``convs``: node features stored at another dtype (:func:`.featdtype.conversions`)."""
    rank = comm.Get_rank()
    P = layout.nparts
    specs = _dataset_specs(src, layout, edges, halo, return_mapping, convs)
    need = diskspace.estimate(sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
                                  for _, shape, dt, _ in specs), len(specs))
    with agreed(comm):          # agreed before any rank enters the collective create
        _check_space(h5_path, need, rank)
    with agreed(comm):
        out = PartFile(comm, h5_path, _final_name(h5_path))
    out.reserve(need)           # before anything is flushed: no write, flush or close below can run out
    try:
        with out.guard.step("creating its datasets"):
            _create_all(out, specs, layout, edges, halo)
        out.reserve(need)       # the datasets' real extent
        T = layout.types
        gstart = np.concatenate([[0], np.cumsum(np.bincount(bins, minlength=P * T))])

        def write_nodes(path, read):
            """The block's rows of a node column, read a slab at a time (``read(start,
            stop)``, collective) and written to each (partition, type) bin in order:
            within a bin, ``order`` lists block rows ascending, so a slab's rows are one
            run of the bin."""
            for s in range(NODE_SLABS):
                s0, s1 = (hi - lo) * s // NODE_SLABS, (hi - lo) * (s + 1) // NODE_SLABS
                vals = read(s0, s1)
                for b in range(P * T):
                    ob = order[gstart[b]:gstart[b + 1]]
                    j0, j1 = int(np.searchsorted(ob, s0)), int(np.searchsorted(ob, s1))
                    for c in range(j0, j1, WRITE_CHUNK_ROWS):
                        e = min(c + WRITE_CHUNK_ROWS, j1)
                        out.write(f"part{b // T}/{path}", layout.bin_offset(b) + c, vals[ob[c:e] - s0])
                del vals

        def read_col(k):
            def read(s0, s1):
                with agreed(comm):
                    vals = src.read_node_col(k, rows=(s0, s1))
                    if k in convs:
                        vals = convs[k].convert(vals, f"{src.path}: dataset '/nodes/data/{k}' (rank {rank})")
                return vals
            return read

        for k in sorted(src.node_cols):
            write_nodes("node_type" if k == "node_type" else f"node/{k}", read_col(k))
        if return_mapping:
            write_nodes("orig_nid", lambda s0, s1: np.arange(lo + s0, lo + s1, dtype=np.int64))
        el = edges.edge_layout
        for p in range(P):
            g = f"part{p}"
            for row, vals in edges.indptr_runs(p):
                out.write(f"{g}/csr/indptr", row, vals)
            if rank == 0:
                out.write(f"{g}/csr/indptr", edges.num_etypes * layout.part_size(p), np.array([el.part_size(p)]))
            for erow, sl in edges.bin_runs(p):
                out.write(f"{g}/csr/indices", erow, edges.other[sl])
                for k, a in edges.cols.items():
                    out.write(f"{g}/edge_type" if k == "edge_type" else f"{g}/edge/{k}", erow, a[sl])
                if return_mapping:
                    out.write(f"{g}/orig_eid", erow, edges.orig_eid[sl])
            hrow = halo.layout.local_offset(p)
            out.write(f"{g}/halo_nodes", hrow, halo.ids[p])
            if halo.with_edges:
                out.write(f"{g}/halo_hops", hrow, halo.hops[p])
                hel = halo.edge_layout
                ptr = np.cumsum(halo.deg[p]) - halo.deg[p]
                out.write(f"{g}/halo_csr/indptr", hrow, ptr + hel.local_offset(p))
                if rank == 0:
                    out.write(f"{g}/halo_csr/indptr", halo.layout.part_size(p), np.array([hel.part_size(p)]))
                out.write(f"{g}/halo_csr/indices", hel.local_offset(p), halo.nbr[p])
                out.write(f"{g}/halo_csr/eid", hel.local_offset(p), halo.nbr_eid[p])
        return out.finish()
    except BaseException:
        out.close()
        if rank == 0:
            remove_quietly(h5_path)
        raise


def _dataset_specs(src: RawSource, layout: IdLayout, edges: LocalEdges, halo: Halo,
                   return_mapping: bool, convs: dict) -> list[tuple[str, tuple, np.dtype, dict]]:
    """Independent (same result on every rank): (path, shape, dtype, attributes) of
    every dataset."""
    el, specs = edges.edge_layout, []
    attrs = {}
    for p in range(layout.nparts):
        g = f"part{p}"
        n, e, h = layout.part_size(p), el.part_size(p), halo.layout.part_size(p)
        for k, c in src.node_cols.items():
            path = f"{g}/node_type" if k == "node_type" else f"{g}/node/{k}"
            specs.append((path, (n,) + c.tail, convs[k].storage if k in convs else c.dtype))
            if k in convs:
                attrs[path] = convs[k].attrs()
        if return_mapping:
            specs += [(f"{g}/orig_nid", (n,), np.int64), (f"{g}/orig_eid", (e,), np.int64)]
        specs += [(f"{g}/csr/indptr", (edges.num_etypes * n + 1,), np.int64), (f"{g}/csr/indices", (e,), np.int64)]
        for k, c in src.edge_cols.items():
            specs.append((f"{g}/edge_type" if k == "edge_type" else f"{g}/edge/{k}", (e,) + c.tail, c.dtype))
        specs.append((f"{g}/halo_nodes", (h,), np.int64))
        if halo.with_edges:
            he = halo.edge_layout.part_size(p)
            specs += [(f"{g}/halo_hops", (h,), np.int8), (f"{g}/halo_csr/indptr", (h + 1,), np.int64),
                      (f"{g}/halo_csr/indices", (he,), np.int64), (f"{g}/halo_csr/eid", (he,), np.int64)]
    return [(k, tuple(int(x) for x in shape), np.dtype(dt), attrs.get(k, {})) for k, shape, dt in specs]


def _final_name(h5_tmp: str) -> str:
    """Pure: the name :func:`.config.partial_h5_path` ``h5_tmp`` becomes when complete."""
    d, base = os.path.split(h5_tmp)
    return os.path.join(d, base[1:].removesuffix(".partial"))


def _check_space(path: str, need: int, rank: int) -> None:
    """Independent: refuse early when the file (``need`` bytes) cannot fit (free
    space, file-size limit)."""
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if soft != resource.RLIM_INFINITY and soft < need:
        raise InputError(f"{path}: the partitioned graph needs about {need} bytes, but this process may "
                         f"write files of at most {soft} bytes (ulimit -f)")
    if rank == 0:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
        free = st.f_bavail * st.f_frsize
        if free < need:
            raise InputError(f"{path}: the partitioned graph needs about {need} bytes, but the disk has "
                             f"{free} bytes free: disk full")


def _create_all(out: PartFile, specs, layout: IdLayout, edges: LocalEdges, halo: Halo) -> None:
    """Collective: create every group and dataset (same calls on every rank)."""
    el = edges.edge_layout
    for p in range(layout.nparts):
        out.group_attrs(f"part{p}", {
            "part_id": p, "node_start": int(layout.start[p]), "node_end": int(layout.start[p + 1]),
            "edge_start": int(el.start[p]), "edge_end": int(el.start[p + 1]),
            "num_inner_nodes": layout.part_size(p), "num_halo_nodes": halo.layout.part_size(p),
            "num_edges": el.part_size(p)})
    for k, shape, dt, attrs in specs:
        out.create(k, shape, dt, attrs)
