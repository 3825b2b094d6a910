"""``hpcgnn train [CONFIG.toml] [--task node|link|rgcn] [--timeout S] [--key value ...]``: node
classification with GraphSAGE on a partitioned graph
(:mod:`hpcgnn.train.node_classification`), with ``--task link`` link prediction
with learnable embeddings (:mod:`hpcgnn.train.link_prediction`), with ``--task
rgcn`` an R-GCN on a heterogeneous graph (:mod:`hpcgnn.train.rgcn`).

Run under ``mpirun``/``srun``: every rank runs it; servers and samplers serve, the
trainers train.  Settings come from the TOML file, then the flags (``--help``
lists them; an unknown key is an error naming the closest one)."""
from __future__ import annotations

import argparse
import os
import sys


def add_arguments(p):
    p.add_argument("args", nargs=argparse.REMAINDER, help="[CONFIG.toml] [--key value ...] (see --help)")
    p.add_help = False


def main_argv(rest: list[str]) -> int:
    task = "node"
    if "--task" in rest:
        i = rest.index("--task")
        if i + 1 >= len(rest) or rest[i + 1] not in ("node", "link", "rgcn"):
            sys.stderr.write("hpcgnn train: error: --task must be 'node' (node classification), 'link' (link "
                             "prediction) or 'rgcn' (node classification on a heterogeneous graph)\n")
            return 2
        task = rest[i + 1]
        rest = rest[:i] + rest[i + 2:]
    if "--timeout" in rest:               # HPCGNN_TIMEOUT for this job (checked at initialize)
        i = rest.index("--timeout")
        if i + 1 >= len(rest):
            sys.stderr.write("hpcgnn train: error: --timeout needs a number of seconds (HPCGNN_TIMEOUT)\n")
            return 2
        os.environ["HPCGNN_TIMEOUT"] = rest[i + 1]
        rest = rest[:i] + rest[i + 2:]
    if task == "link":    # only the task that runs is imported (each loads torch and its models)
        from ..train.link_prediction import main
    elif task == "rgcn":
        from ..train.rgcn import main   # only the task that runs
    else:
        from ..train.node_classification import main   # only the task that runs
    if rest and rest[0].endswith(".toml"):
        rest = ["--config", rest[0]] + rest[1:]
    if "-h" in rest or "--help" in rest:
        print("hpcgnn train [CONFIG.toml] [--task node|link|rgcn] [--key value ...]\n"
              "  CONFIG.toml  settings from a TOML file (the flags below override it)\n"
              "  --task       node: GraphSAGE node classification (default); link: link prediction "
              "with learnable embeddings; rgcn: R-GCN on a heterogeneous graph\n"
              "  --timeout S  the longest wait on another rank, in seconds (sets HPCGNN_TIMEOUT; default 600)\n"
              f"The settings of --task {task}:\n")
    return main(rest, prog="hpcgnn train")


def run(args) -> int:
    return main_argv(list(args.args))
