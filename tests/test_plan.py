"""The scale model's arithmetic and ``hpcgnn plan`` (single process, no timing)."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import clean_mpi_env
from hpcgnn.cli.main import main
from hpcgnn.cli.plan import assumptions
from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph
from hpcgnn.errors import InputError
from hpcgnn.testing import run_job
from hpcgnn.scale_model import (MODEL_PATH, epoch_time, load_model, parse_size, partition_need, partition_time, plan,
                         predict, sampled_per_seed, terms, training_need)

single = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1, reason="single-process test (runs in the 1-rank pass)")
pytestmark = single

# A small coefficient set: every prediction below is exact arithmetic.
MODEL = {"version": 1, "measured": "test", "cores": 2,
         "training": {"batch_size": 100, "fanouts": [25, 10], "layout": "servers=1,samplers=0,trainers=1",
                      "trainers": 2},
         "phases": {"partition_memory": {"coef": {"const": 1000, "edges_per_rank": 40, "nodes": 4}},
                    "partition_time": {"coef": {"const": 2, "edges_per_core": 0.001}},
                    "server_memory": {"coef": {"const": 500, "edges_per_rank": 20, "feature_bytes_per_rank": 1}},
                    "trainer_memory": {"coef": {"const": 300, "feat_dim": 10, "edges_per_rank": 99}},
                    "step_time": {"coef": {"const": 0.5, "feat_dim": 0.01}}}}
G = {"num_nodes": 1000, "num_edges": 20000, "feat_bytes": 1000 * 8 * 4, "feat_dim": 8}


def test_terms_and_predict():
    t = terms(100, 2000, 800, 2, ranks=4, cores=2)
    assert t == {"const": 1.0, "edges_per_rank": 500.0, "nodes_per_rank": 25.0, "feature_bytes_per_rank": 200.0,
                 "nodes": 100.0, "edges": 2000.0, "edges_per_core": 1000.0, "nodes_per_core": 50.0,
                 "feat_dim": 2.0, "ranks_per_core": 2.0, "sampled_per_seed": 20 + 20 * 10}
    assert terms(100, 2000, 800, 2, ranks=4)["edges_per_core"] == 500.0
    assert terms(100, 2000, 800, 2, ranks=4)["ranks_per_core"] == 1.0     # one core per rank: a constant
    assert sampled_per_seed(100, 500) == 5 + 5 * 5              # degree below both fanouts
    assert sampled_per_seed(0, 0) == 0.0
    assert predict({"const": 3, "edges_per_rank": 2}, t) == 1003.0


def test_phase_predictions_are_exact():
    assert partition_need(MODEL, G, 4) == 1000 + 40 * 5000 + 4 * 1000
    assert partition_time(MODEL, G, 4) == pytest.approx(2 + 0.001 * 5000)
    # the trainer's own memory only: none of its per-edge term
    assert training_need(MODEL, G, 2, 3) == 500 + 20 * 10000 + 16000 + 3 * (300 + 10 * 8)
    epoch, steps = epoch_time(MODEL, G, 4, 1000)     # 1000 seeds / (100 x 4 trainers): 3 steps
    assert steps == 3 and epoch == pytest.approx(3 * (0.5 + 0.08))


def test_plan_picks_the_fewest_nodes():
    # partitioning, 2 ranks/node: 2 * (1000 + 4000 + 800000 / (2n)) <= 0.9 * mem
    mem = 100_000
    p = plan(MODEL, G, mem, ranks_per_node=2, train_nodes=1000)
    n = p["partition_nodes"]
    assert 2 * partition_need(MODEL, G, 2 * n) <= 0.9 * mem < 2 * partition_need(MODEL, G, 2 * (n - 1))
    t = p["training_nodes"]
    assert training_need(MODEL, G, t, 1) <= 0.9 * mem < training_need(MODEL, G, t - 1, 1)
    assert p["parts"] == t and p["training_fits"]
    assert p["partition_s"] == round(partition_time(MODEL, G, 2 * n), 1)
    assert p["epoch_s"] == round(epoch_time(MODEL, G, t, 1000)[0], 1)
    forced = plan(MODEL, G, mem, ranks_per_node=2, parts=1, train_nodes=1000)
    assert forced["parts"] == 1 and not forced["training_fits"]


def test_less_memory_needs_more_nodes():
    counts = [plan(MODEL, G, m, ranks_per_node=2) for m in (400_000, 200_000, 100_000, 50_000)]
    for a, b in zip(counts, counts[1:]):
        assert b["partition_nodes"] >= a["partition_nodes"] and b["training_nodes"] >= a["training_nodes"]
    assert counts[-1]["partition_nodes"] > counts[0]["partition_nodes"]
    assert counts[-1]["training_nodes"] > counts[0]["training_nodes"]
    # the per-rank constant alone is more than the node holds: nothing fits
    p = plan(MODEL, G, 900, ranks_per_node=2)
    assert p["partition_nodes"] is None and p["training_nodes"] is None and "partition_s" not in p


def test_parse_size():
    assert parse_size("64G") == parse_size("64GB") == parse_size("64GiB") == parse_size("64 g") == 64 * 2**30
    assert parse_size("1.5T") == int(1.5 * 2**40) and parse_size("4096") == 4096 and parse_size("2k") == 2048
    for bad in ("", "64X", "G", "-1G", "0", "64iB"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_shipped_model_is_complete():
    m = load_model()
    assert set(m["phases"]) >= {"partition_memory", "partition_time", "server_memory", "trainer_memory",
                                "step_time"}
    names = set(terms(1, 1, 1, 1, 1))
    for ph in m["phases"].values():
        assert set(ph["coef"]) <= names and all(c >= 0 for c in ph["coef"].values())
    assert m["training"]["batch_size"] > 0


def hpcgnn(*args):
    """``hpcgnn plan ARGS`` in this process (the command's own entry point): its exit
    status and output, as a child process would give them."""
    return run_job(main, ["plan", *args], comm=MPI.COMM_SELF)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    raw = str(d / "g.h5")
    generate_graph(raw, None, 2000, 10, 16, 4, seed=1, train_frac=0.5, val_frac=0.2, test_frac=0.3)
    model = str(d / "model.json")
    with open(model, "w") as f:
        json.dump(MODEL, f)
    return raw, model


@pytest.mark.slow
def test_cli_on_a_raw_file(files):
    raw, model = files
    res = hpcgnn(raw, "--node-memory", "1M", "--ranks-per-node", "2", "--model", model, "--json")
    assert res.returncode == 0, res.stderr
    p = json.loads(res.stdout)
    g = p["graph"]
    assert g["num_nodes"] == 2000 and g["feat_dim"] == 16 and g["feat_bytes"] == 2000 * 16 * 4
    assert p["train_nodes"] == 1000                  # 0.5 of the nodes, from the generator's attributes
    expect = plan(MODEL, {k: g[k] for k in ("num_nodes", "num_edges", "feat_bytes", "feat_dim")}, 2**20,
                  ranks_per_node=2, train_nodes=1000)
    for k in ("partition_nodes", "training_nodes", "partition_s", "epoch_s", "serve_bytes_per_node"):
        assert p[k] == expect[k], k
    assert any("train_frac" in a for a in p["assumptions"])
    half = json.loads(hpcgnn(raw, "--node-memory", "1M", "--feat-dtype", "bf16", "--model", model,
                             "--json").stdout)
    assert half["graph"]["feat_bytes"] == 2000 * 16 * 2
    text = hpcgnn(raw, "--node-memory", "1M", "--model", model)
    assert text.returncode == 0 and "partition:" in text.stdout and "assumptions:" in text.stdout


@pytest.mark.slow
def test_cli_without_a_file_and_more_memory_fewer_nodes(files):
    _, model = files
    args = ["--num-nodes", "1000", "--num-edges", "20000", "--feat-dim", "8", "--ranks-per-node", "2",
            "--model", model, "--json"]
    small, big = (json.loads(hpcgnn("--node-memory", m, *args).stdout) for m in ("50K", "400K"))
    assert small["partition_nodes"] > big["partition_nodes"] and small["training_nodes"] > big["training_nodes"]
    assert small["train_nodes"] == 1000


@pytest.mark.parametrize("args, names", [
    (["/nonexistent/g.h5", "--node-memory", "64G"], "/nonexistent/g.h5"),
    (["RAW", "--node-memory", "64X"], "--node-memory"),
    (["--num-nodes", "10", "--node-memory", "64G"], "--num-edges"),
    (["RAW", "--node-memory", "64G", "--ranks-per-node", "0"], "--ranks-per-node"),
    (["RAW", "--node-memory", "64G", "--model", "/nonexistent/m.json"], "/nonexistent/m.json"),
])
def test_bad_input_is_named(files, args, names):
    raw, _ = files
    with pytest.raises(InputError, match=re.escape(names)):
        hpcgnn(*[raw if a == "RAW" else a for a in args])


@pytest.mark.slow
def test_bad_input_gives_one_line():
    """The command's process: one line on stderr, no traceback (each error's wording: above)."""
    res = subprocess.run([sys.executable, "-m", "hpcgnn", "plan", "/nonexistent/g.h5", "--node-memory", "64G"],
                         capture_output=True, text=True, env=clean_mpi_env(), timeout=120)
    assert res.returncode == 1
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "/nonexistent/g.h5" in lines[0] and "Traceback" not in res.stderr, res.stderr


def test_model_path_is_installed_with_the_package():
    assert os.path.dirname(MODEL_PATH).endswith(os.path.join("hpcgnn", "data"))
    setup = open(os.path.join(os.path.dirname(__file__), os.pardir, "setup.py")).read()
    assert '"data/*.json"' in setup


def test_the_assumptions_quote_the_held_out_error_of_the_shipped_model():
    """``plan``'s partition-time caveat comes from the model's held-out check, not from
    text that goes stale when the model is refitted."""
    model = load_model(MODEL_PATH)
    lo, hi = model["heldout_partition_time_error"]
    line = next(s for s in assumptions(model, "--train-nodes") if s.startswith("partition time"))
    assert f"{round(abs(hi) * 100)}" in line and f"{round(abs(lo) * 100)}" in line, line
    worded = {(-0.43, -0.2): "20-43% low", (-0.1, 0.3): "10% low to 30% high", (0.05, 0.05): "5% high"}
    for (a, b), words in worded.items():
        line = next(s for s in assumptions({**model, "heldout_partition_time_error": [a, b]}, "x")
                    if s.startswith("partition time"))
        assert words in line, (words, line)
