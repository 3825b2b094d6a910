"""DGL's own distributed examples, run unchanged but for their imports
(examples/dgl/, see its README.md): each under ``mpirun -n 4`` on two virtual nodes
of [server, trainer], on a small generated graph with DGL's field names
(``features``, ``labels``; the R-GCN one on a typed MAG-like graph), a few epochs
through the script's own flags.  Each must finish and print an accuracy clearly above
chance (8 balanced classes: 0.125)."""
import os
import re
import sys

import h5py
import pytest

from hpcgnn.datasets import generate_graph
from hpcgnn.partition import partition_graph

#: every test here starts a job of its own (scripts/test.sh --quick leaves them out)
pytestmark = pytest.mark.slow

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples", "dgl")
NUM_CLASSES = 8
CHANCE = 1 / NUM_CLASSES
#: two virtual nodes of two ranks: a server and a trainer each
LAUNCH = {"HPCGNN_RANKS_PER_NODE": "2", "HPCGNN_LAYOUT": "servers=1,samplers=0,trainers=1"}


@pytest.fixture(scope="module")
def dgl_graph(tmp_path_factory):
    """A 4000-node graph partitioned in two, its fields renamed to the names DGL's
    examples read (``features``, ``labels``; the masks keep theirs)."""
    d = tmp_path_factory.mktemp("dglg")
    raw = str(d / "d.h5")
    generate_graph(raw, None, 4000, 10, 32, NUM_CLASSES, seed=1, name="dglg")
    with h5py.File(raw, "r+") as f:
        f.move("nodes/data/feat", "nodes/data/features")
        f.move("nodes/data/label", "nodes/data/labels")
    return partition_graph(raw, str(d / "dparts"), 2)


def _run(mpirun, script, part_config, workdir, *flags):
    """The example under ``mpirun -n 4`` in ``workdir`` with DGL's flags (the
    ip_config file is named, as DGL's launcher passes it, and ignored)."""
    argv = ["--wdir", str(workdir), sys.executable, os.path.join(EXAMPLES, script), "--graph_name", "dglg",
            "--ip_config", "ip_config.txt", "--part_config", part_config, *flags]
    res = mpirun(4, argv, timeout=150, env=LAUNCH)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    return res.stdout


@pytest.mark.timeout(200)
def test_node_classification(mpirun, dgl_graph, tmp_path):
    pytest.importorskip("tqdm")
    out = _run(mpirun, "node_classification.py", dgl_graph, tmp_path,
               "--num_epochs", "5", "--batch_size", "100", "--lr", "0.01")
    # one summary line per trainer (lines of two ranks may share a line of the output)
    acc = [float(a) for a in re.findall(r"Summary of node classification\(GraphSAGE\): GraphName dglg "
                                        r"\| TrainEpochTime\(mean\) [\d.]+ \| TestAccuracy ([\d.]+)", out)]
    assert len(acc) == 2, out
    assert min(acc) > 3 * CHANCE, acc


@pytest.mark.timeout(200)
def test_node_classification_unsupervised(mpirun, dgl_graph, tmp_path):
    pytest.importorskip("tqdm")
    sklearn = pytest.importorskip("sklearn")
    if tuple(int(v) for v in re.findall(r"\d+", sklearn.__version__)[:2]) >= (1, 8):
        pytest.skip("DGL's example calls LogisticRegression(multi_class=...), which scikit-learn 1.8 removed")
    out = _run(mpirun, "node_classification_unsupervised.py", dgl_graph, tmp_path,
               "--num_epochs", "2", "--log_every", "5")
    # the loss of DGL's link objective falls on every trainer
    steps = re.findall(r"\[(\d)\] Epoch (\d+) \| Step (\d+) \| Loss ([\d.]+)", out)
    for rank in ("0", "1"):
        losses = [float(loss) for r, _, _, loss in steps if r == rank]
        assert len(losses) >= 4 and losses[-1] < losses[0], (rank, losses)
    # trainer 0 fits a logistic regression on the embeddings of every node
    acc = re.findall(r"eval acc ([\d.]+); test acc ([\d.]+)", out)
    assert len(acc) == 1, out
    assert min(float(a) for a in acc[0]) > 2 * CHANCE, acc
    # and saves them: torch.save of the embeddings' DistTensor stores its rows
    import torch

    emb = torch.load(tmp_path / "emb.pt")
    assert isinstance(emb, torch.Tensor) and emb.shape == (4000, 16)
    assert bool(torch.isfinite(emb).all()) and emb[1:].abs().sum(1).gt(0).all()


@pytest.fixture(scope="module")
def dgl_mag_graph(tmp_path_factory):
    """A 4000-node MAG-like graph (paper, author, institution, field; features and
    labels on papers only) partitioned in two, ``label`` renamed to DGL's ``labels``."""
    from hpcgnn.datasets import generate_hetero_graph

    d = tmp_path_factory.mktemp("dglmag")
    raw = str(d / "m.h5")
    generate_hetero_graph(raw, None, 4000, 5, 32, NUM_CLASSES, seed=1, name="mag")
    with h5py.File(raw, "r+") as f:
        f.move("nodes/data/label", "nodes/data/labels")
    return partition_graph(raw, str(d / "mparts"), 2)


@pytest.mark.timeout(200)
def test_rgcn_node_classification(mpirun, dgl_mag_graph, tmp_path):
    """DGL's distributed R-GCN: heterogeneous batches, DistEmbedding of the featureless
    types trained by DGL's SparseAdam (``--sparse-embedding --dgl-sparse``)."""
    pytest.importorskip("tqdm")
    argv = ["--wdir", str(tmp_path), sys.executable, os.path.join(EXAMPLES, "rgcn_node_classification.py"),
            "--graph-name", "mag", "--dataset", "ogbn-mag", "--ip-config", "ip_config.txt", "--conf-path",
            dgl_mag_graph, "--n-epochs", "4", "--fanout", "4,4", "--n-bases", "2", "--use-self-loop",
            "--sparse-embedding", "--dgl-sparse"]
    res = mpirun(4, argv, timeout=150, env=LAUNCH)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    out = res.stdout
    # print(a, b) writes a, " " and b apart when unbuffered: two ranks' pieces may interleave
    assert out.count("optimize DGL sparse embedding:") == 2, out
    assert out.count("dict_keys(['author', 'institution', 'field'])") == 2, out
    # both trainers train every epoch; trainer 0 evaluates on every node's predictions
    # .*? : mpirun may join two ranks' lines into one, both are counted
    epochs = re.findall(r"\[(\d)\]Epoch Time\(s\): [\d.]+, .*?#train: (\d+), #input: (\d+)", out)
    assert sorted(r for r, _, _ in epochs) == ["0"] * 4 + ["1"] * 4, out
    acc = [(float(v), float(t)) for v, t in re.findall(r"Val Acc ([\d.]+), Test Acc ([\d.]+)", out)]
    assert len(acc) == 4, out
    assert min(acc[-1]) > 2 * CHANCE, acc
