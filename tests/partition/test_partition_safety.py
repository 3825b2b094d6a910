"""The partitioner never destroys data: not its input, not a previous good partition
when an --overwrite run fails; and what it writes is what readers take (node-type
constraints named after their types, big-endian input, a JSON that agrees with its
HDF5 file)."""
import json
import os
import shutil

import h5py
import numpy as np
import pytest

from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import InputError
from hpcgnn.partition import load_partition, partition_graph
from harness import make_raw, planted_graph, write_raw

comm = MPI.COMM_WORLD


def _graph(directory, **kw):
    src, dst, _ = planted_graph(400, 4, 2, seed=5)
    return make_raw(comm, directory, 400, src, dst, **kw)


def _md5(path):
    import hashlib

    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_the_input_is_never_written_over(shared_dir):
    """The input named <out>/<graph_name>.h5: refused, overwrite or not, input intact;
    another file of that name that is not a partition file is refused as well."""
    out = os.path.join(shared_dir, "dd")
    path, _ = _graph(shared_dir, name="t")
    if comm.Get_rank() == 0:
        os.makedirs(out)
        shutil.copy(path, os.path.join(out, "t.h5"))
    comm.Barrier()
    inp = os.path.join(out, "t.h5")
    before = _md5(inp)
    for overwrite in (False, True):
        with pytest.raises(InputError, match="would be written over this input file"):
            partition_graph(inp, out, 2, comm=comm, overwrite=overwrite)
    with pytest.raises(InputError, match="is not a file of partitions"):
        partition_graph(path, out, 2, comm=comm, overwrite=True)     # another input, same graph name
    comm.Barrier()
    assert _md5(inp) == before and not os.path.exists(os.path.join(out, "t.json"))


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_a_failed_overwrite_keeps_the_previous_partition(shared_dir):
    path, _ = _graph(shared_dir, name="t")
    out = os.path.join(shared_dir, "out")
    cfg = partition_graph(path, out, 2, comm=comm)
    bad = os.path.join(shared_dir, "bad.h5")
    if comm.Get_rank() == 0:
        shutil.copy(path, bad)
        with h5py.File(bad, "a") as f:
            f["nodes/data/feat"][17, 1] = np.nan           # found only while writing
    comm.Barrier()
    with pytest.raises(InputError, match="NaN"):
        partition_graph(bad, out, 3, comm=comm, overwrite=True)
    comm.Barrier()
    with open(cfg) as f:
        assert json.load(f)["num_parts"] == 2
    for p in range(2):
        load_partition(cfg, p, verify=True)                # the old files, checksums and all


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_node_type_constraints_are_named_after_their_types(shared_dir):
    """Two node types (ids 0 and 1): one constraint per type, each counting its own."""
    path, g = _graph(shared_dir, types=True)
    cfg = partition_graph(path, os.path.join(shared_dir, "out"), 2, comm=comm)
    with open(cfg) as f:
        conf = json.load(f)
    counts = {"paper": int((g["node_type"] == 0).sum()), "author": int((g["node_type"] == 1).sum())}
    for t in ("paper", "author"):
        name = f"ntype={t}"
        assert name in conf["constraints"]
        per_part = [p["weights"][name] for p in conf["parts"]]
        in_map = [b - a for a, b in conf["node_map"][t]]
        assert per_part == in_map and sum(per_part) == counts[t]


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_big_endian_input_is_written_in_this_machines_order(shared_dir):
    src, dst, _ = planted_graph(400, 4, 2, seed=5)
    path = os.path.join(shared_dir, "be.h5")
    if comm.Get_rank() == 0:
        g = write_raw(path, 400, src, dst)
        with h5py.File(path, "a") as f:
            for k in ("nodes/data/feat", "nodes/data/label", "edges/src", "edges/dst"):
                a = f[k][()]
                del f[k]
                f[k] = a.astype(a.dtype.newbyteorder(">"))
    comm.Barrier()
    cfg = partition_graph(path, os.path.join(shared_dir, "out"), 2, comm=comm, return_mapping=True)
    with open(cfg) as f:
        conf = json.load(f)
    assert conf["node_feats"]["feat"]["dtype"] == "float32"
    if comm.Get_rank() == 0:
        with h5py.File(path, "r") as f:
            feat = f["nodes/data/feat"][()]
        for p in range(2):
            part = load_partition(cfg, p, verify=True)
            assert part.node_feats["feat"].dtype == np.float32
            np.testing.assert_array_equal(part.node_feats["feat"], feat[part.orig_nid])


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_a_json_or_a_file_that_disagrees_is_refused(shared_dir):
    cfg, conf = _partitioned(shared_dir, "t")
    if cfg is None:
        return
    edits = {
        "nomap": (lambda d: d.pop("node_map"), "key 'node_map' is missing"),
        "parts": (lambda d: d.__setitem__("num_parts", 3), "'num_parts' is 3 but 'parts' lists 2"),
        "dtype": (lambda d: d["node_feats"]["feat"].__setitem__("dtype", "int8"),
                  "/part0/node/feat is float32.*node_feats say int8"),
    }
    for name, (edit, words) in edits.items():
        d = json.loads(json.dumps(conf))
        edit(d)
        _refused(cfg, d, f"t_{name}", words)
    _damaged_csr_is_named(cfg, conf)


def _partitioned(shared_dir, name: str):
    """Collective: the test graph partitioned into 2 parts; ``(config path, its
    JSON)`` on rank 0 (which checks alone), ``(None, None)`` elsewhere."""
    path, _ = _graph(shared_dir, name=name)
    cfg = partition_graph(path, os.path.join(shared_dir, "out"), 2, comm=comm)
    if comm.Get_rank() != 0:
        return None, None
    with open(cfg) as f:
        return cfg, json.load(f)


def _refused(cfg, conf: dict, name: str, words: str) -> None:
    """``conf`` written next to ``cfg`` as ``name.json``: DistGraph refuses it (the
    checks behind the digest: it is left out, as in a JSON from before it existed)."""
    from hpcgnn.graph import DistGraph

    p = os.path.join(os.path.dirname(cfg), f"{name}.json")
    with open(p, "w") as f:
        json.dump({k: v for k, v in conf.items() if k != "config_digest"}, f)
    with pytest.raises(InputError, match=words):
        DistGraph(name, part_config=p)


def _damaged_csr_is_named(cfg, conf):
    """A CSR damaged on disk gave bare NumPy errors (or a table's name) at load."""
    h5 = os.path.join(os.path.dirname(cfg), conf["h5_file"])
    damage = {
        "first": (lambda g: g["csr/indptr"].__setitem__(0, -3), "/part1/csr/indptr must start at 0"),
        "order": (lambda g: g["csr/indptr"].__setitem__(5, int(g["csr/indptr"][7])),
                  "/part1/csr/indptr must start at 0 and never decrease"),
        "ids": (lambda g: g["csr/indices"].__setitem__(2, 10**6), r"/part1/csr/indices holds node ids outside \[0, 400\)"),
    }
    for name, (edit, words) in damage.items():
        copy = os.path.join(os.path.dirname(cfg), f"damaged_{name}.h5")
        shutil.copy(h5, copy)
        with h5py.File(copy, "r+") as f:
            edit(f["part1"])
        _refused(cfg, dict(conf, h5_file=os.path.basename(copy)), f"damaged_{name}", words)


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_info_summarizes_and_names_a_file_of_another_graph(shared_dir):
    from hpcgnn.cli.info import _table, summarize

    path, _ = _graph(shared_dir, name="i")
    cfg = partition_graph(path, os.path.join(shared_dir, "out"), 2, comm=comm)
    other = partition_graph(path, os.path.join(shared_dir, "out3"), 3, comm=comm)
    if comm.Get_rank() != 0:
        return
    s = summarize(cfg)
    assert s["num_nodes"] == 400 and s["num_parts"] == 2
    assert sum(r["inner_nodes"] for r in s["parts"]) == 400 and "edge cut" in _table(s)
    with open(cfg) as f:
        conf = json.load(f)
    with open(other) as f:
        other_h5 = os.path.join(os.path.dirname(other), json.load(f)["h5_file"])
    conf["h5_file"] = os.path.relpath(other_h5, os.path.dirname(cfg))
    del conf["config_digest"]                  # the checks behind it
    wrong = os.path.join(os.path.dirname(cfg), "wrong.json")
    with open(wrong, "w") as f:
        json.dump(conf, f)
    with pytest.raises(InputError, match="/part0 holds .* the JSON's node_map/edge_map say .*another graph's"):
        summarize(wrong)


def test_a_config_that_is_not_a_json_object_is_named(tmp_path):
    from hpcgnn.partition.config import read_config

    bad = tmp_path / "list.json"
    bad.write_text("[1, 2]")
    with pytest.raises(InputError, match=f"{bad}: a partition configuration is a JSON object, this file holds a list"):
        read_config(str(bad))
