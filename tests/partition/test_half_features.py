"""Half-precision node features (``hpcgnn partition --feat-dtype bf16|fp16``, issue 30):

* the stored rows are the float32 rows rounded to nearest even, bit for bit what
  torch's ``.to(torch.bfloat16)`` / ``.to(torch.float16)`` give, under the node
  mapping; the feature dataset is half the bytes; labels and masks are untouched;
  the JSON and the dataset name the logical dtype;
* ``hpcgnn partition --feat-dtype``, ``hpcgnn info`` and ``hpcgnn verify`` on them;
  bad input (another dtype, a feature field that is not floating or not there, an
  fp16 overflow) is one clear error;
* every reader sees them: a DistGraph gather hands ``torch.bfloat16``/``float16``
  rows equal to the rounded ones, loader batches a float32 ``x``, the PyG feature
  store float32, DGL's ``load_partition`` ``torch.bfloat16``; across two (virtual)
  hosts, with RMA reads, sampler ranks and the hot-row cache, which holds twice
  the rows in the same bytes (tests/scripts/half_features_job.py);
* ``hpcgnn train`` on a bf16 (fp16) partition reaches the test accuracy of float32
  within 0.5 points (whole jobs: tests/partition/test_half_features_mpi.py)."""
import json
import os
import re
import shutil
import sys

import h5py
import numpy as np
import pytest
import torch

from conftest import ROOT
from hpcgnn.datasets import generate_graph
from hpcgnn.errors import InputError
from hpcgnn.partition import load_partition, partition_graph
from hpcgnn.partition.featdtype import to_float32

TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16}
LOGICAL = {"bf16": "bfloat16", "fp16": "float16"}
STORED = {"bf16": "uint16", "fp16": "float16"}
JOB = os.path.join(ROOT, "tests", "scripts", "half_features_job.py")


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """A 4000-node raw graph partitioned three times alike (same method and seed, so
    the same new ids): float32 (the raw dtype), bf16 and fp16."""
    d = tmp_path_factory.mktemp("half")
    raw = str(d / "g.h5")
    generate_graph(raw, None, 4000, 8, 24, 4, seed=3, name="g")
    cfgs = {dt: partition_graph(raw, str(d / f"parts_{dt}"), 2, return_mapping=True,
                                feat_dtype=None if dt == "float32" else dt)
            for dt in ("float32", "bf16", "fp16")}
    return raw, cfgs


def _bits(t: torch.Tensor) -> np.ndarray:
    """The 16 bits of each value of a half-precision tensor."""
    return t.view(torch.int16).numpy().view(np.uint16)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_stored_rows_are_the_float32_rows_rounded(graph, dt):
    raw, cfgs = graph
    with h5py.File(raw) as f:
        feat, label = f["nodes/data/feat"][:], f["nodes/data/label"][:]
    for p in range(2):
        half, ref = load_partition(cfgs[dt], p), load_partition(cfgs["float32"], p)
        assert np.array_equal(half.orig_nid, ref.orig_nid)
        stored = half.node_feats["feat"]
        want = torch.from_numpy(feat[half.orig_nid]).to(TORCH[dt])       # round to nearest even
        assert str(stored.dtype) == STORED[dt] and half.node_feat_dtypes == {"feat": LOGICAL[dt]}
        assert np.array_equal(stored.view(np.uint16), _bits(want))
        assert np.array_equal(to_float32(stored, LOGICAL[dt]), want.float().numpy())
        assert np.array_equal(half.node_feats["label"], label[half.orig_nid])    # untouched
        for k in ("label", "train_mask", "val_mask", "test_mask"):
            assert half.node_feats[k].dtype == ref.node_feats[k].dtype
            assert np.array_equal(half.node_feats[k], ref.node_feats[k])
    conf = json.load(open(cfgs[dt]))
    assert conf["node_feats"]["feat"] == {"dtype": STORED[dt], "shape": [24], "logical_dtype": LOGICAL[dt],
                                          "raw_dtype": "float32"}
    assert conf["feat_dtype"] == {"dtype": LOGICAL[dt], "fields": ["feat"]}
    assert json.load(open(cfgs["float32"]))["feat_dtype"] is None
    # a reader of version 1 only would take the stored bits for values: version 2 stops it
    assert conf["version"] == 2 and json.load(open(cfgs["float32"]))["version"] == 1
    h5 = {k: os.path.join(os.path.dirname(c), "g.h5") for k, c in cfgs.items()}
    with h5py.File(h5[dt]) as fh, h5py.File(h5["float32"]) as f32:
        for p in range(2):
            d, d32 = fh[f"part{p}/node/feat"], f32[f"part{p}/node/feat"]
            assert d.attrs["logical_dtype"] == LOGICAL[dt] and "logical_dtype" not in d32.attrs
            assert d.shape == d32.shape and 2 * d.id.get_storage_size() == d32.id.get_storage_size()
    assert os.path.getsize(h5[dt]) < os.path.getsize(h5["float32"])


def _cli(argv, capsys):
    from hpcgnn.cli.main import main as cli

    capsys.readouterr()
    code = cli(argv)
    return code, capsys.readouterr().out


@pytest.mark.timeout(60)
def test_cli_partition_info_and_verify(graph, tmp_path, capsys):
    raw, _ = graph
    out = str(tmp_path / "parts")
    code, text = _cli(["partition", raw, "-o", out, "-k", "2", "--feat-dtype", "bf16", "--json"], capsys)
    assert code == 0, text
    cfg = json.loads(text.splitlines()[-1])["config"]
    code, text = _cli(["info", cfg], capsys)
    assert code == 0 and "feat bfloat16[24] (from float32), label int64[]" in text, text
    code, text = _cli(["info", cfg, "--json"], capsys)
    info = json.loads(text)
    assert info["feat_dtype"] == {"dtype": "bfloat16", "fields": ["feat"]}
    assert info["node_feats"]["feat"]["logical_dtype"] == "bfloat16"
    code, text = _cli(["verify", cfg], capsys)
    assert code == 0 and json.loads(text.splitlines()[-1])["ok"], text
    with h5py.File(os.path.join(out, "g.h5"), "r+") as f:      # the attribute lost: bits read as integers
        del f["part1/node/feat"].attrs["logical_dtype"]
    code, text = _cli(["verify", cfg], capsys)
    lines = text.splitlines()
    assert code == 1 and len(lines) == 2, text
    assert "dataset /part1/node/feat (partition 1) is uint16" in lines[0] and "holding bfloat16" in lines[0]
    with pytest.raises(SystemExit) as e:
        _cli(["partition", raw, "-o", str(tmp_path / "x"), "-k", "2", "--feat-dtype", "int8"], capsys)
    assert e.value.code == 2
    assert "--feat-dtype: invalid choice: 'int8'" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_bad_input_is_one_clear_error(graph, tmp_path):
    raw, _ = graph
    out = str(tmp_path / "parts")
    with pytest.raises(InputError, match=r"feat_dtype: 'int8' is not one of bf16, fp16, float32"):
        partition_graph(raw, out, 2, feat_dtype="int8")
    with pytest.raises(InputError, match=r"feature field 'label' \('/nodes/data/label'\) has dtype int64; "
                                         r"--feat-dtype bf16 converts floating features only"):
        partition_graph(raw, out, 2, feat_dtype="bf16", feat_fields=["label"])
    with pytest.raises(InputError, match=r"feature field 'nope' \(--feat-fields\) is not a node dataset"):
        partition_graph(raw, out, 2, feat_dtype="fp16", feat_fields=["feat", "nope"])
    big = str(tmp_path / "big.h5")
    shutil.copy(raw, big)
    with h5py.File(big, "r+") as f:
        f["nodes/data/feat"][7, 3] = 1e5                 # finite, beyond float16's 65504
    with pytest.raises(InputError, match=r"big.h5: dataset '/nodes/data/feat' \(rank 0\): value 100000.0 is "
                                         r"beyond float16's range"):
        partition_graph(big, out, 2, feat_dtype="fp16")
    cfg = partition_graph(big, out, 2, feat_dtype="bf16")                   # bfloat16 has float32's range
    assert json.load(open(cfg))["feat_dtype"]["dtype"] == "bfloat16"
    assert not os.path.exists(os.path.join(out, ".g.h5.partial"))


@pytest.mark.timeout(120)
def test_readers_see_half_rows_and_batches_get_float32(graph):
    from hpcgnn.distributed import load_partition as dgl_load_partition
    from hpcgnn.graph import DistGraph
    from hpcgnn.pyg import DistFeatureStore
    from hpcgnn.sampling import DistNodeDataLoader, NeighborSampler

    _, cfgs = graph
    g32 = DistGraph("g", part_config=cfgs["float32"])
    ids = np.random.default_rng(0).integers(0, g32.num_nodes(), 500)
    try:
        for dt in ("bf16", "fp16"):
            g = DistGraph(f"g_{dt}", part_config=cfgs[dt])
            x = g.ndata["feat"]
            want = g32.ndata["feat"][ids].to(TORCH[dt])
            assert x.dtype == TORCH[dt] and g.node_attr_schemes()["feat"].dtype == TORCH[dt]
            assert x.np_dtype == np.dtype(STORED[dt])
            assert torch.equal(x[ids], want)
            out = torch.empty((len(ids), 24), dtype=TORCH[dt])
            assert x.gather(ids, out=out) is out and torch.equal(out, want)
            assert torch.equal(x.row_refs(ids).materialize(), want)
            for rows in ("copy", "refs"):
                for prefetch in (0, 2):
                    loader = DistNodeDataLoader(g, np.arange(300), NeighborSampler([5, 3]), 64, seed=1,
                                                prefetch=prefetch, feature_rows=rows)
                    for b in loader:
                        assert b.x.dtype == torch.float32
                        assert torch.equal(b.x, g32.ndata["feat"][b.n_id].to(TORCH[dt]).float())
            fs = DistFeatureStore.from_graph(g)
            got = fs.get_tensor(group_name=None, attr_name="x", index=torch.from_numpy(ids))
            assert got.dtype == torch.float32 and torch.equal(got, want.float())
            nf = dgl_load_partition(cfgs[dt], 1)[1]
            assert nf["_N/feat"].dtype == TORCH[dt] and nf["_N/label"].dtype == torch.int64
            x[[0, 1]] = torch.tensor([[1.5] * 24, [3.0000002] * 24])        # floats rounded on write
            assert torch.equal(x[[0, 1]][:, 0], torch.tensor([1.5, 3.0], dtype=TORCH[dt]))
            with pytest.raises(InputError, match="takes floating values, got int64"):
                x[[0]] = np.ones((1, 24), dtype=np.int64)
    finally:
        g32.context.finalize()


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_across_hosts_with_samplers_and_cache(graph, mpirun):
    """6 ranks: 2 virtual hosts of a server, a sampler and a trainer; one partition
    each; the bf16 and the fp16 graph in one launch."""
    _, cfgs = graph
    res = mpirun(6, [sys.executable, JOB, cfgs["float32"], "servers=1,samplers=1,trainers=1", "3", cfgs["bf16"],
                     cfgs["fp16"]], timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    # each trainer's report, read by match: mpirun once joined two ranks' lines into one
    dec = json.JSONDecoder()
    rows = [dec.raw_decode(res.stdout, m.start())[0] for m in re.finditer(r'\{"rank": ', res.stdout)]
    assert sorted(r["dtype"] for r in rows) == sorted(2 * [str(TORCH["bf16"]), str(TORCH["fp16"])]), res.stdout
    for r in rows:
        assert r["remote_rows"] > 2 * r["cache_rows_float32"] > 0               # room for twice the rows
        assert r["cache_rows_half"] == 2 * r["cache_rows_float32"]               # the same bytes
        assert r["cache_bytes"][0] == r["cache_bytes"][1]
        assert r["loader_modes"] == {"auto": ["samplers", True], "thread": ["thread", False]}
