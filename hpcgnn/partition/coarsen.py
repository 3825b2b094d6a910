"""Coarsening before ParMETIS: size-constrained label propagation, then ParMETIS on
the cluster graph.

ParMETIS coarsens by heavy-edge matching, which shrinks power-law ("complex")
networks slowly: hubs match with one neighbour per level and the levels pile up.
As ParHIP and KaMinPar do for such graphs, the pipeline first clusters the
symmetric view with a few rounds of label propagation: each vertex joins the
neighbouring cluster with the most edges to it, provided the cluster's weight (the
first constraint column, node counts) stays below
``U = max(1, total / (nparts * cluster_factor))``, so no cluster is too heavy for
the balance constraints.  Clusters are formed inside each rank's vertex block
(vertices only join clusters of neighbours on the same rank), which needs no
communication while clustering and makes every rank the owner of its clusters.

The clusters are contracted into a weighted graph (vertex weights: the sums of every
constraint column; edge weights: the number of symmetric-view edges between two
clusters), ParMETIS partitions that graph, and every vertex takes its cluster's part.
A few sweeps of k-way label-propagation refinement on the whole graph (:func:`refine`)
then move single vertices to the part holding most of their neighbours, within the
balance bound on the first column.
The rebalancing pass (:mod:`.balance`) then evens out 0/1 columns as before.

The compiled kernels are ``hpcgnn._ext.lp_cluster`` and ``contract_clusters``
(``ext/src/label_prop.c``).
"""
from __future__ import annotations

import time

import numpy as np

from .. import _ext
from ..comm.mpi import MPI
from .parmetis import part_kway

#: Coarsening methods accepted by ``partition_graph(coarsen=...)``.
COARSEN_METHODS = ("lp", "none")
#: Default LP sweeps and cluster bound divisor.
LP_ROUNDS = 5
CLUSTER_FACTOR = 256
#: Most sweeps of label-propagation refinement after projecting the parts back.
REFINE_ROUNDS = 6


def lp_clusters(comm, vtxdist, xadj, adjncy, w0, nparts: int, seed: int, rounds: int = LP_ROUNDS,
                cluster_factor: int = CLUSTER_FACTOR):
    """Collective: LP clusters of this rank's vertices.

    Returns ``(label, cdist)``: ``label`` the local cluster of each local vertex
    (``[0, k)``), ``cdist`` the cluster distribution (rank ``r`` owns global clusters
    ``cdist[r]:cdist[r+1]``; global id = ``cdist[rank] + label``).
    """
    rank = comm.Get_rank()
    lo = int(vtxdist[rank])
    w0 = np.ascontiguousarray(w0, dtype=np.int64)
    total = comm.allreduce(int(w0.sum()), op=MPI.SUM)
    bound = max(1, total // (max(1, nparts) * cluster_factor))
    k, label = _ext.lp_cluster(np.ascontiguousarray(xadj, dtype=np.int64),
                               np.ascontiguousarray(adjncy, dtype=np.int64), lo, w0, int(bound),
                               int(rounds), int(seed) * 1000003 + rank)
    ks = np.array(comm.allgather(int(k)), dtype=np.int64)
    cdist = np.concatenate([[0], np.cumsum(ks)]).astype(np.int64)
    return label, cdist


def contract(comm, vtxdist, xadj, adjncy, label, cdist, weights: list[np.ndarray]):
    """Collective: the cluster graph, distributed as ``cdist``.

    Returns ``(cxadj, cadj, cadjwgt, cvwgt)``: CSR over global cluster ids without self
    loops, edge multiplicities, and an ``(k, ncon)`` array of summed vertex weights.
    Needs every vertex's global cluster id (an all-gather of ``N`` int64).
    """
    rank = comm.Get_rank()
    k = int(cdist[rank + 1] - cdist[rank])
    glocal = np.ascontiguousarray(label + cdist[rank], dtype=np.int64)
    counts = np.diff(np.asarray(vtxdist, dtype=np.int64))
    glab = np.empty(int(vtxdist[-1]), dtype=np.int64)
    comm.Allgatherv(glocal, [glab, (counts.tolist(), np.asarray(vtxdist[:-1]).tolist()), MPI.INT64_T])
    order = np.argsort(label, kind="stable").astype(np.int64)
    sizes = np.bincount(label, minlength=k)
    cstart = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    cxadj, cadj, cadjwgt = _ext.contract_clusters(cstart, order, np.ascontiguousarray(xadj, dtype=np.int64),
                                                  np.ascontiguousarray(adjncy, dtype=np.int64), glab,
                                                  int(cdist[-1]), int(cdist[rank]))
    del glab
    cvwgt = np.stack([np.bincount(label, weights=np.asarray(c, dtype=np.float64), minlength=k)
                      .round().astype(np.int64) for c in weights], axis=1)
    return cxadj, cadj, cadjwgt, cvwgt


def refine(comm, vtxdist, xadj, adjncy, parts, w0, nparts: int, ubvec: float, seed: int,
           rounds: int = REFINE_ROUNDS) -> int:
    """Collective: k-way label-propagation refinement of ``parts`` (in place).

    Each round all-gathers the part vector, then every rank sweeps its vertices once,
    moving a vertex to the part holding most of its neighbours when that part's
    weight (``w0``) stays within ``ubvec`` of the mean; each rank may fill only its
    share (``1/R``) of a part's free room, so the bound holds after all ranks moved.
    Returns the number of moves."""
    rank, R = comm.Get_rank(), comm.Get_size()
    lo = int(vtxdist[rank])
    counts = np.diff(np.asarray(vtxdist, dtype=np.int64))
    w0 = np.ascontiguousarray(w0, dtype=np.int64)
    xadj = np.ascontiguousarray(xadj, dtype=np.int64)
    adjncy = np.ascontiguousarray(adjncy, dtype=np.int64)
    total = comm.allreduce(int(w0.sum()), op=MPI.SUM)
    limit = int(ubvec * total / nparts)
    gpart = np.empty(int(vtxdist[-1]), dtype=np.int64)
    moved = 0
    for r in range(rounds):
        local = np.ascontiguousarray(parts, dtype=np.int64)
        comm.Allgatherv(local, [gpart, (counts.tolist(), np.asarray(vtxdist[:-1]).tolist()), MPI.INT64_T])
        pw = comm.allreduce(np.bincount(local, weights=w0, minlength=nparts).astype(np.int64), op=MPI.SUM)
        cap = pw + np.maximum(limit - pw, 0) // R
        m = _ext.lp_refine(xadj, adjncy, lo, gpart, local, w0, pw.copy(), cap.astype(np.int64),
                           int(seed) * 7919 + 31 * r + rank)
        parts[:] = local
        m = comm.allreduce(int(m), op=MPI.SUM)
        moved += m
        if m * 1000 < int(vtxdist[-1]):
            break
    return moved


def coarsened_parts(comm, vtxdist, xadj, adjncy, weights: list[np.ndarray], nparts: int, seed: int,
                    ubvec: float = 1.05, rounds: int = LP_ROUNDS,
                    cluster_factor: int = CLUSTER_FACTOR) -> tuple[np.ndarray, dict]:
    """Collective: parts of this rank's vertices via LP clustering + ParMETIS on the
    cluster graph.  ``weights[0]`` bounds the cluster sizes.  Returns ``(parts, info)``
    with ``info`` holding the cluster graph's size."""
    t0 = time.perf_counter()
    label, cdist = lp_clusters(comm, vtxdist, xadj, adjncy, weights[0], nparts, seed, rounds, cluster_factor)
    t1 = time.perf_counter()
    cxadj, cadj, cadjwgt, cvwgt = contract(comm, vtxdist, xadj, adjncy, label, cdist, weights)
    t2 = time.perf_counter()
    ncon = len(weights)
    cparts = part_kway(comm, cdist, cxadj, cadj, vwgt=cvwgt.reshape(-1), ncon=ncon, nparts=nparts,
                       adjwgt=cadjwgt, ubvec=np.full(ncon, ubvec), seed=seed)
    parts = cparts[label]
    t3 = time.perf_counter()
    moved = refine(comm, vtxdist, xadj, adjncy, parts, weights[0], nparts, ubvec, seed)
    t4 = time.perf_counter()
    sums = comm.allreduce(np.array([len(cadj), int(cadjwgt.sum()), len(adjncy)], dtype=np.int64), op=MPI.SUM)
    tmax = np.empty(4)
    comm.Allreduce(np.array([t1 - t0, t2 - t1, t3 - t2, t4 - t3]), tmax, op=MPI.MAX)
    info = {"method": "lp", "rounds": int(rounds), "cluster_factor": int(cluster_factor),
            "clusters": int(cdist[-1]), "cluster_edges": int(sums[0]),
            "inter_cluster_edge_fraction": round(float(sums[1]) / max(1, int(sums[2])), 4),
            "lp_s": round(float(tmax[0]), 3), "contract_s": round(float(tmax[1]), 3),
            "parmetis_s": round(float(tmax[2]), 3), "refine_moves": int(moved),
            "refine_s": round(float(tmax[3]), 3)}
    return parts, info
