"""The ``hpcgnn`` command.  Each subcommand lives in its own module and exposes
``add_arguments(parser)`` and ``run(args) -> int``.

Run it under ``mpirun``/``srun`` for the parallel subcommands; an uncaught error on
any rank aborts the whole job (see :mod:`hpcgnn.comm.failure`).
"""
from __future__ import annotations

import argparse
import importlib
import sys

import hpcgnn  # noqa: F401  (installs the failure hook, initialises MPI)
from ..comm import peers
from ..comm.mpi import world

SUBCOMMANDS = {
    "doctor": ("hpcgnn.cli.doctor", "check MPI, RMA and shared-memory windows, parallel HDF5, ParMETIS, torch"),
    "generate": ("hpcgnn.cli.generate", "write a synthetic class-structured graph in the raw format (parallel)"),
    "convert": ("hpcgnn.cli.convert", "convert an OGB directory or an edge list into the raw format"),
    "partition": ("hpcgnn.cli.partition", "partition a raw graph with ParMETIS into one parallel-HDF5 file"),
    "info": ("hpcgnn.cli.info", "describe a partitioned graph: nodes, halo, edges, cut, balance"),
    "verify": ("hpcgnn.cli.verify", "check a partitioned graph against its JSON: digest, counts, checksums; "
                                    "with --raw, against its raw graph too (parallel)"),
    "plan": ("hpcgnn.cli.plan", "predict the nodes, memory and time a raw graph needs (from its shapes only)"),
    "train": ("hpcgnn.cli.train", "train GraphSAGE for node classification on a partitioned graph (parallel)"),
}


def _available(modname: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(modname) is not None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hpcgnn", description="MPI-native distributed GNN training")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (modname, help_text) in SUBCOMMANDS.items():
        if not _available(modname):
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(modname).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if world().Get_size() > 1:
        peers.record(world(), "no role", "?")    # a rank lost before initialize is named too
    if argv[:1] == ["train"]:            # its own parser (settings, TOML file, --help)
        from .train import main_argv

        return int(main_argv(argv[1:]) or 0)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    code = importlib.import_module(SUBCOMMANDS[args.command][0]).run(args)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
