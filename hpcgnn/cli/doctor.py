"""``hpcgnn doctor``: is this machine (and this launch) ready for hpcgnn?

Run it alone for a quick check, or under ``mpirun -n 2`` (``srun -n 2``) for a real
two-rank probe of RMA and shared-memory windows and of a collective parallel-HDF5
write.  Every check runs on every rank; rank 0 prints the report.  Exit code 1 when
something required is missing, with the fix in words.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

from ..comm import probes
from ..comm.rma import hugepages
from ..comm.context import host_assignment
from ..comm.layout import Layout, describe_plan, plan_roles
from ..comm.collectives import allreduce
from ..comm.mpi import MPI, library_version, thread_level


def add_arguments(p):
    p.add_argument("--layout", default=None, help="role layout to plan, e.g. servers=1,samplers=1,trainers=2")
    p.add_argument("--ranks-per-node", type=int, default=None, help="virtual node size (testing on one machine)")
    p.add_argument("--tmpdir", default=None, help="directory for the parallel-HDF5 probe (default: $TMPDIR)")


def _check(name, fn, required=True):
    try:
        ok, detail, fix = fn()
    except Exception as e:  # noqa: BLE001 - a probe that raises is a failed check
        ok, detail, fix = False, f"{type(e).__name__}: {e}", "see the error above"
    return {"name": name, "ok": bool(ok), "detail": detail, "fix": fix, "required": required}


def _mpi():
    vendor, ver = MPI.get_vendor()
    std = "%d.%d" % MPI.Get_version()
    detail = f"{library_version()} (vendor {vendor} {'.'.join(map(str, ver))}, MPI {std}, " \
             f"{MPI.COMM_WORLD.Get_size()} rank(s), thread level {thread_level()})"
    return MPI.Get_version() >= (3, 0), detail, "hpcgnn needs an MPI-3 library (one-sided, shared windows)"


def _h5py(tmpdir):
    def check():
        import h5py   # here: a missing or serial h5py is a failed check, not an import error

        if not h5py.get_config().mpi:
            return False, f"h5py {h5py.__version__} built without MPI", \
                "rebuild h5py: CC=mpicc HDF5_MPI=ON HDF5_DIR=<parallel hdf5> pip install --no-build-isolation " \
                "--no-binary=h5py h5py (scripts/setup.sh does it)"
        nbytes = probes.parallel_hdf5_probe(MPI.COMM_WORLD, tmpdir)
        return True, f"h5py {h5py.__version__}, HDF5 {h5py.version.hdf5_version}, collective write+read of " \
                     f"{nbytes} bytes ok", ""
    return check


def _parmetis():
    # imported here: a broken build is one failed check in the report, not an import error
    from .. import _ext
    from ..partition import part_kway   # with _ext above: a broken build is one failed check

    lib = probes.loaded_library("libparmetis")
    comm = MPI.COMM_WORLD
    part = probes.parmetis_probe(comm, part_kway)
    try:
        from .. import _buildinfo   # written by the build; absent in a source tree
        header = _buildinfo.PARMETIS_HEADER
    except ImportError:
        header = "?"
    return part, f"{lib or 'libparmetis'} (header {header}), idx_t {8 * _ext.IDX_T_BYTES}-bit, " \
                  f"real_t {8 * _ext.REAL_T_BYTES}-bit; 2-way split of two cliques: cut 0", \
        "install libparmetis-dev (Debian non-free) or load a ParMETIS module, then pip install -e ."


def _torch():
    import torch   # here: a missing torch is a failed check, not an import error

    cuda = torch.cuda.is_available()
    import torch.distributed as dist   # torch's distributed package loaded when used

    parts = [f"torch {torch.__version__}", f"CUDA {'yes (' + str(torch.cuda.device_count()) + ' GPU)' if cuda else 'no'}",
             f"gloo {'yes' if dist.is_gloo_available() else 'no'}", f"NCCL {'yes' if dist.is_nccl_available() and cuda else 'no'}"]
    try:
        import torch_geometric   # PyG loaded by the check that uses it

        parts.append(f"torch_geometric {torch_geometric.__version__}")
    except ImportError:
        parts.append("torch_geometric missing")
    return True, ", ".join(parts), "pip install torch torch_geometric"


def _gpu_aware():
    aware, how = probes.gpu_aware()
    return aware == "yes", f"{aware}: {how}; " + ("other hosts' rows are read straight into GPU memory"
                                                  if aware == "yes" else "other hosts' rows reach a GPU through "
                                                  "pinned host memory"), \
        "optional: an MPI built with CUDA/ROCm support (e.g. Open MPI with UCX and CUDA)"


def run(args) -> int:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    tmpdir = args.tmpdir or os.environ.get("TMPDIR") or tempfile.gettempdir()
    checks = [
        _check("MPI", _mpi),
        _check("RMA windows (Win.Allocate, Lock_all, Get)", lambda: probes.rma_probe(comm)),
        _check("shared-memory windows (Win.Allocate_shared)", lambda: probes.shared_probe(comm)),
        _check("integer fetch atomics (Get_accumulate)", lambda: probes.fetch_probe(comm), required=False),
        _check("parallel HDF5 (h5py, driver=mpio)", _h5py(tmpdir)),
        _check("ParMETIS", _parmetis),
        _check("torch", _torch),
        _check("GPU-aware MPI (remote rows straight into GPU memory)", _gpu_aware, required=False),
        _check("huge pages for window memory", hugepages.status, required=False),
    ]
    # Every rank ran every probe; a check is green only if it is green everywhere.
    oks = allreduce(comm, [c["ok"] for c in checks], "min", dtype=np.int32)
    required_ok = all(bool(ok) or not c["required"] for ok, c in zip(oks, checks))
    local_ok = comm.gather([c["ok"] for c in checks], root=0)
    try:
        host_of = host_assignment(comm, args.ranks_per_node)
        sizes = [host_of.count(k) for k in range(max(host_of) + 1)]
        lay = Layout.parse(args.layout if args.layout is not None else os.environ.get("HPCGNN_LAYOUT"))
        plan_text = describe_plan(plan_roles(lay, sizes))
        plan_ok = True
    except Exception as e:  # noqa: BLE001 - reported, not raised
        lay, plan_text, plan_ok = args.layout, f"{type(e).__name__}: {e}", False
    if rank == 0:
        for i, c in enumerate(checks):
            mark = "ok " if oks[i] else ("MISSING" if c["required"] else "warn")
            detail = c["detail"]
            failing = [r for r, flags in enumerate(local_ok) if not flags[i]]
            if failing and comm.Get_size() > 1:
                detail += f" (failed on rank(s) {failing})"
            print(f"[{mark}] {c['name']}: {detail}")
            if not oks[i] and c["fix"]:
                print(f"        fix: {c['fix']}")
        print(f"[{'ok ' if plan_ok else 'MISSING'}] role layout '{lay}' for this launch:")
        for line in plan_text.splitlines():
            print(f"        {line}")
        healthy = required_ok and plan_ok
        print("hpcgnn doctor: all green" if healthy else "hpcgnn doctor: something required is missing (see above)")
    healthy = required_ok and plan_ok
    return 0 if healthy else 1
