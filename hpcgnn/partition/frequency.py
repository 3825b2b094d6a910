"""Hotness-aware ("frequency") partitioning: place each node with the trainers that
read it most, for a given sampler configuration.

The training seeds of partition ``p`` are what its trainers sample from.  For the
sampler's fanouts ``[k_1, k_2, ...]`` (seeds first) we compute, for every node ``u``
and partition ``p``, the *expected number of times* a pass over ``p``'s seeds reads
``u``: hop ``h`` reaches each stored neighbor ``u`` of a node ``v`` reached at hop
``h-1`` with probability ``min(1, k_h / deg(v))`` (uniform sampling without
replacement), so

    q_0[v, p] = 1 if v is a seed of p          q_h[u, p] = sum_{v -> u} q_{h-1}[v, p] min(1, k_h / deg(v))
    score[u, p] = sum_{h >= 1} q_h[u, p]

This is the quantity GLT estimates by running the sampler and counting (a Monte-Carlo
estimate); propagating the expectation over the edges gives it without sampling
noise, in ``len(fanouts)`` rounds of all-to-all exchanges over the edge list
(nothing the size of the graph on one rank).  Seeds stay where the base assignment
put them; every other node moves to the partition with the highest score, under a
node-count capacity per partition (``ubvec`` of even), best-scoring nodes first; nodes
no seed reaches keep their place when there is room.
"""
from __future__ import annotations

import numpy as np

from ..comm.agree import agreed
from ..comm.alltoall import alltoallv, allgather_rows, allreduce_sum, query
from ..comm.collectives import all_sum, allreduce
from ..errors import InputError
from .arrays import unique_inverse
from .assign import local_degrees, owner_of


def access_scores(comm, vtxdist: np.ndarray, src: np.ndarray, dst: np.ndarray, seed_part: np.ndarray,
                  fanouts, nparts: int, edge_dir: str = "in", degree: np.ndarray | None = None) -> np.ndarray:
    """Collective: ``score[u - lo, p]`` (float64) for this rank's node block.

    ``src``/``dst``: this rank's block of the input edges (original ids);
    ``seed_part[i]``: partition of local node ``lo + i`` when it is a seed, else -1.
    ``edge_dir='in'``: sampling goes from a node to the sources of its in-edges.
    ``degree``: the block's sampling-direction degrees when the caller has them
    (``local_degrees`` of the owner endpoints; saves that all-to-all)."""
    rank = comm.Get_rank()
    lo, n = int(vtxdist[rank]), int(vtxdist[rank + 1] - vtxdist[rank])
    own, other = (dst, src) if edge_dir == "in" else (src, dst)
    deg = (local_degrees(comm, vtxdist, own) if degree is None else degree).astype(np.float64)
    uniq, inv = unique_inverse(own)
    inv = inv.reshape(-1)
    dest_other = owner_of(vtxdist, other)
    q = np.zeros((n, nparts), dtype=np.float64)
    seeds = np.flatnonzero(seed_part >= 0)
    q[seeds, seed_part[seeds]] = 1.0
    score = np.zeros_like(q)
    for k in fanouts:
        k = int(k)
        # each edge's owner endpoint: its q row and its degree, from the rank holding it
        def respond(keys, q=q, k=k):
            d = deg[keys - lo]
            f = np.ones_like(d) if k < 0 else np.minimum(1.0, k / np.maximum(d, 1.0))
            return q[keys - lo] * f[:, None]
        w = query(comm, owner_of(vtxdist, uniq), uniq, respond)           # [len(uniq), P]
        contrib = w[inv].astype(np.float32)                                # [E_local, P]
        got_ids, got_w = alltoallv(comm, dest_other, other, contrib)
        q = np.zeros((n, nparts), dtype=np.float64)
        for p in range(nparts):
            q[:, p] = np.bincount(got_ids - lo, weights=got_w[:, p], minlength=n)
        del contrib, got_ids, got_w, w
        score += q
    return score


def assign_by_score(comm, parts: np.ndarray, score: np.ndarray, movable: np.ndarray, nparts: int,
                    ubvec: float) -> int:
    """Collective: move ``movable`` nodes (``parts`` updated in place) to their
    best-scoring partitions within ``ceil(ubvec * N / P)`` nodes per partition.
    Returns the number of nodes that changed partition."""
    P = nparts
    N = all_sum(comm, len(parts))
    cap = np.full(P, int(np.ceil(ubvec * N / P)), dtype=np.int64)
    before = parts.copy()
    room = cap - allreduce_sum(comm, np.bincount(parts[~movable], minlength=P).astype(np.int64))
    room = np.maximum(room, 0)
    new = np.full(len(parts), -1, dtype=np.int64)
    new[~movable] = parts[~movable]
    hot = np.flatnonzero(movable & (score.sum(axis=1) > 0))
    pref = np.argsort(-score[hot], axis=1, kind="stable") if len(hot) else np.zeros((0, P), np.int64)
    left = np.ones(len(hot), dtype=bool)
    for r in range(P):                       # round r: each node asks for its r-th choice
        choice = pref[:, r] if len(hot) else np.zeros(0, np.int64)
        want = np.where(left & (score[hot, choice] > 0), choice, -1)
        room = _grant(comm, hot, want, score, room, new, P)
        left = new[hot] < 0
    cold = np.flatnonzero(new < 0)          # unreached nodes, and hot ones that found no room
    want = parts[cold]
    room = _grant(comm, cold, want, None, room, new, P)
    rest = np.flatnonzero(new < 0)
    if all_sum(comm, len(rest)) > 0:       # fill whatever room is left, in partition order
        counts = allgather_rows(comm, [len(rest)])[:, 0]
        start = int(counts[:comm.Get_rank()].sum())
        slots = np.repeat(np.arange(P), np.maximum(room, 0))
        new[rest] = slots[start:start + len(rest)]      # sum(cap) >= N: there is room for all
    parts[:] = new
    return all_sum(comm, int(np.count_nonzero(parts != before)))


def _grant(comm, nodes: np.ndarray, want: np.ndarray, score, room: np.ndarray, new: np.ndarray, P: int):
    """Each rank's ``nodes`` ask for partition ``want`` (-1: nothing); a partition
    grants up to its ``room``, split over the ranks in proportion to their requests,
    each rank granting its best-scoring requests.  Returns the room left."""
    asks = np.array([np.count_nonzero(want == p) for p in range(P)], dtype=np.int64)
    all_asks = allgather_rows(comm, asks)                    # [R, P]
    total = all_asks.sum(axis=0)
    rank = comm.Get_rank()
    granted = np.zeros(P, dtype=np.int64)
    for p in range(P):
        if total[p] == 0:
            continue
        if total[p] <= room[p]:
            mine = asks[p]
        else:                                   # proportional shares, remainders to the first ranks
            share = all_asks[:, p] * room[p] // total[p]
            extra = int(room[p] - share.sum())
            order = np.argsort(-(all_asks[:, p] * room[p] - share * total[p]), kind="stable")
            share[order[:extra]] += 1
            mine = int(share[rank])
        idx = np.flatnonzero(want == p)
        if score is not None and mine < len(idx):
            idx = idx[np.argsort(-score[nodes[idx], p], kind="stable")]
        new[nodes[idx[:mine]]] = p
        granted[p] = min(int(total[p]), int(room[p]))
    return room - granted


def remote_fraction(comm, parts: np.ndarray, score: np.ndarray) -> float:
    """Collective: the expected share of reads that go to another partition."""
    mine = float(score[np.arange(len(parts)), parts].sum()) if len(parts) else 0.0
    total, local = (float(v) for v in allreduce(comm, [float(score.sum()), mine], "sum"))
    return 1.0 - local / total if total > 0 else 0.0


REFINE_METHODS = ("none", "frequency")
DEFAULT_FANOUTS = (25, 10)


def frequency_refine(comm, src, path: str, vtxdist, src_ids, dst_ids, parts: np.ndarray, seeds: str, fanouts,
                     edge_dir: str, nparts: int, ubvec: float, degree: np.ndarray | None = None
                     ) -> tuple[np.ndarray, dict]:
    """Collective: the pipeline's step.  ``seeds``: the node mask whose nodes the
    trainers sample from (they keep their partition); ``degree``: as for
    :func:`access_scores`.  Returns (the movable mask, the JSON record: settings,
    moves, expected remote-read fraction before/after)."""
    rank = comm.Get_rank()
    with agreed(comm):
        if seeds not in src.node_cols:
            raise InputError(f"{path}: dataset '/nodes/data/{seeds}' (the frequency partitioner's seeds) is "
                             f"missing (rank {rank})")
        mask = src.read_node_col(seeds, mask=True)
        if mask.ndim != 1 or mask.dtype.kind not in "biu":
            raise InputError(f"{path}: dataset '/nodes/data/{seeds}' (the frequency partitioner's seeds) must be "
                             f"a 1-D mask, has dtype {mask.dtype} shape {mask.shape} (rank {rank})")
    is_seed = mask.astype(bool)
    score = access_scores(comm, vtxdist, src_ids, dst_ids, np.where(is_seed, parts, -1), fanouts, nparts, edge_dir,
                           degree)
    before = remote_fraction(comm, parts, score)
    moved = assign_by_score(comm, parts, score, ~is_seed, nparts, ubvec)
    after = remote_fraction(comm, parts, score)
    return ~is_seed, {"seeds": seeds, "fanouts": [int(k) for k in fanouts], "moved_nodes": moved,
                      "expected_remote_fraction_before": round(before, 6),
                      "expected_remote_fraction_after": round(after, 6)}
