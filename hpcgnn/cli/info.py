"""``hpcgnn info CONFIG.json``: what a partitioned graph holds.

Per partition: inner and halo nodes, stored edges, cut edges and every balance
constraint; then totals and the imbalance (largest part / mean) of each constraint.
``--json`` prints the same as one JSON object for scripts.  Independent: reads the
JSON configuration (its digest and totals checked) and checks that its HDF5 file
holds the partitions it describes (each group's counts); ``hpcgnn verify`` also
checks every dataset's checksum.
"""
from __future__ import annotations

import json
import os


from ..comm.mpi import MPI
from ..errors import InputError
from ..io.h5 import open_h5
from ..partition.book import RangePartitionBook
from ..partition.config import read_config
from ..partition.featdtype import LOGICAL_KEY
from ..partition.verify import structure_problems


def add_arguments(p):
    p.add_argument("config", help="partition configuration <out>/<graph_name>.json")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def _check_file(config_path: str, cfg: dict, h5: str) -> None:
    """The HDF5 file holds the partitions the JSON describes (each one's CSR rows and
    edges, and its group's counts): a JSON pointing at another graph's file is named,
    not summarized."""
    T = max(1, len(cfg["edge_map"]))
    book = RangePartitionBook(cfg, 0)
    try:
        f = open_h5(h5, "r")
    except OSError as e:
        raise InputError(f"{config_path}: cannot read {h5} ({e})") from None
    with f:
        for p in range(int(cfg["num_parts"])):
            n = sum(r[p][1] - r[p][0] for r in cfg["node_map"].values())
            e = sum(r[p][1] - r[p][0] for r in cfg["edge_map"].values())
            d = f.get(f"part{p}/csr/indptr")
            if d is None or d.shape != (n * T + 1,) or int(d[-1]) != e:
                got = "no CSR" if d is None else f"{d.shape[0] - 1} CSR rows and {int(d[-1])} edges"
                raise InputError(f"{config_path}: {h5} /part{p} holds {got}; the JSON's node_map/edge_map "
                                 f"say {n * T} and {e} (is the JSON's h5_file another graph's?)")
            problems = structure_problems(f, p, tuple(int(v) for v in book.node_ranges[p]),
                                          tuple(int(v) for v in book.edge_ranges[p]), h5, config_path)
            if problems:
                raise InputError(problems[0])


def summarize(config_path: str) -> dict:
    """Independent: the numbers ``hpcgnn info`` shows, as a dict."""
    cfg, base = read_config(config_path)
    h5 = os.path.join(base, cfg["h5_file"])
    if not os.path.isfile(h5):
        raise InputError(f"{config_path}: key 'h5_file' names {h5}, which does not exist")
    _check_file(config_path, cfg, h5)
    parts = cfg["parts"]
    names = list(parts[0].get("weights", {}).keys()) if parts else []
    rows = []
    for p in parts:
        rows.append({
            "part": p["part_id"], "inner_nodes": p["num_inner_nodes"], "halo_nodes": p["num_halo_nodes"],
            "edges": p["num_edges"], "cut_edges": p["num_cut_edges"],
            "weights": {k: p["weights"].get(k, 0) for k in names},
        })
    balance = {}
    for k in names + ["edges"]:
        vals = [r["weights"][k] if k in names else r["edges"] for r in rows]
        mean = sum(vals) / max(len(vals), 1)
        balance[k] = round(max(vals) / mean, 4) if mean else 1.0
    num_edges = cfg["num_edges"]
    return {
        "graph_name": cfg["graph_name"], "config": os.path.abspath(config_path), "h5_file": h5,
        "h5_bytes": os.path.getsize(h5), "num_nodes": cfg["num_nodes"], "num_edges": num_edges,
        "num_parts": cfg["num_parts"], "part_method": cfg.get("part_method"), "num_ranks": cfg.get("num_ranks"),
        "edge_dir": cfg.get("edge_dir"), "num_hops": cfg.get("num_hops"),
        "edge_cut": cfg.get("edge_cut"),
        "edge_cut_fraction": round(cfg.get("edge_cut", 0) / num_edges, 4) if num_edges else 0.0,
        "halo_nodes_total": sum(r["halo_nodes"] for r in rows),
        "node_feats": cfg.get("node_feats", {}), "edge_feats": cfg.get("edge_feats", {}),
        "feat_dtype": cfg.get("feat_dtype"),
        "constraints": names, "imbalance": balance, "parts": rows,
        "refine": cfg.get("refine", "none"), "frequency": cfg.get("frequency") or None,
        "node_types": {t: sum(e - s for s, e in r) for t, r in cfg["node_map"].items()},
        "edge_types": {t: sum(e - s for s, e in r) for t, r in cfg["edge_map"].items()},
    }


def _feature(name: str, schema: dict) -> str:
    """A node feature as shown: name, dtype and row shape; the logical dtype and the
    raw one it was made from for features partitioned with ``--feat-dtype``
    (``feat bfloat16[100] (from float32)``)."""
    if LOGICAL_KEY not in schema:
        return f"{name} {schema['dtype']}{schema['shape']}"
    return f"{name} {schema[LOGICAL_KEY]}{schema['shape']} (from {schema.get('raw_dtype', '?')})"


def _table(s: dict) -> str:
    names = s["constraints"]
    head = ["part", "inner", "halo", "edges", "cut"] + [n for n in names if n != "nodes"]
    lines = [f"{s['graph_name']}: {s['num_nodes']} nodes, {s['num_edges']} edges, {s['num_parts']} parts "
             f"({s['part_method']}, {s['num_ranks']} rank(s), edge_dir={s['edge_dir']}, num_hops={s['num_hops']})",
             f"file {s['h5_file']} ({s['h5_bytes'] / 2**20:.1f} MiB); node data: "
             + (", ".join(_feature(k, v) for k, v in s["node_feats"].items()) or "none")
             + "; edge data: " + (", ".join(f"{k} {v['dtype']}{v['shape']}" for k, v in s["edge_feats"].items())
                                   or "none")]
    if len(s["node_types"]) > 1 or len(s["edge_types"]) > 1:
        lines.append("node types: " + ", ".join(f"{t} {n}" for t, n in s["node_types"].items()))
        lines.append("edge types: " + ", ".join(f"{t} {n}" for t, n in s["edge_types"].items()))
    if s["frequency"]:
        f = s["frequency"]
        lines.append(f"frequency placement for fanouts {f['fanouts']} (seeds {f['seeds']}): {f['moved_nodes']} nodes "
                     f"moved, expected remote reads {f['expected_remote_fraction_before']:.3f} -> "
                     f"{f['expected_remote_fraction_after']:.3f}")
    lines.append("")
    widths = [max(6, len(h)) for h in head]
    lines.append("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for r in s["parts"]:
        vals = [r["part"], r["inner_nodes"], r["halo_nodes"], r["edges"], r["cut_edges"]] + \
               [r["weights"][n] for n in names if n != "nodes"]
        lines.append("  ".join(str(v).rjust(w) for v, w in zip(vals, widths)))
    lines.append("")
    lines.append(f"edge cut: {s['edge_cut']} of {s['num_edges']} edges ({100 * s['edge_cut_fraction']:.1f}%); "
                 f"halo nodes in all: {s['halo_nodes_total']}")
    lines.append("imbalance (largest part / mean): "
                 + ", ".join(f"{k} {v:.3f}" for k, v in s["imbalance"].items()))
    return "\n".join(lines)


def run(args) -> int:

    if MPI.COMM_WORLD.Get_rank() != 0:
        return 0
    s = summarize(args.config)
    print(json.dumps(s) if args.json else _table(s), flush=True)
    return 0
