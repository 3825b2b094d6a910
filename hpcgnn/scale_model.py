"""The scale model (docs/scaling.md): per-rank memory and time of each phase as linear
functions of a graph's nodes ``N``, directed edges ``E``, feature bytes ``FB`` and
dimension ``F``, and of the ranks ``R`` (and the cores ``p`` that work in parallel).

The coefficients are fitted by ``bench/scale_model.py`` to measurements on one machine
and shipped as ``hpcgnn/data/scale_model.json``.  A phase's prediction is the sum over
its terms of ``coefficient * term``; the terms are those of :func:`terms`.  On top of
it, :func:`plan` answers how many nodes of a given memory a graph needs to be
partitioned and to be trained on, and how long partitioning and one epoch take.
"""
from __future__ import annotations

import json
import math
import os
import re

MODEL_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "scale_model.json")
RESERVE = 0.10               # of a node's memory kept for the OS, MPI buffers and page cache
MAX_NODES = 1 << 20
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtp]?)(i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``64G``, ``64GB``, ``64GiB``, ``1.5T`` or a number of bytes -> bytes (K, M, G,
    T, P are powers of 1024, with or without ``B``/``iB``).  ValueError otherwise."""
    m = _SIZE.match(str(text))
    if not m or (m.group(3) and m.group(3).lower() == "ib" and not m.group(2)):
        raise ValueError(f"cannot read {text!r} as a memory size (e.g. 64G, 128GB, 256GiB)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise ValueError(f"memory size {text!r} is not positive")
    return int(value)


def terms(num_nodes: float, num_edges: float, feat_bytes: float, feat_dim: float, ranks: int,
          cores: int | None = None) -> dict:
    """The values of every term a phase's model may use.  ``ranks``: the ranks sharing
    the phase's data (each holds 1/ranks); ``cores``: how many of them work at once
    (default ``ranks``: one core per rank, as on a cluster)."""
    cores = ranks if cores is None else cores
    return {"const": 1.0, "edges_per_rank": num_edges / ranks, "nodes_per_rank": num_nodes / ranks,
            "feature_bytes_per_rank": feat_bytes / ranks, "nodes": float(num_nodes), "edges": float(num_edges),
            "edges_per_core": num_edges / cores, "nodes_per_core": num_nodes / cores, "feat_dim": float(feat_dim),
            "ranks_per_core": ranks / cores, "sampled_per_seed": sampled_per_seed(num_nodes, num_edges)}


def sampled_per_seed(num_nodes: float, num_edges: float, fanouts=(25, 10)) -> float:
    """Edges one seed's sampled tree holds at the training fanouts when every node has
    the graph's average degree (a node gives ``min(degree, fanout)`` neighbours)."""
    degree = num_edges / num_nodes if num_nodes else 0.0
    total, width = 0.0, 1.0
    for f in fanouts:
        width *= min(degree, f)
        total += width
    return total


def predict(coef: dict, values: dict) -> float:
    """A phase's prediction: ``sum(coef[t] * values[t])``."""
    return float(sum(c * values[t] for t, c in coef.items()))


def load_model(path: str | None = None) -> dict:
    """The fitted model (``hpcgnn/data/scale_model.json`` by default); ValueError naming
    the file when it cannot be read."""
    path = path or MODEL_PATH
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read the scale model ({e}); run bench/scale_model.py") from None


def _smallest(fits) -> int | None:
    """The smallest n in [1, MAX_NODES] with ``fits(n)``, for a ``fits`` that stays true
    once true; None when even MAX_NODES does not fit."""
    if not fits(MAX_NODES):
        return None
    lo, hi = 1, MAX_NODES
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo


def partition_need(model: dict, g: dict, ranks: int) -> float:
    """Peak bytes of one partitioning rank when ``ranks`` ranks share the graph."""
    return predict(model["phases"]["partition_memory"]["coef"],
                   terms(g["num_nodes"], g["num_edges"], g["feat_bytes"], g["feat_dim"], ranks))


def training_need(model: dict, g: dict, nodes: int, trainers_per_node: int) -> float:
    """Peak bytes of one training node: its server (1/nodes of the graph) and its
    trainers' own memory (the part of a trainer's RSS that does not grow with the graph:
    what grows is the servers' shared pages it reads, counted in the server's)."""
    ph = model["phases"]
    server = predict(ph["server_memory"]["coef"],
                     terms(g["num_nodes"], g["num_edges"], g["feat_bytes"], g["feat_dim"], nodes))
    trainer = predict(ph["trainer_memory"]["coef"], terms(0, 0, 0, g["feat_dim"], 1))
    return server + trainers_per_node * trainer


def partition_time(model: dict, g: dict, ranks: int) -> float:
    """Seconds to partition with ``ranks`` ranks, one core each, cores as fast as here."""
    return predict(model["phases"]["partition_time"]["coef"],
                   terms(g["num_nodes"], g["num_edges"], g["feat_bytes"], g["feat_dim"], ranks))


def epoch_time(model: dict, g: dict, trainers: int, train_nodes: int) -> tuple[float, int]:
    """Seconds of one epoch over ``train_nodes`` seeds shared by ``trainers`` trainers,
    and the steps per trainer (batches of the measured size, steps as fast as here)."""
    batch = int(model["training"]["batch_size"])
    steps = max(1, math.ceil(train_nodes / (batch * trainers)))
    step = predict(model["phases"]["step_time"]["coef"],
                   terms(g["num_nodes"], g["num_edges"], g["feat_bytes"], g["feat_dim"], trainers))
    return steps * step, steps


def plan(model: dict, g: dict, node_memory: int, ranks_per_node: int = 8, parts: int | None = None,
         trainers_per_node: int = 1, train_nodes: int | None = None) -> dict:
    """How many nodes of ``node_memory`` bytes the graph ``g`` (``num_nodes``,
    ``num_edges``, ``feat_bytes``, ``feat_dim``) needs to be partitioned
    (``ranks_per_node`` ranks each) and trained on (one server and
    ``trainers_per_node`` trainers per node, one partition per node), and the predicted
    partition and epoch times.  ``parts``: train on that many nodes instead of the
    fewest that fit.  Sizes in bytes, times in seconds; None where nothing fits."""
    usable = node_memory * (1 - RESERVE)
    k = ranks_per_node
    pnodes = _smallest(lambda n: k * partition_need(model, g, n * k) <= usable)
    tnodes = _smallest(lambda n: training_need(model, g, n, trainers_per_node) <= usable)
    train_at = parts or tnodes
    seeds = g["num_nodes"] if train_nodes is None else train_nodes
    out = {"graph": g, "node_memory_bytes": node_memory, "usable_bytes": int(usable), "ranks_per_node": k,
           "trainers_per_node": trainers_per_node, "train_nodes": seeds,
           "partition_bytes_total": int(partition_need(model, g, 1)),
           "partition_nodes": pnodes, "training_nodes": tnodes, "parts": train_at}
    if pnodes is not None:
        out["partition_bytes_per_rank"] = int(partition_need(model, g, pnodes * k))
        out["partition_s"] = round(partition_time(model, g, pnodes * k), 1)
    if train_at is not None:
        out["serve_bytes_per_node"] = int(training_need(model, g, train_at, trainers_per_node))
        out["training_fits"] = out["serve_bytes_per_node"] <= usable
        epoch, steps = epoch_time(model, g, train_at * trainers_per_node, seeds)
        out["epoch_s"], out["steps_per_epoch"] = round(epoch, 1), steps
    return out
