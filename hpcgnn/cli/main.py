"""The ``hpcgnn`` command.  Each subcommand lives in its own module and exposes
``add_arguments(parser)`` and ``run(args) -> int``.

Run it under ``mpirun``/``srun`` for the parallel subcommands; an uncaught error on
any rank aborts the whole job (see :mod:`hpcgnn.comm.failure`).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

import hpcgnn  # noqa: F401  (installs the failure hook, initialises MPI)
from .. import logs
from ..comm import peers, watchdog
from ..comm.mpi import world
from ..errors import InputError

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
    return importlib.util.find_spec(modname) is not None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hpcgnn", description="MPI-native distributed GNN training",
                                     epilog="Anywhere on the line: --quiet (only warnings and errors of hpcgnn's "
                                            "messages; results are still printed), --log-level "
                                            "debug|info|warning|error.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (modname, help_text) in SUBCOMMANDS.items():
        if not _available(modname):
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(modname).add_arguments(p)
    return parser


def take_log_options(argv: list[str]) -> list[str]:
    """``--quiet`` (warnings and errors only) and ``--log-level LEVEL``, anywhere on the
    command line, set the ``hpcgnn`` logger's level (:mod:`hpcgnn.logs`); the rest of
    ``argv`` is returned.  A bad level raises :class:`InputError`."""
    rest, i = [], 0
    while i < len(argv):
        if argv[i] == "--quiet":
            logs.set_level("warning")
        elif argv[i] == "--log-level" or argv[i].startswith("--log-level="):
            value = argv[i].split("=", 1)[1] if "=" in argv[i] else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 0 if "=" in argv[i] else 1
            try:
                logs.set_level(value)
            except ValueError as e:
                raise InputError(f"--log-level: {e}") from None
        else:
            rest.append(argv[i])
        i += 1
    return rest


def main(argv: list[str] | None = None) -> int:
    argv = take_log_options(sys.argv[1:] if argv is None else list(argv))
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    if world().Get_size() > 1:    # a rank lost before initialize is named too, by the command it ran
        peers.record(world(), f"hpcgnn {command}" if command and command != "train" else "no role", "-")
    if argv[:1] == ["train"]:   # its own parser (settings, TOML file, --help), loaded only for train
        from .train import main_argv   # train's own parser, loaded only for train

        return int(main_argv(argv[1:]) or 0)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    run = importlib.import_module(SUBCOMMANDS[args.command][0]).run
    if world().Get_size() == 1:
        return int(run(args) or 0)
    with watchdog.watching(f"hpcgnn {args.command}"):     # a rank that dies is named, by its command
        code = run(args)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
