"""``hpcgnn plan RAW.h5 --node-memory 64G``: how many nodes a graph needs, before the job.

Reads only the raw file's attributes and dataset shapes (``num_nodes``, ``num_edges``,
``/nodes/data/feat``'s shape and dtype, ``ntypes``), never its data, or takes
``--num-nodes/--num-edges/--feat-dim`` instead of a file; then applies the scale model
(docs/scaling.md, :mod:`hpcgnn.scale_model`): bytes to partition and to serve, the fewest
nodes of ``--node-memory`` for partitioning (``--ranks-per-node`` ranks each) and for
training (one server and ``--trainers-per-node`` trainers per node), the predicted
partition time and epoch time, and the assumptions behind them.
"""
from __future__ import annotations

import json
import os


from ..comm.mpi import MPI
from ..errors import InputError
from ..io.h5 import open_h5
from ..scale_model import RESERVE, load_model, parse_size, plan

FEAT_BYTES = {"float32": 4, "bf16": 2, "fp16": 2}


def add_arguments(p):
    p.add_argument("raw", nargs="?", help="a graph in the raw format (only its shapes are read)")
    p.add_argument("--node-memory", required=True, help="memory of one node, e.g. 64G, 128GB, 256GiB")
    p.add_argument("--ranks-per-node", type=int, default=8, help="partitioning ranks per node (default 8)")
    p.add_argument("--parts", type=int, help="train on this many nodes (default: the fewest that fit)")
    p.add_argument("--trainers-per-node", type=int, default=1, help="trainers per training node (default 1)")
    p.add_argument("--train-nodes", type=int, help="training seeds per epoch (default: the generator's "
                                                   "train_frac, else every node)")
    p.add_argument("--num-nodes", type=int, help="nodes, instead of a file")
    p.add_argument("--num-edges", type=int, help="directed edges, instead of a file")
    p.add_argument("--feat-dim", type=int, help="feature dimension, instead of a file (default 0)")
    p.add_argument("--feat-dtype", choices=sorted(FEAT_BYTES), help="features as partitioned "
                   "(--feat-dtype of hpcgnn partition; default: the file's dtype, else float32)")
    p.add_argument("--model", help="a scale model JSON (default: the one shipped with hpcgnn)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _raw_shapes(path: str) -> dict:
    """N, E, feature shape and dtype, node types and the generator's train fraction of
    a raw file, from its attributes and dataset shapes only."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such raw graph file")
    try:
        f = open_h5(path, "r")
    except OSError as e:
        raise InputError(f"{path}: cannot open as HDF5 ({e})") from None
    with f:
        if f.attrs.get("format") not in ("hpcgnn-raw", b"hpcgnn-raw"):
            raise InputError(f"{path}: not a raw graph (root attribute 'format' is not 'hpcgnn-raw')")
        feat = f.get("nodes/data/feat")
        gen = f.attrs.get("generator")
        ntypes = f.attrs.get("ntypes")
        return {"name": str(f.attrs.get("graph_name", "")), "num_nodes": int(f.attrs["num_nodes"]),
                "num_edges": int(f.attrs["num_edges"]),
                "feat_dim": int(feat.shape[1]) if feat is not None and feat.ndim == 2 else 0,
                "feat_itemsize": feat.dtype.itemsize if feat is not None else 4,
                "ntypes": json.loads(ntypes) if ntypes is not None else None,
                "train_frac": json.loads(gen).get("train_frac") if gen is not None else None}


def _graph(args) -> dict:
    if args.raw:
        g = _raw_shapes(args.raw)
    elif args.num_nodes is None or args.num_edges is None:
        raise InputError("hpcgnn plan: give a raw graph file, or --num-nodes and --num-edges (and --feat-dim)")
    else:
        g = {"name": "", "num_nodes": args.num_nodes, "num_edges": args.num_edges, "feat_dim": args.feat_dim or 0,
             "feat_itemsize": 4, "ntypes": None, "train_frac": None}
    for opt in ("num_nodes", "num_edges", "feat_dim"):
        if g[opt] < 0:
            raise InputError(f"hpcgnn plan: --{opt.replace('_', '-')} {g[opt]} is negative")
    size = FEAT_BYTES[args.feat_dtype] if args.feat_dtype else g.pop("feat_itemsize")
    g.pop("feat_itemsize", None)
    g["feat_bytes"] = g["num_nodes"] * g["feat_dim"] * size
    return g


def _train_nodes(args, g) -> tuple[int, str]:
    if args.train_nodes is not None:
        return args.train_nodes, "--train-nodes"
    if g.get("train_frac") is not None:
        return int(round(g["num_nodes"] * g["train_frac"])), "the generator's train_frac"
    return g["num_nodes"], "every node (pass --train-nodes)"


def _check_counts(args) -> None:
    for opt in ("ranks_per_node", "parts", "trainers_per_node", "train_nodes"):
        v = getattr(args, opt)
        if v is not None and v < 1:
            raise InputError(f"hpcgnn plan: --{opt.replace('_', '-')} must be at least 1, not {v}")


def _span(model: dict) -> str:
    """The held-out partition time's errors, in words (``[lo, hi]`` in the model)."""
    lo, hi = model.get("heldout_partition_time_error") or (None, None)
    if lo is None:
        return "not checked"
    a, b = round(abs(lo) * 100), round(abs(hi) * 100)           # a negative error: predicted below the measured
    if hi < 0:
        return f"{min(a, b)}-{max(a, b)}% low" if a != b else f"{a}% low"
    return f"{a}% high" if lo >= 0 and a == b else (f"{a}-{b}% high" if lo >= 0 else f"{a}% low to {b}% high")


def assumptions(model: dict, seeds_from: str) -> list[str]:
    t = model["training"]
    return [f"model fitted on {model['cores']} cores ({model['measured']}); cluster cores as fast as those",
            f"{100 * RESERVE:.0f}% of each node's memory left to the OS and MPI",
            "partition time: one core per rank, the per-core work measured here, communication as measured "
            f"here (not measured beyond {model['cores']} cores); a rough guide: {_span(model)} on the graph "
            "left out of the fit",
            f"epoch: batches of {t['batch_size']} seeds, fanouts {t['fanouts']}, steps as fast as with "
            f"{t['trainers']} trainers here (CPU, shared memory); a network's remote gathers are slower",
            f"training seeds: {seeds_from}",
            "servers: one per node holding 1/nodes of the graph, no halo growth with the node count",
            "a trainer's own memory only (its RSS also counts the server's shared pages it reads)"]


def _gb(b) -> str:
    return "-" if b is None else f"{b / 2**30:.1f} GiB"


def _count(v) -> str:
    return "does not fit (even on 2^20 nodes)" if v is None else str(v)


def _text(p: dict, notes: list[str]) -> str:
    g = p["graph"]
    n = _count
    lines = [f"graph {g['name'] or '(given)'}: {g['num_nodes']} nodes, {g['num_edges']} edges, "
             f"{g['feat_dim']}-dim features ({_gb(g['feat_bytes'])})"
             + (f", node types {', '.join(g['ntypes'])}" if g.get("ntypes") else ""),
             f"node memory {_gb(p['node_memory_bytes'])} ({_gb(p['usable_bytes'])} usable)",
             f"partition: {_gb(p['partition_bytes_total'])} on one rank; nodes needed with "
             f"{p['ranks_per_node']} ranks each: {n(p['partition_nodes'])}"]
    if p["partition_nodes"] is not None:
        lines.append(f"  {_gb(p['partition_bytes_per_rank'])} per rank, predicted time {p['partition_s']:.0f} s")
    lines.append(f"training: nodes needed (1 server + {p['trainers_per_node']} trainer(s) each): "
                 f"{n(p['training_nodes'])}")
    if p["parts"] is not None:
        fits = "" if p["training_fits"] else "  (DOES NOT FIT)"
        lines.append(f"  on {p['parts']} nodes: {_gb(p['serve_bytes_per_node'])} per node{fits}; epoch over "
                     f"{p['train_nodes']} seeds: {p['steps_per_epoch']} steps, predicted {p['epoch_s']:.0f} s")
    return "\n".join(lines + ["assumptions:"] + [f"  - {a}" for a in notes])


def run(args) -> int:
    if MPI.COMM_WORLD.Get_rank() != 0:
        return 0
    try:
        memory = parse_size(args.node_memory)
    except ValueError as e:
        raise InputError(f"hpcgnn plan: --node-memory: {e}") from None
    _check_counts(args)
    g = _graph(args)
    try:
        model = load_model(args.model)
    except ValueError as e:
        raise InputError(str(e)) from None
    seeds, seeds_from = _train_nodes(args, g)
    g.pop("train_frac", None)
    p = plan(model, g, memory, args.ranks_per_node, args.parts, args.trainers_per_node, seeds)
    notes = assumptions(model, seeds_from)
    print(json.dumps({**p, "assumptions": notes}) if args.json else _text(p, notes), flush=True)
    return 0
