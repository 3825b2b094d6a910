"""Bad input to the partitioner: a clear error naming file, dataset and rank on every
rank, and no configuration left behind.  Also the CLI end to end at the run's ranks."""
import json
import os
import resource

import h5py
import numpy as np
import pytest

from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import HpcgnnError, InputError
from hpcgnn.partition import partition_graph
from hpcgnn.testing import on_rank0
from harness import check_partitioned, load_all, make_raw, planted_graph, write_raw

comm = MPI.COMM_WORLD


def _spoil(path, how):
    with h5py.File(path, "a") as f:
        if how == "missing_dataset":
            del f["edges/dst"]
        elif how == "wrong_dtype":
            a = f["edges/src"][()]
            del f["edges/src"]
            f["edges/src"] = a.astype(np.float64)
        elif how == "wrong_shape":
            a = f["nodes/data/label"][()]
            del f["nodes/data/label"]
            f["nodes/data/label"] = a[:-2]
        elif how == "out_of_range":
            a = f["edges/dst"][()]
            a[len(a) - 3] = f.attrs["num_nodes"]
            f["edges/dst"][...] = a
        elif how == "nan_feat":
            a = f["nodes/data/feat"][()]
            a[len(a) - 1, 0] = np.nan
            f["nodes/data/feat"][...] = a
        elif how == "wrong_format":
            f.attrs["format"] = "something-else"
        elif how == "label_out_of_range":
            a = f["nodes/data/label"][()]
            a[len(a) - 2] = 5                                  # num_classes is 5
            f["nodes/data/label"][...] = a
        elif how == "mask_value_two":
            a = f["nodes/data/test_mask"][()]
            a[7] = 2
            f["nodes/data/test_mask"][...] = a
        elif how == "fractional_num_nodes":
            f.attrs["num_nodes"] = 400.5
        elif how == "ntypes_without_types":
            f["nodes/data/feat"].attrs["ntypes"] = json.dumps(["user"])
        elif how == "mask_float":
            a = f["nodes/data/val_mask"][()]
            del f["nodes/data/val_mask"]
            f["nodes/data/val_mask"] = a.astype(np.float32)
        elif how == "feat_1d":
            a = f["nodes/data/feat"][()]
            del f["nodes/data/feat"]
            f["nodes/data/feat"] = a[:, 0].copy()


CASES = {  # how -> words the error must contain
    "missing_dataset": ["/edges/dst", "missing"],
    "wrong_dtype": ["/edges/src", "float64"],
    "wrong_shape": ["/nodes/data/label", "rows"],
    "out_of_range": ["/edges/dst", "outside [0, 400)"],
    "nan_feat": ["/nodes/data/feat", "NaN"],
    "wrong_format": ["format", "something-else"],
    "label_out_of_range": ["/nodes/data/label", "value 5 at row 398", "num_classes"],
    "mask_value_two": ["/nodes/data/test_mask", "value 2 at row 7"],
    "fractional_num_nodes": ["num_nodes", "400.5", "integer"],
    "feat_1d": ["/nodes/data/feat", "2-D"],
    "ntypes_without_types": ["/nodes/data/feat' ntypes", "no root attribute 'ntypes'"],
    "mask_float": ["/nodes/data/val_mask", "shape (400,)", "1-D bool or uint8"],
}


def _graph(directory, **kw):
    src, dst, _ = planted_graph(400, 4, 2, seed=11)
    return make_raw(comm, directory, 400, src, dst, **kw)


def _no_config(out):
    comm.Barrier()
    return not os.path.isdir(out) or not [f for f in os.listdir(out) if f.endswith(".json")]


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", sorted(CASES))
def test_bad_raw_file_fails_on_every_rank(shared_dir, how):
    path, _ = _graph(shared_dir)
    if comm.Get_rank() == 0:
        _spoil(path, how)
    comm.Barrier()
    out = os.path.join(shared_dir, "out")
    with pytest.raises(InputError) as e:
        partition_graph(path, out, 2, comm=comm)
    msg = str(e.value)
    assert path in msg and "rank" in msg, msg
    for word in CASES[how]:
        assert word in msg, msg
    assert _no_config(out)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_missing_file_more_parts_than_nodes_and_bad_options(shared_dir):
    out = os.path.join(shared_dir, "out")
    missing = os.path.join(shared_dir, "nope.h5")
    with pytest.raises(InputError, match="nope.h5: no such input file"):
        partition_graph(missing, out, 2, comm=comm)
    path, _ = _graph(shared_dir)
    with pytest.raises(InputError, match="num_parts=401 is more than the graph's 400 nodes"):
        partition_graph(path, out, 401, comm=comm)
    with pytest.raises(InputError, match="edge_dir"):
        partition_graph(path, out, 2, comm=comm, edge_dir="sideways")
    with pytest.raises(InputError, match="/nodes/data/nope"):
        partition_graph(path, out, 2, comm=comm, balance_ntypes=["nope"])
    with pytest.raises(InputError, match="feat.*balance-ntypes"):
        partition_graph(path, out, 2, comm=comm, balance_ntypes=["feat"])
    assert _no_config(out)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_output_dir_with_another_graph_needs_overwrite(shared_dir):
    path, g = _graph(shared_dir)
    out = os.path.join(shared_dir, "out")
    first = partition_graph(path, out, 2, comm=comm, graph_name="first")
    with pytest.raises(InputError, match="different graph 'first'.*--overwrite"):
        partition_graph(path, out, 3, comm=comm, graph_name="second")
    with pytest.raises(InputError, match="already holds this graph"):
        partition_graph(path, out, 3, comm=comm, graph_name="first")
    cfg = partition_graph(path, out, 3, comm=comm, graph_name="first", overwrite=True, return_mapping=True)
    comm.Barrier()
    assert cfg == first
    if comm.Get_rank() == 0:
        conf, parts = load_all(cfg)
        assert conf["num_parts"] == 3
        check_partitioned(conf, parts, g)


def test_disk_full_leaves_no_config(tmp_path):
    """Single process: a file-size limit (like a full disk) is caught before writing: clear
    error, no JSON, no partial HDF5 file."""
    src, dst, _ = planted_graph(3000, 8, 4, seed=12)
    path = str(tmp_path / "raw.h5")
    write_raw(path, 3000, src, dst, feat_dim=64)
    out = str(tmp_path / "out")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, hard))
    try:
        with pytest.raises(HpcgnnError) as e:
            partition_graph(path, out, 2, comm=MPI.COMM_SELF)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    msg = str(e.value)
    assert "g.h5.partial" in msg and "[rank " in msg and "bytes" in msg, msg
    assert os.listdir(out) == [], "neither the JSON nor a partial HDF5 file is left"


def _cli(args):
    """``hpcgnn partition ARGS`` on every rank of the run, in this process."""
    from hpcgnn.cli.main import main
    from hpcgnn.testing import run_job

    return run_job(main, ["partition", *args])


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(200)
def test_cli_end_to_end(shared_tmp):
    size = comm.Get_size()
    path = os.path.join(shared_tmp, "raw.h5")
    src, dst, _ = planted_graph(2000, 6, 4, seed=13)
    g = on_rank0(lambda: write_raw(path, 2000, src, dst, types=True))
    out = os.path.join(shared_tmp, "out")
    r = _cli([path, "-o", out, "-k", "3", "--return-mapping", "--num-hops", "2", "--balance-ntypes", "train_mask",
              "--balance-edges", "--json"])
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["num_parts"] == 3 and summary["config"] == os.path.join(out, "g.json")
    if comm.Get_rank() == 0:
        conf, parts = load_all(summary["config"])
        check_partitioned(conf, parts, g)
        assert conf["num_ranks"] == size and conf["num_hops"] == 2 and conf["balance_edges"]
    # every phase's RSS high-water mark, summed over the ranks (monotone: a high-water mark)
    per_rank = summary["peak_rss_bytes_per_rank"]
    assert len(per_rank) == size and all(v > 10 << 20 for v in per_rank)
    assert summary["peak_rss_bytes_sum"] == sum(per_rank) and summary["peak_rss_bytes_max_rank"] == max(per_rank)
    peaks = [m["peak_rss_bytes_sum"] for m in summary["memory_by_phase"].values()]
    assert list(summary["memory_by_phase"]) == list(summary["timings_s"])
    assert peaks == sorted(peaks) and peaks[-1] <= summary["peak_rss_bytes_sum"]


def _spoilt(path):
    src, dst, _ = planted_graph(500, 4, 2, seed=14)
    write_raw(path, 500, src, dst)
    _spoil(path, "out_of_range")


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(200)
def test_cli_bad_input_exits_nonzero_on_all_ranks(shared_tmp):
    path = os.path.join(shared_tmp, "raw.h5")
    on_rank0(_spoilt, path)
    out = os.path.join(shared_tmp, "out")
    r = _cli([path, "-o", out, "-k", "2"])
    assert r.returncode != 0 and r.rank_returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if "hpcgnn partition: error" in ln]
    assert len(lines) == comm.Get_size(), r.stderr[-3000:]
    for ln in lines:
        assert path in ln and "/edges/dst" in ln and "rank" in ln
    assert not os.path.exists(os.path.join(out, "g.json"))
