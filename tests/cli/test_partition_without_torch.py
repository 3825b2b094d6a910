"""The partitioning ranks never import torch (about 170 MB and 1.6 s per process: at 32
ranks, 5 GB of a job that only partitions); the names that need it load on first use
(the partition book's tensors: tests/partition/test_partition_book.py)."""
import subprocess
import sys

import pytest

from conftest import clean_mpi_env
from hpcgnn.comm.mpi import MPI

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1, reason="single-process test (runs in the 1-rank pass)")


@pytest.mark.timeout(120)
def test_the_partition_command_does_not_import_torch():
    code = ("import sys, hpcgnn, hpcgnn.cli.main, hpcgnn.cli.partition, hpcgnn.partition.pipeline, "
            "hpcgnn.partition; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')); "
            "from hpcgnn import initialize, NID; print(callable(initialize), NID, 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=clean_mpi_env())
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:2] == ["[]", "True _ID True"], res.stdout

