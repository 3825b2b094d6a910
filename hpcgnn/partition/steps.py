"""The phases of :func:`~hpcgnn.partition.pipeline.partition_graph`, in order: check the
inputs, the nodes' balance weights, the assignment (ParMETIS, coarsened or whole, or
random) with its rebalancing, the frequency refinement, then new ids, the edges moved
to their owners and the halo.  Every function is collective over ``comm``.

Arrays of the size of the graph that a phase consumes come in a list (``ends``) that
the phase empties once it no longer needs them, so that no caller keeps them alive.
"""
from __future__ import annotations

import os

import numpy as np

from ..comm.agree import agreed
from ..comm.alltoall import allreduce_sum
from ..errors import InputError
from . import config as cfg
from .assign import balance_columns, local_degrees, parmetis_parts, symmetric_csr
from .balance import rebalance
from .coarsen import coarsened_parts, resolve_coarsen
from .edges import Halo, LocalEdges
from .featdtype import conversions
from .frequency import frequency_refine
from .idx_limits import check_sizes
from .relabel import IdLayout, assign_new_ids, map_ids
from .types import GraphTypes


def check_inputs(comm, src, input_path, out_path, name, num_parts, method, balance_ntypes, feat_dtype,
                 feat_fields, overwrite) -> dict:
    """The checks that need the raw file, and the output directory made; returns the
    feature conversions (:func:`~hpcgnn.partition.featdtype.conversions`)."""
    rank, R, N = comm.Get_rank(), comm.Get_size(), src.num_nodes
    with agreed(comm):
        if num_parts > N:
            raise InputError(f"{input_path}: num_parts={num_parts} is more than the graph's {N} nodes "
                             f"(attribute 'num_nodes') (rank {rank})")
        if method == "parmetis" and R > N:
            raise InputError(f"{input_path}: ParMETIS needs at least one node per rank, but {R} ranks "
                             f"share {N} nodes; run with at most {N} ranks (rank {rank})")
        for b in balance_ntypes:
            if b not in src.node_cols:
                raise InputError(f"{input_path}: dataset '/nodes/data/{b}' (named in balance_ntypes) "
                                 f"is missing (rank {rank})")
        if not name or "/" in name:
            raise InputError(f"graph_name: {name!r} is not a valid file name (rank {rank})")
        convs = conversions(feat_dtype, feat_fields, src.node_cols, input_path, rank)
        if rank == 0:
            cfg.check_output_dir(out_path, name, overwrite, rank, input_path)
    with agreed(comm):
        if rank == 0:
            try:
                os.makedirs(out_path, exist_ok=True)
            except OSError as e:
                raise InputError(f"{out_path}: cannot create the output directory ({e}) (rank {rank})") from e
            # with overwrite, the old partition stays until this run commits its own
    return convs


def node_weights(comm, src, input_path, vtxdist, balance_ntypes, balance_edges, edge_dir, src_ids, dst_ids):
    """This rank's balance weight columns by name (``nodes`` first) and the 0/1 ones
    the rebalancing pass evens out: ``(weights, zero_one)``."""
    lo, hi = int(vtxdist[comm.Get_rank()]), int(vtxdist[comm.Get_rank() + 1])
    weights = {"nodes": np.ones(hi - lo, dtype=np.int64)}
    zero_one = []
    for b in balance_ntypes:
        with agreed(comm):
            vals = src.read_node_col(b)
        cols = balance_columns(comm, b, vals, input_path)
        for t, c in enumerate(cols):
            weights[b if len(cols) == 1 else f"{b}={t}"] = c
            zero_one.append(b if len(cols) == 1 else f"{b}={t}")
    if "node_type" in src.node_cols and src.ntypes and len(src.ntypes) > 1:
        with agreed(comm):
            vals = src.read_node_col("node_type")
        for t, c in enumerate(balance_columns(comm, "node_type", vals, input_path, len(src.ntypes))):
            weights[f"ntype={src.ntypes[t] if t < len(src.ntypes) else t}"] = c
            zero_one.append(list(weights)[-1])
    if balance_edges:
        weights["in_degree" if edge_dir == "in" else "out_degree"] = local_degrees(
            comm, vtxdist, dst_ids if edge_dir == "in" else src_ids)
    return weights, zero_one


def graph_parts(comm, vtxdist, ends, weights, zero_one, constraints, num_parts, seed, *, coarsen, ubvec,
                balance_tol, whole, input_path, clock):
    """ParMETIS' parts of this rank's nodes (on the LP-coarsened symmetric view, or on
    the whole of it), then the 0/1 columns rebalanced.  ``ends``: ``[src_ids,
    dst_ids]``, emptied once the symmetric view is built.  Returns ``(parts,
    rebalanced nodes, coarsening info)``."""
    N = int(vtxdist[-1])
    xadj, adjncy = symmetric_csr(comm, vtxdist, *ends)
    ends.clear()                     # read again after the assignment: not held beside the view
    clock.lap("symmetrize")
    coarse_info = {}
    if resolve_coarsen(coarsen, N) == "lp" and num_parts > 1:
        # 0/1 columns get the rebalancing pass's tolerance already: the LP
        # refinement fills parts up to these bounds, and moving nodes back costs cut
        ub = [min(ubvec, 1.0 + balance_tol) if k in zero_one else ubvec for k in constraints]
        parts, coarse_info = coarsened_parts(comm, vtxdist, xadj, adjncy, [weights[k] for k in constraints],
                                             num_parts, seed, ub, keep_adjncy=False)
    else:
        if whole:               # and the symmetric view's entries, before ParMETIS sees them
            check_sizes(comm, vtxdist, len(adjncy), input_path)
        parts = parmetis_parts(comm, vtxdist, xadj, adjncy, [weights[k] for k in constraints],
                               num_parts, seed, ubvec)
    clock.lap("parmetis")
    degree = np.diff(xadj)
    del xadj, adjncy
    rebalanced = 0
    for k in zero_one:
        if k in constraints and num_parts > 1:
            rebalanced += rebalance(comm, parts, weights[k], degree, num_parts, balance_tol)
    if rebalanced:  # even out the node counts again, moving only nodes outside those columns
        free = np.logical_and.reduce([weights[k] == 0 for k in zero_one])
        rebalanced += rebalance(comm, parts, weights["nodes"], degree, num_parts,
                                max(ubvec - 1.0, balance_tol), movable=free)
    return parts, rebalanced, coarse_info


def frequency_step(comm, src, input_path, vtxdist, src_ids, dst_ids, parts, weights, zero_one, constraints, *,
                   seeds, fanouts, edge_dir, num_parts, ubvec, balance_tol):
    """The frequency refinement (:mod:`.frequency`) of ``parts`` in place, and the 0/1
    columns its moves unbalanced evened out; returns ``(its info, rebalanced nodes)``."""
    degree = local_degrees(comm, vtxdist, dst_ids if edge_dir == "in" else src_ids)
    movable, info = frequency_refine(comm, src, input_path, vtxdist, src_ids, dst_ids, parts, seeds,
                                     fanouts, edge_dir, num_parts, ubvec, degree)
    rebalanced = 0
    for k in zero_one:               # masks the moves unbalanced (the seeds did not move)
        if k in constraints:
            rebalanced += rebalance(comm, parts, weights[k], degree, num_parts, balance_tol, movable=movable)
    return info, rebalanced


def move_edges(comm, src, input_path, vtxdist, parts, ends, num_parts, *, edge_dir, num_hops, return_mapping,
               clock):
    """New ids (partitions in order, node types contiguous in each), every edge sent to
    its owner partition's rank, the halo.  ``ends``: ``[src_ids, dst_ids]``, emptied.
    Returns ``(types, layout, bins, order, edges, halo, cut per partition)``."""
    lo = int(vtxdist[comm.Get_rank()])
    with agreed(comm):
        types = GraphTypes(src, input_path)
    bins = parts
    if types.num_ntypes > 1:          # (partition, node type) bins: types contiguous in a partition
        with agreed(comm):
            bins = parts * types.num_ntypes + types.check_nodes(src.read_node_col("node_type"), lo)
    layout = IdLayout(comm, np.bincount(bins, minlength=num_parts * types.num_ntypes), types=types.num_ntypes)
    new_ids, order = assign_new_ids(bins, layout)
    new_src = map_ids(comm, vtxdist, new_ids, ends[0])
    ends[0] = None
    new_dst = map_ids(comm, vtxdist, new_ids, ends[1])
    ends.clear()
    clock.lap("relabel")
    elo, _ = src.edge_block()
    ecols = {k: src.read_edge_col(k) for k in src.edge_cols}
    if "edge_type" in ecols:
        with agreed(comm):
            types.check_edges(ecols["edge_type"], layout, new_src, new_dst, elo)
    pair = [new_dst, new_src] if edge_dir == "in" else [new_src, new_dst]
    del new_src, new_dst              # consumed by LocalEdges: released as they are sent
    edges = LocalEdges(comm, layout, pair, elo, ecols, num_etypes=types.num_etypes, keep_orig_eid=return_mapping)
    del ecols
    clock.lap("move_edges")
    halo = Halo(comm, edges, num_hops)
    cut = allreduce_sum(comm, edges.cut_counts())
    clock.lap("halo")
    return types, layout, bins, order, edges, halo, cut


def part_weights(comm, parts, weights, num_parts) -> dict:
    """Every weight column's sum per partition (the same on every rank)."""
    return {k: allreduce_sum(comm, np.bincount(parts, weights=w, minlength=num_parts).astype(np.int64)).tolist()
            for k, w in weights.items()}
