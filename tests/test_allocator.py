"""hpcgnn.allocator: malloc keeps freed memory for the next training step."""
import os
import platform
import subprocess
import sys

import pytest

from conftest import ROOT

#: every test here starts a job of its own (scripts/test.sh --quick leaves them out)
pytestmark = pytest.mark.slow

CODE = "from hpcgnn.allocator import keep_freed_memory as k; print(k(), k())"


def _run(env_extra):
    env = dict(os.environ, PYTHONPATH=ROOT, **env_extra)
    return subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_keep_freed_memory_on_glibc_and_opt_out():
    r = _run({})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]            # accepted, idempotent
    r = _run({"HPCGNN_KEEP_FREED_MEMORY": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]
