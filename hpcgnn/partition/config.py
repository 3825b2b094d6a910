"""The partition configuration (``<out>/<graph_name>.json``): output-directory rules,
atomic writing and reading.  Every key is described in docs/format.md."""
from __future__ import annotations

import glob
import json
import os

from ..errors import InputError

FORMAT = "hpcgnn-partitioned"
VERSION = 1
NTYPE = "_N"  # the node type name of a homogeneous graph (DGL's default)
ETYPE = "_E"


def config_path(out_dir: str, graph_name: str) -> str:
    return os.path.join(out_dir, f"{graph_name}.json")


def h5_name(graph_name: str) -> str:
    return f"{graph_name}.h5"


def partial_h5_path(out_dir: str, graph_name: str) -> str:
    """Where the HDF5 file is written until it is complete (then renamed)."""
    return os.path.join(out_dir, f".{graph_name}.h5.partial")


def _is_config(path: str) -> str | None:
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    if isinstance(d, dict) and d.get("format") == FORMAT:
        return str(d.get("graph_name", "?"))
    return None


def check_output_dir(out_dir: str, graph_name: str, overwrite: bool, rank: int) -> None:
    """Independent (call on one rank inside ``agreed``): may we write ``graph_name`` here?

    Refuses, unless ``overwrite``, when the directory already holds a finished
    partitioned graph (any ``*.json`` of this format): the same graph name, or a
    different graph.  A leftover ``<name>.h5`` without its JSON is a failed run and is
    replaced.  Raises :class:`InputError` naming the directory and the file.
    """
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise InputError(f"{out_dir}: output path exists and is not a directory (rank {rank})")
    if not os.path.isdir(out_dir):
        return
    found = []
    for path in sorted(glob.glob(os.path.join(out_dir, "*.json"))):
        name = _is_config(path)
        if name is not None:
            found.append((path, name))
    if found and not overwrite:
        path, name = found[0]
        what = "this graph" if name == graph_name else f"a different graph '{name}'"
        raise InputError(f"{out_dir}: output directory already holds {what} ({path}); "
                         f"pass --overwrite (overwrite=True) to replace it, or choose another directory "
                         f"(rank {rank})")
    if not os.access(out_dir, os.W_OK):
        raise InputError(f"{out_dir}: output directory is not writable (rank {rank})")


def write_config_atomic(path: str, config: dict) -> None:
    """Independent: write the JSON to a temporary file, fsync, then rename over ``path``."""
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(config, f, indent=1, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def read_config(config: str | dict) -> tuple[dict, str]:
    """Independent: (configuration dict, its directory) from a path or an already-read dict."""
    if isinstance(config, dict):
        return config, config.get("_dir", ".")
    try:
        with open(config) as f:
            d = json.load(f)
    except FileNotFoundError as e:
        raise InputError(f"{config}: no such partition configuration") from e
    except ValueError as e:
        raise InputError(f"{config}: not a JSON file ({e})") from e
    if d.get("format") != FORMAT:
        raise InputError(f"{config}: key 'format' is {d.get('format')!r}, expected {FORMAT!r}")
    if int(d.get("version", -1)) != VERSION:
        raise InputError(f"{config}: key 'version' is {d.get('version')!r}, this hpcgnn reads {VERSION}")
    return d, os.path.dirname(os.path.abspath(config))
