"""Nothing listens wider or writes wider than it must (issue #29):

* PyTorch Geometric's generated ``propagate``/``edge_updater`` modules go to a private
  directory of each process (hpcgnn/pyg_tmp.py), removed when it ends; a whole job
  that ends well, and one whose trainer fails, leave no ``torch_geometric*.py`` in
  ``$TMPDIR`` (tests/e2e/test_served_launch.py: its two launches check it).
* Where trainer 0's rendezvous store listens (hpcgnn/comm/torch_dist.py
  ``choose_address``), and, under ``mpirun --mca btl self,vader`` (the recipe of
  docs/install.md for one host), that no rank of the job listens on anything but
  loopback (tests/e2e/test_hygiene_mpi.py in its strict mode).
"""
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, clean_mpi_env
from harness import pyg_leftovers
from hpcgnn.comm import torch_dist

pytest.importorskip("torch_geometric")


def _python(code, tmp, timeout=120):
    env = clean_mpi_env({"TMPDIR": str(tmp)})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


# -- PyG's generated modules --------------------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.slow
def test_pyg_modules_go_to_a_private_directory_removed_at_exit(tmp_path):
    res = _python("""
        import glob, os, stat, tempfile
        import hpcgnn.pyg_tmp as pt
        pt.use_private_tmpdir()                   # before PyG is imported: the import hook
        import torch
        from torch_geometric.nn import GATConv, MessagePassing, SAGEConv

        class Mean(MessagePassing):
            def __init__(self):
                super().__init__(aggr="mean")
            def forward(self, x, edge_index):
                return self.propagate(edge_index, x=x)

        x, ei = torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])
        assert torch.allclose(Mean()(x, ei)[1], x[0])     # PyG's behaviour is unchanged
        SAGEConv(3, 2)(x, ei), GATConv(3, 2)(x, ei)
        d = pt.private_dir(create=False)
        assert d and os.path.dirname(d) == tempfile.gettempdir(), d
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
        names = sorted(os.listdir(d))
        assert any("SAGEConv_propagate" in n for n in names), names
        assert any("GATConv_edge_updater" in n for n in names), names
        assert not glob.glob(os.path.join(tempfile.gettempdir(), "torch_geometric*.py"))
        with tempfile.NamedTemporaryFile(suffix=".x", delete=False) as f:  # anyone else's: as before
            pass
        assert os.path.dirname(f.name) == tempfile.gettempdir()
        os.unlink(f.name)
        print("private", d)
    """, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "private " + str(tmp_path) in res.stdout
    assert pyg_leftovers(tmp_path) == ([], [])


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_already_imported_pyg_is_patched_and_gone_processes_are_swept(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = __import__("socket").gethostname()
    stale = tmp_path / f"hpcgnn-pyg-{host}-{dead.pid}-abcd1234"
    alive = tmp_path / f"hpcgnn-pyg-{host}-{os.getpid()}-abcd1234"       # this test's process: alive
    other = tmp_path / f"hpcgnn-pyg-otherhost-{dead.pid}-abcd1234"         # another host's: not ours to judge
    for d in (stale, alive, other):
        d.mkdir()
        (d / "torch_geometric.nn.conv.x_X_propagate_q.py").write_text("")
    res = _python("""
        import os
        import torch
        from torch_geometric.nn import SAGEConv     # imported first: patched in place
        import hpcgnn.pyg_tmp as pt
        pt.use_private_tmpdir()
        SAGEConv(3, 2)
        d = pt.private_dir(create=False)
        assert d and any("SAGEConv_propagate" in n for n in os.listdir(d))
        print(sorted(os.listdir(os.path.dirname(d))))
    """, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not stale.exists()
    assert alive.exists() and other.exists()
    files, dirs = pyg_leftovers(tmp_path)
    assert sorted(dirs) == sorted([str(alive), str(other)])


# -- where the rendezvous store listens ---------------------------------------------

def test_one_host_binds_loopback():
    assert torch_dist.choose_address(True, "10.1.2.3", ["10.1.2.4"]) == ("127.0.0.1", "127.0.0.1",
                                                                         "all trainers on one host")


def test_several_hosts_bind_the_hostname_address_when_it_is_local(monkeypatch):
    monkeypatch.setattr(torch_dist, "_bindable", lambda a: a == "10.1.2.3")
    bind, adv, _ = torch_dist.choose_address(False, "10.1.2.3", ["10.1.2.4", "10.1.2.5"])
    assert bind == adv == "10.1.2.3"


def test_a_loopback_hostname_falls_back_to_the_route_towards_the_others(monkeypatch):
    # Debian's /etc/hosts maps the hostname to 127.0.1.1: that address reaches no other host
    monkeypatch.setattr(torch_dist, "_bindable", lambda a: a != "0.0.0.0")
    monkeypatch.setattr(torch_dist, "_route_source", lambda peer: "10.9.0.1" if peer.startswith("10.9.") else None)
    bind, adv, why = torch_dist.choose_address(False, "127.0.1.1", ["10.9.0.2", "10.9.0.3", None])
    assert bind == adv == "10.9.0.1" and "reaches" in why
    # the others reached through different interfaces: no single address serves them all
    monkeypatch.setattr(torch_dist, "_route_source", lambda peer: {"10.9.0.2": "10.9.0.1"}.get(peer, "10.8.0.1"))
    bind, adv, _ = torch_dist.choose_address(False, "127.0.1.1", ["10.9.0.2", "10.8.0.2"])
    assert bind == "0.0.0.0" and adv != "127.0.1.1"


def test_hpcgnn_dist_addr_is_bound_when_local_else_advertised_only():
    assert torch_dist.choose_address(False, "10.1.2.3", [], explicit="127.0.0.1")[:2] == ("127.0.0.1",
                                                                                         "127.0.0.1")
    bind, adv, why = torch_dist.choose_address(True, None, [], explicit="192.0.2.250")  # not this host's
    assert (bind, adv) == ("0.0.0.0", "192.0.2.250") and "not an address of this host" in why


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_no_rank_listens_beyond_loopback_with_the_documented_mca(mpirun):
    """With Open MPI's TCP BTL off (one host: docs/install.md), every listening socket of
    every rank is on loopback, before and after the process groups are up."""
    res = mpirun(2, [sys.executable, "-m", "pytest", "--with-mpi", "-q", "--color=no", "-p", "no:cacheprovider",
                     os.path.join(ROOT, "tests", "e2e", "test_hygiene_mpi.py")],
                 timeout=120, env={"HPCGNN_TEST_STRICT_LISTEN": "1"}, mca=[("btl", "self,vader")])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    # one summary per rank; the two ranks' lines may interleave on one line, so count matches
    passed = re.findall(r"\d+ passed", res.stdout)
    assert len(passed) == 2 and not re.search(r"\d+ (skipped|failed|error)", res.stdout), res.stdout[-3000:]


# -- the sbatch scripts' temporary directory and cleanup ------------------------------

def _tmp_block(name):
    """The lines of slurm/NAME.sbatch that make the job's TMPDIR and clean up at exit."""
    lines = open(os.path.join(ROOT, "slurm", f"{name}.sbatch")).read().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("# Temporary files:"))
    end = next(i for i, ln in enumerate(lines) if ln == "trap hpcgnn_cleanup EXIT")
    return "\n".join(lines[start:end + 1])


RANKS = r"""
import sys, time
from mpi4py import MPI
c = MPI.COMM_WORLD
c.sendrecv(c.rank, dest=(c.rank + 1) % c.size, source=(c.rank - 1) % c.size)   # peers' segments mapped too
c.Barrier()
segs = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "vader_segment" in ln})
for mine in c.gather(segs, root=0) or []:     # one writer: two ranks' lines could interleave
    print("segments", " ".join(mine), flush=True)
time.sleep(120)                 # sleeper-MARK
"""


@pytest.mark.timeout(120)
def test_sbatch_cleanup_removes_what_a_killed_mpirun_leaves(tmp_path):
    """The four sbatch scripts share one block: a private TMPDIR, and an EXIT trap that
    removes it and the /dev/shm files of an mpirun killed with SIGKILL (which Open MPI
    leaves behind: its session directory in TMPDIR, vader segments in /dev/shm)."""
    block = _tmp_block("generate")
    for name in ("doctor", "partition", "train"):
        assert _tmp_block(name) == block, name
    mark = f"hygiene{os.getpid()}"
    script = (f"set -euo pipefail\nexport TMPDIR={tmp_path}\n{block}\n" + f"""
echo "tmpdir $TMPDIR"
mpirun -n 2 {sys.executable} -c "$RANKS" > "$TMPDIR/ranks.out" 2>&1 &
mp=$!
for i in $(seq 1 300); do [ "$(grep -c '^segments /' "$TMPDIR/ranks.out")" -ge 2 ] && break; sleep 0.2; done
kill -9 $mp
wait $mp || true
pkill -9 -f "sleeper-[{mark[0]}]{mark[1:]}" || true       # the orphaned ranks (a job's end kills them)
for i in $(seq 1 300); do pgrep -f "sleeper-[{mark[0]}]{mark[1:]}" >/dev/null || break; sleep 0.2; done
cat "$TMPDIR/ranks.out"
for s in $(sed -n 's/^segments //p' "$TMPDIR/ranks.out"); do [ -e "$s" ] && echo "left $s"; done
ls -d "$TMPDIR"/ompi.* | sed 's/^/session /'
""")
    env = clean_mpi_env({"RANKS": RANKS.replace("MARK", mark)})
    res = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=110)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    private = next(ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith("tmpdir "))
    assert os.path.dirname(private) == str(tmp_path) and os.path.basename(private).startswith("hpcgnn-")
    left = [ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith("left ")]
    assert left, out                          # the killed mpirun did leave segments ...
    assert any(ln.startswith("session " + private) for ln in out.splitlines()), out    # ... and a session dir
    assert not [s for s in left if os.path.exists(s)], left     # ... and the trap removed them
    assert not os.path.exists(private)
    assert os.listdir(tmp_path) == []
