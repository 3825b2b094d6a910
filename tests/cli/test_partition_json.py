"""``hpcgnn partition --json`` reports the graph ParMETIS partitioned after
``--coarsen lp`` (issue 42, item 4), and nothing of it without coarsening."""
import json
import os

import pytest

from hpcgnn.cli.main import main
from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph
from hpcgnn.testing import run_job

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1, reason="single-process test (runs in the 1-rank pass)")


@pytest.mark.timeout(120)
def test_the_coarse_graph_is_in_the_summary(tmp_path):
    raw = str(tmp_path / "g.h5")
    generate_graph(raw, None, 6000, 8, 2, 4, seed=3)
    got = {}
    for coarsen in ("lp", "none"):
        job = run_job(main, ["partition", raw, "-o", str(tmp_path / coarsen), "-k", "2", "--coarsen", coarsen,
                             "--json"], comm=MPI.COMM_SELF)
        assert job.returncode == 0, job.stderr
        got[coarsen] = json.loads(job.stdout.strip().splitlines()[-1])
    lp = got["lp"]
    assert 0 < lp["coarse_nodes"] < 6000 and lp["coarse_edges"] > 0
    assert lp["coarsening_levels"][-1]["clusters"] == lp["coarse_nodes"]
    assert "coarse_nodes" not in got["none"] and os.path.exists(got["none"]["config"])
