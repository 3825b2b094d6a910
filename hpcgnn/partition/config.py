"""The partition configuration (``<out>/<graph_name>.json``): output-directory rules,
atomic writing and reading.  Every key is described in docs/format.md.

The JSON carries a digest of its own content (``config_digest``), written with it
and checked when it is read: a JSON edited after partitioning is refused (a JSON
without the key, from before it existed, is read as it is).  ``HPCGNN_VERIFY=0``
turns off the checks against the digest and the datasets' checksums
(:func:`verify_enabled`)."""
from __future__ import annotations

import glob
import hashlib
import json
import os


from ..errors import InputError
from ..io.h5 import open_h5

FORMAT = "hpcgnn-partitioned"
VERSION = 1
#: the version of a partitioning with features whose stored dtype is not their logical one
#: (``--feat-dtype bf16``: ``uint16`` bits); a reader that knows only version 1 refuses it
VERSION_LOGICAL = 2
VERSIONS = (VERSION, VERSION_LOGICAL)
NTYPE = "_N"  # the node type name of a homogeneous graph (DGL's default)
ETYPE = "_E"
DIGEST_KEY = "config_digest"
VERIFY_ENV = "HPCGNN_VERIFY"


def verify_enabled() -> bool:
    """Whether loads check the JSON's digest and the datasets' checksums: yes unless
    ``HPCGNN_VERIFY`` is ``0`` (or ``false``, ``no``, ``off``), read at each call."""
    return os.environ.get(VERIFY_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def config_digest(config: dict) -> str:
    """``sha256:<hex>`` of the canonical JSON (sorted keys, no spaces) of every key
    but ``config_digest`` itself."""
    body = {k: v for k, v in config.items() if k != DIGEST_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


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


def _is_partition_h5(path: str) -> bool:
    """Whether ``path`` is an HDF5 file of partitions (groups ``part0``...)."""
    try:
        with open_h5(path, "r") as f:
            return "part0" in f and "format" not in f.attrs
    except (OSError, ValueError):
        return False


def check_output_dir(out_dir: str, graph_name: str, overwrite: bool, rank: int,
                     input_path: str | None = None) -> None:
    """Independent (call on one rank inside ``agreed``): may we write ``graph_name`` here?

    Refuses, unless ``overwrite``, when the directory already holds a finished
    partitioned graph (any ``*.json`` of this format): the same graph name, or a
    different graph.  A leftover ``<name>.h5`` of partitions without its JSON is a
    failed run and is replaced; any other file of that name (the input itself, a raw
    graph, something else) is never replaced, ``overwrite`` or not.  Raises
    :class:`InputError` naming the directory and the file.
    """
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise InputError(f"{out_dir}: output path exists and is not a directory (rank {rank})")
    if not os.path.isdir(out_dir):
        return
    h5 = os.path.join(out_dir, h5_name(graph_name))
    if os.path.exists(h5):
        if input_path is not None and os.path.exists(input_path) and os.path.samefile(h5, input_path):
            raise InputError(f"{input_path}: the partitions of graph '{graph_name}' would be written over "
                             f"this input file ({h5}); choose another output directory (rank {rank})")
        if not _is_partition_h5(h5):
            raise InputError(f"{out_dir}: {h5} exists and is not a file of partitions; the partitions of "
                             f"graph '{graph_name}' go there: move it away or choose another output "
                             f"directory (rank {rank})")
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
    """Independent: write the JSON, with its ``config_digest`` last, to a temporary
    file, fsync, then rename over ``path``."""
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.tmp")
    body = json.loads(json.dumps({k: v for k, v in config.items() if k != DIGEST_KEY}))  # as read back
    body[DIGEST_KEY] = config_digest(body)
    try:
        with open(tmp, "w") as f:
            json.dump(body, f, indent=1, sort_keys=False)
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


def read_config(config: str | dict, *, strict: bool = True) -> tuple[dict, str]:
    """Independent: (configuration dict, its directory) from a path or an already-read dict.

    A path's JSON is checked: its keys and their types, then (``strict``) its content:
    the digest (unless ``HPCGNN_VERIFY=0``) and the totals (:func:`content_problems`).
    ``strict=False`` leaves the content to the caller (``hpcgnn verify`` lists every
    problem).  Raises :class:`InputError` naming the file and the key."""
    if isinstance(config, dict):
        return config, config.get("_dir", ".")
    d = _load_json(config)
    _check_keys(config, d)
    if strict:
        problems = content_problems(config, d, digest=verify_enabled())
        if problems:
            raise InputError(problems[0])
    return d, os.path.dirname(os.path.abspath(config))


def _load_json(config: str) -> dict:
    try:
        with open(config) as f:
            d = json.load(f)
    except FileNotFoundError as e:
        raise InputError(f"{config}: no such partition configuration") from e
    except ValueError as e:
        raise InputError(f"{config}: not a JSON file ({e})") from e
    if not isinstance(d, dict):
        raise InputError(f"{config}: a partition configuration is a JSON object, this file holds a "
                         f"{type(d).__name__}")
    return d


def _check_keys(config: str, d: dict) -> None:
    if d.get("format") != FORMAT:
        raise InputError(f"{config}: key 'format' is {d.get('format')!r}, expected {FORMAT!r}")
    if d.get("version") not in VERSIONS:
        raise InputError(f"{config}: key 'version' is {d.get('version')!r}, this hpcgnn reads "
                         f"{' or '.join(map(str, VERSIONS))}")
    for key, kind in _REQUIRED:
        if key not in d:
            raise InputError(f"{config}: key {key!r} is missing")
        if not isinstance(d[key], kind) or isinstance(d[key], bool) and kind is int:
            raise InputError(f"{config}: key {key!r} is {d[key]!r}, expected {kind.__name__}")
    if d["edge_dir"] not in ("in", "out"):
        raise InputError(f"{config}: key 'edge_dir' is {d['edge_dir']!r}, expected 'in' or 'out'")
    if d["num_parts"] < 1 or len(d["parts"]) != d["num_parts"]:
        raise InputError(f"{config}: key 'num_parts' is {d['num_parts']} but 'parts' lists {len(d['parts'])}")
    for key in ("node_map", "edge_map"):
        for t, bounds in d[key].items():
            if not isinstance(bounds, list) or len(bounds) != d["num_parts"]:
                raise InputError(f"{config}: key {key!r}, type {t!r}: expected one [start, end] per partition "
                                 f"({d['num_parts']}), got {bounds!r}")


def content_problems(config: str, d: dict, digest: bool = True) -> list[str]:
    """Independent: one line per disagreement inside a JSON whose keys are there:
    the ``config_digest`` (with ``digest``), ``num_nodes``/``num_edges`` against the
    ``node_map``/``edge_map`` ranges, and each entry of ``parts`` against its ranges."""
    out = []
    if digest and DIGEST_KEY in d and d[DIGEST_KEY] != config_digest(d):
        out.append(f"{config}: the JSON was edited after partitioning: its content does not match its "
                   f"'{DIGEST_KEY}'; partition the graph again or, if the edit is intended, delete the "
                   f"'{DIGEST_KEY}' key ({VERIFY_ENV}=0 skips this check)")
    for total, key, count in (("num_nodes", "node_map", "num_inner_nodes"), ("num_edges", "edge_map", "num_edges")):
        sizes = [part_span(d[key], p) for p in range(d["num_parts"])]
        if None in sizes:
            continue                     # malformed ranges: the partition book names them
        if sum(sizes) != d[total]:
            out.append(f"{config}: key '{total}' is {d[total]} but '{key}' covers {sum(sizes)}")
        for p, (want, part) in enumerate(zip(sizes, d["parts"])):
            got = part.get(count) if isinstance(part, dict) else None
            if isinstance(got, int) and got != want:
                out.append(f"{config}: key 'parts', partition {p}: '{count}' is {got} but '{key}' gives it {want}")
    return out


def part_span(ranges: dict, p: int) -> int | None:
    """Ids of partition ``p`` in a ``node_map``/``edge_map`` (over every type), or None
    where its ``[start, end]`` pairs are not pairs of integers."""
    n = 0
    for bounds in ranges.values():
        b = bounds[p]
        if not (isinstance(b, list) and len(b) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                              for v in b)):
            return None
        n += b[1] - b[0]
    return n


#: keys every reader needs, and their JSON types (docs/format.md describes them all)
_REQUIRED = (("graph_name", str), ("num_nodes", int), ("num_edges", int), ("num_parts", int), ("h5_file", str),
             ("node_map", dict), ("edge_map", dict), ("edge_dir", str), ("parts", list),
             ("node_feats", dict), ("edge_feats", dict))
