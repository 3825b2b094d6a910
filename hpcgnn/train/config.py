"""Training settings: defaults, a TOML file, command-line flags — checked strictly.

Precedence: defaults < ``--config FILE.toml`` < flags.  A key that does not exist
is an error naming the closest key (a typo must not silently train with the
default).  Fanouts are in hop order, as PyG's ``num_neighbors``: ``[25, 10]``
samples 25 neighbours of each seed, then 10 of each of those (DGL's
``fan_out="10,25"`` lists the same thing input layer first).
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
import tomllib
from dataclasses import dataclass, field

from ..errors import InputError


@dataclass
class TrainConfig:
    part_config: str = ""
    graph_name: str | None = None
    layout: str = "servers=1,samplers=0,trainers=rest"
    ranks_per_node: int | None = None
    feat: str = "feat"
    label: str = "label"
    train_mask: str = "train_mask"
    val_mask: str = "val_mask"
    test_mask: str = "test_mask"
    epochs: int = 3
    batch_size: int = 1000
    fanouts: list = field(default_factory=lambda: [25, 10])
    hidden: int = 256
    dropout: float = 0.5
    lr: float = 0.003
    seed: int = 0
    prefetch: int = 2
    device: str = "auto"
    cache_bytes: int = 0
    threads: int = 0
    infer_batch_size: int = 4096
    eval_every: int = 1
    run_dir: str = "runs/node_classification"
    checkpoint_every: int = 0
    resume: bool = False
    max_steps: int = 0
    epoch_steps: int = 0
    progress: str = "auto"
    feature_rows: str = "auto"
    model: str = "sage"
    sample_on: str = "auto"
    floor_steps: int = 0

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)


HELP = {
    "part_config": "the partitioned graph's JSON (from hpcgnn partition)",
    "graph_name": "graph name (default: the one in part_config)",
    "layout": "roles per node, e.g. servers=1,samplers=1,trainers=1",
    "ranks_per_node": "ranks per (virtual) node; default: real hosts",
    "fanouts": "neighbours per hop, seeds first, e.g. 25,10",
    "device": "auto (a GPU per trainer when CUDA is available, else CPU), cpu or cuda",
    "cache_bytes": "cache the features of the hottest remote nodes, up to this many bytes per process",
    "threads": "torch threads per trainer (0: cores of the node / ranks on it)",
    "eval_every": "validation accuracy every N epochs (0: never)",
    "checkpoint_every": "checkpoint every N optimizer steps (0: only on a stop signal)",
    "resume": "continue from the newest complete checkpoint in run_dir",
    "max_steps": "stop (checkpoint and exit) after N optimizer steps in total (0: no limit)",
    "epoch_steps": "end each epoch after N steps (0: a full pass over the training nodes; benchmarks)",
    "model": "sage (fused kernels), sage-pyg, gcn, gat, gin, or package.module:ClassName (your own "
             "nn.Module; docs/training.md)",
    "sample_on": "where the trainer's own batches are sampled and built: auto (by the GPU when training on one), "
                 "host, device (on the training device even a CPU: the GPU path's CPU twin)",
    "floor_steps": "after training, time N batches staged on the device beforehand through a copy of the "
                   "model (the model-only floor; benchmarks; 0: off)",
    "progress": "progress bar on trainer 0: auto (when stderr is a terminal), on, off",
    "feature_rows": "how batches hand features to the first layer: copy (gathered by the loader), refs "
                    "(read in place by the first layer; CPU), auto (refs on a CPU when the loader's thread "
                    "shares the trainer's core, or without one)",
}


def _closest(key: str, known) -> str:
    m = difflib.get_close_matches(key, list(known), n=1, cutoff=0.5)
    return f" (did you mean {m[0]!r}?)" if m else ""


def _coerce(cls, name: str, value, where: str):
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    default = getattr(cls(), name)
    try:
        if name == "fanouts":
            if isinstance(value, str):
                value = [int(v) for v in value.replace(" ", "").split(",") if v]
            value = [int(v) for v in value]
            if not value or any(v < -1 or v == 0 for v in value):
                raise ValueError
            return value
        if name == "resume":
            if isinstance(value, str):
                return value.lower() in ("1", "true", "yes", "on")
            return bool(value)
        if value is None:
            return None
        if isinstance(default, bool):
            return bool(value)
        if isinstance(default, int) or name == "ranks_per_node":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if isinstance(default, float):
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {name}={value!r} is not a valid {f.type}"
                         + (" (a list of positive neighbour counts per hop, -1 for all)" if name == "fanouts"
                            else "")) from None


def from_mapping(data: dict, where: str, base=None, cls=TrainConfig):
    """Settings ``data`` (TOML table or flags) over ``base`` (default: ``cls()``)."""
    cfg = dataclasses.replace(base) if base is not None else cls()
    known = {f.name for f in dataclasses.fields(cls)}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in known:
            raise InputError(f"{where}: unknown setting {key!r}{_closest(name, known)}")
        setattr(cfg, name, _coerce(cls, name, value, where))
    return cfg


def parse_settings(cls, help_text: dict, argv, prog: str, description: str):
    """``[--config FILE.toml] [--key value ...]`` -> a ``cls`` dataclass: defaults <
    the TOML file < flags; unknown keys and options name the closest one, flags
    cannot be abbreviated, ``part_config`` is required."""
    # "--fanouts -1,-1": argparse takes a value that starts with "-" and is not a plain
    # number for an option; glue such values to their flag
    argv = list(sys.argv[1:] if argv is None else argv)
    glued, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and "=" not in a and i + 1 < len(argv) and re.match(r"-\.?\d", argv[i + 1]):
            glued.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        glued.append(a)
        i += 1
    argv = glued
    p = argparse.ArgumentParser(prog=prog, allow_abbrev=False, description=description)
    p.add_argument("--config", help="a TOML file of settings (flags override it)")
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "resume":
            p.add_argument(flag, action="store_true", default=None, help=help_text.get(f.name))
        else:
            p.add_argument(flag, default=None, metavar=f.name.upper(), help=help_text.get(f.name))
    ns, unknown = p.parse_known_args(argv)
    if unknown:
        known = ["--" + f.name.replace("_", "-") for f in dataclasses.fields(cls)] + ["--config"]
        bad = unknown[0].split("=")[0]
        raise InputError(f"{prog}: unknown option {bad!r}{_closest(bad, known)}")
    cfg = cls()
    given = set()
    if ns.config:
        try:
            with open(ns.config, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as e:
            raise InputError(f"{ns.config}: cannot read the config file ({e.strerror})") from None
        except tomllib.TOMLDecodeError as e:
            raise InputError(f"{ns.config}: not valid TOML ({e})") from None
        cfg = from_mapping(data, ns.config, cfg, cls)
        given |= {str(k).replace("-", "_") for k in data}
    flags = {k: v for k, v in vars(ns).items() if k != "config" and v is not None}
    cfg = from_mapping(flags, "command line", cfg, cls)
    cfg.given = frozenset(given | set(flags))      # the settings the user set (file or flags)
    if not cfg.part_config:
        raise InputError(f"{prog}: part_config is required (--part-config PARTS/NAME.json or in the TOML file)")
    return cfg


def parse_args(argv=None, prog: str = "node_classification") -> TrainConfig:
    """``[--config FILE.toml] [--key value ...]`` -> a checked :class:`TrainConfig`."""
    cfg = parse_settings(TrainConfig, HELP, argv, prog, "Train a GNN (GraphSAGE by default) on a partitioned graph "
                         "(run under mpirun/srun; see docs/training.md).")
    if cfg.progress not in ("auto", "on", "off"):
        raise InputError(f"{prog}: progress must be auto, on or off, got {cfg.progress!r}")
    if cfg.feature_rows not in ("auto", "copy", "refs"):
        raise InputError(f"{prog}: feature_rows must be auto, copy or refs, got {cfg.feature_rows!r}")
    if cfg.sample_on not in ("auto", "host", "device"):
        raise InputError(f"{prog}: sample_on must be auto, host or device, got {cfg.sample_on!r}")
    if cfg.floor_steps < 0:
        raise InputError(f"{prog}: floor_steps must be >= 0 (0: off), got {cfg.floor_steps}")
    for name in ("epochs", "batch_size", "hidden", "infer_batch_size"):
        if getattr(cfg, name) < 1:
            raise InputError(f"{prog}: {name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.cache_bytes < 0:
        raise InputError(f"{prog}: cache_bytes must be >= 0 (0: no cache), got {cfg.cache_bytes}")
    return cfg
