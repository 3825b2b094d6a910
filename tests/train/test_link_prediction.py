"""Link prediction (examples/link_prediction.py): bad options are refused naming the
closest one (also from the script's ``main``, before any role is set up),
held-out edges and evaluation negatives are pure functions of the edge id.  The
trained model's ranking and a bitwise resume: whole jobs in the 4-rank pass
(tests/train/test_link_prediction_mpi.py)."""
import numpy as np
import pytest

from hpcgnn.errors import InputError
from hpcgnn.testing import run_job
from hpcgnn.train.link_prediction import HeldOut, eval_negatives, main, parse_args

pytest.importorskip("torch_geometric")


def test_bad_options_name_the_closest_one(tmp_path):
    with pytest.raises(InputError, match="unknown option '--emb-dims'.*did you mean '--emb-dim'"):
        parse_args(["--part-config", "x.json", "--emb-dims", "8"])
    toml = tmp_path / "c.toml"
    toml.write_text('part_config = "x.json"\nnum_neg = 3\n')
    with pytest.raises(InputError, match="c.toml: unknown setting 'num_neg'.*'num_negs'"):
        parse_args(["--config", str(toml)])
    with pytest.raises(InputError, match="scorer must be one of mlp, dot, got 'cosine'"):
        parse_args(["--part-config", "x.json", "--scorer", "cosine"])
    with pytest.raises(InputError, match="val_frac"):
        parse_args(["--part-config", "x.json", "--val-frac", "0.5", "--test-frac", "0.5"])
    cfg = parse_args(["--part-config", "x.json", "--num-negs", "4", "--fanouts", "3,2"])
    assert cfg.num_negs == 4 and cfg.num_layers == 2 and cfg.eval_negatives == 50
    # the script itself ends before any role is set up, with the message on stderr
    res = run_job(main, ["--part-config", "x.json", "--eval-negative", "9"])
    assert res.returncode == 2
    assert "unknown option '--eval-negative' (did you mean '--eval-negatives'?)" in res.stderr, res.stderr


class _Edges:
    """What HeldOut.masks reads of a graph."""

    def __init__(self, src, dst):
        self.src, self.dst = src, dst

    def num_edges(self):
        return len(self.src)

    def find_edges(self, ids):
        return self.src[ids], self.dst[ids]


def test_held_out_edges_and_eval_negatives_are_pure_functions_of_the_id():
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 5000, 100_000), rng.integers(0, 5000, 100_000)
    src[-300:], dst[-300:] = src[:300], dst[:300]            # parallel copies
    src[-600:-300], dst[-600:-300] = dst[300:600], src[300:600]   # reverses
    g = _Edges(src, dst)
    h = HeldOut(0.05, 0.1, 0)
    m = h.masks(g, chunk=7_777)
    assert not (m["train"] & m["val"]).any() and not (m["train"] & m["test"]).any()
    assert (m["train"] | m["val"] | m["test"]).all()
    assert abs(m["val"].mean() - 0.05) < 0.005 and abs(m["test"].mean() - 0.1) < 0.005
    assert np.array_equal(h.held(src, dst), ~m["train"])
    for k in ("train", "val", "test"):          # a copy or a reverse of an edge is in its set
        assert np.array_equal(m[k][-300:], m[k][:300]) and np.array_equal(m[k][-600:-300], m[k][300:600])
    assert not np.array_equal(HeldOut(0.05, 0.1, 1).masks(g)["test"], m["test"])
    e = np.array([5, 17, 123456])
    n1, n2 = eval_negatives(e, 50, 3000, 0), eval_negatives(e[::-1], 50, 3000, 0)[::-1]
    assert np.array_equal(n1, n2) and n1.shape == (3, 50) and n1.min() >= 0 and n1.max() < 3000
