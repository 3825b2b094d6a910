"""Small real probes of the MPI features hpcgnn relies on (used by ``hpcgnn doctor``).

Each probe is collective over the communicator it is given and returns
``(ok, detail, fix)``.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np
from mpi4py.util import dtlib

from ..io.h5 import open_mpio
from .collectives import all_min
from .mpi import MPI


def rma_probe(comm):
    """Each rank exposes 16 int64 in a ``Win.Allocate`` window; everyone ``Get``s its
    right neighbour's values under a passive-target ``Lock_all`` epoch."""
    rank, size = comm.Get_rank(), comm.Get_size()
    n = 16
    win = MPI.Win.Allocate(n * 8, 8, comm=comm)
    try:
        mine = np.frombuffer(win.tomemory(), dtype=np.int64, count=n)
        mine[:] = rank * 1000 + np.arange(n)
        comm.Barrier()
        target = (rank + 1) % size
        got = np.empty(n // 2, dtype=np.int64)
        idx = MPI.INT64_T.Create_indexed_block(1, list(range(0, n, 2))).Commit()
        win.Lock_all()
        win.Get([got, MPI.INT64_T], target, [0, 1, idx])
        win.Flush(target)
        win.Unlock_all()
        idx.Free()
        comm.Barrier()
        ok = bool(np.array_equal(got, target * 1000 + np.arange(0, n, 2)))
    finally:
        win.Free()
    return ok, f"indexed-block Get from rank {(rank + 1) % size} " + ("matched" if ok else "returned wrong data"), \
        "the MPI library's one-sided (osc) component is broken; try another MPI or --mca osc ^ucx"


_FETCH_OK: dict = {}


def fetch_ok(comm, dtype) -> bool:
    """Collective over ``comm``: whether ``Get_accumulate`` through a ``Win.Create``
    window of ``comm`` returns the target's old values of ``dtype`` (remembered per
    dtype and communicator size, so every rank probes the same times).  Open MPI
    4.1's osc rdma over its shared-memory transport applies integer updates but
    returns wrong old values; floats are right."""
    dt = np.dtype(dtype)
    key = (dt.str, comm.Get_size())
    if key not in _FETCH_OK:
        rank, size = comm.Get_rank(), comm.Get_size()
        elem = dtlib.from_numpy_dtype(dt)
        mem = ((np.arange(4) + 7 * rank + 1) % 100).astype(dt)
        target = (rank + 1) % size
        got = np.zeros(2, dtype=dt)
        win = MPI.Win.Create(mem, dt.itemsize, comm=comm)
        try:
            win.Lock_all()
            win.Get_accumulate([np.zeros(2, dtype=dt), 2, elem], [got, 2, elem], target, [1, 2, elem], MPI.SUM)
            win.Flush(target)
            win.Unlock_all()
        finally:
            win.Free()
        ok = np.array_equal(got, ((np.arange(1, 3) + 7 * target + 1) % 100).astype(dt))
        _FETCH_OK[key] = bool(all_min(comm, int(ok)))
    return _FETCH_OK[key]


def fetch_probe(comm):
    """:func:`fetch_ok` for int64, as a doctor check."""
    ok = fetch_ok(comm, np.int64)
    return ok, "integer Get_accumulate through Win.Create windows " + \
        ("returns the old values" if ok else "returns wrong old values (osc rdma?)"), \
        "get_accumulate on integer tables across hosts will be refused; try --mca osc sm,ucx or --mca osc sm,pt2pt"


def shared_probe(comm):
    """Ranks on one node allocate a shared window; each reads its neighbour's segment
    directly through ``Shared_query`` memory."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        lrank, lsize = node.Get_rank(), node.Get_size()
        win = MPI.Win.Allocate_shared(8 * 8, 8, comm=node)
        try:
            mine = np.frombuffer(win.tomemory(), dtype=np.int64, count=8)
            mine[:] = lrank + 7
            win.Fence()
            other = (lrank + 1) % lsize
            buf, _ = win.Shared_query(other)
            theirs = np.frombuffer(buf, dtype=np.int64, count=8)
            ok = bool(np.all(theirs == other + 7))
            win.Fence()
        finally:
            win.Free()
    finally:
        node.Free()
    return ok, f"{lsize} rank(s) on this node read each other's segments", \
        "the MPI library lacks MPI-3 shared-memory windows"


def parallel_hdf5_probe(comm, tmpdir: str) -> int:
    """Collective write of one row per rank to one file with ``driver='mpio'``, read back."""
    rank, size = comm.Get_rank(), comm.Get_size()
    path = None
    if rank == 0:
        path = os.path.join(tmpdir, f"hpcgnn-doctor-{os.getpid()}.h5")
    path = comm.bcast(path, root=0)
    try:
        with open_mpio(path, "w", comm) as f:
            d = f.create_dataset("rows", (size, 4), dtype="i8")
            with d.collective:
                d[rank] = np.arange(4) + 10 * rank
        with open_mpio(path, "r", comm) as f:
            row = f["rows"][(rank + 1) % size]
        if not np.array_equal(row, np.arange(4) + 10 * ((rank + 1) % size)):
            raise RuntimeError("parallel HDF5 read back different data")
    finally:
        comm.Barrier()
        if rank == 0 and os.path.exists(path):
            os.remove(path)
    return size * 32


def parmetis_probe(comm, part_kway) -> bool:
    """Partition two disconnected 4-cliques, spread over the ranks, into 2 parts: the
    cut must be zero and the parts balanced."""
    size, rank = comm.Get_size(), comm.Get_rank()
    n = max(8, size)
    # vertices 0..n/2-1 form one clique, the rest the other
    half = n // 2
    vtxdist = np.array([r * n // size for r in range(size + 1)])
    lo, hi = vtxdist[rank], vtxdist[rank + 1]
    xadj, adj = [0], []
    for v in range(lo, hi):
        group = range(0, half) if v < half else range(half, n)
        adj.extend(u for u in group if u != v)
        xadj.append(len(adj))
    part = part_kway(comm, vtxdist, np.array(xadj), np.array(adj, dtype=np.int64), nparts=2)
    allp = np.concatenate(comm.allgather(part))
    return bool(len(set(allp[:half])) == 1 and len(set(allp[half:])) == 1 and allp[0] != allp[-1])


def loaded_library(name: str) -> str | None:
    """Path of a shared library loaded into this process (Linux), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if name in line:
                    return line.split()[-1]
    except OSError:
        pass
    return None


def gpu_aware() -> tuple[str, str]:
    """Local: whether the MPI library reads and writes GPU memory itself (CUDA-aware):
    ``("yes"|"no"|"unknown", how it was found)``.  Asks the library's own extension
    where it has one: Open MPI's ``MPIX_Query_cuda_support`` (and ``..._rocm_...``),
    MPICH's ``MPIX_GPU_query_support``; a library with neither is ``unknown``."""
    try:
        lib = ctypes.CDLL(MPI.__file__)        # mpi4py's module: symbol lookup covers its MPI library
    except OSError as e:
        return "unknown", f"could not open the MPI library ({e})"
    for sym, what in (("MPIX_Query_cuda_support", "CUDA"), ("MPIX_Query_rocm_support", "ROCm")):
        fn = getattr(lib, sym, None)
        if fn is not None:
            fn.restype = ctypes.c_int
            if fn():
                return "yes", f"{sym}() = 1 ({what})"
    if getattr(lib, "MPIX_Query_cuda_support", None) is not None:
        return "no", "MPIX_Query_cuda_support() = 0 (built with the CUDA extension, support off at run time)"
    fn = getattr(lib, "MPIX_GPU_query_support", None)
    if fn is not None:
        flag = ctypes.c_int(0)
        for code, what in ((0, "CUDA"), (2, "HIP"), (1, "ZE")):
            if fn(ctypes.c_int(code), ctypes.byref(flag)) == 0 and flag.value:
                return "yes", f"MPIX_GPU_query_support({what}) = 1"
        return "no", "MPIX_GPU_query_support: no GPU type supported"
    return "unknown", "the MPI library has no GPU query extension (assumed host memory only)"
