"""The partitioning ranks never import torch (about 170 MB and 1.6 s per process: at 32
ranks, 5 GB of a job that only partitions); the names that need it load on first use
(the partition book's tensors: tests/partition/test_partition_book.py)."""
import pytest

from conftest import modules_loaded
from hpcgnn.comm.mpi import MPI

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1, reason="single-process test (runs in the 1-rank pass)")


@pytest.mark.timeout(120)
def test_the_partition_command_does_not_import_torch():
    code = "import hpcgnn, hpcgnn.cli.main, hpcgnn.cli.partition, hpcgnn.partition.pipeline, hpcgnn.partition"
    assert modules_loaded(code, ["torch"]) == []
    # the lazy names still resolve (and then load torch)
    code += "\nfrom hpcgnn import initialize, NID\nassert callable(initialize) and NID == '_ID'"
    assert "torch" in modules_loaded(code, ["torch"])
