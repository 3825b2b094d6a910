"""MPI datatypes and reduction operations for one-sided row transfers
(:mod:`hpcgnn.comm.rma.rowstore`), and who owns a table's row ranges by default."""
from __future__ import annotations

import numpy as np
from mpi4py.util import dtlib

from ...errors import InputError
from . import rowchecks as rs
from ..mpi import MPI

try:  # compiled datatype builder (ext/gather.pxi); mpi4py's builder is the fallback
    from ..._ext import hindexed_blocks as _ext_hindexed_blocks
except ImportError:  # pragma: no cover - depends on the build
    _ext_hindexed_blocks = None

MPI_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "replace": MPI.REPLACE}
ALIGN = 64
#: Largest number of bytes one MPI operation moves (counts are C ``int``).
MAX_OP_BYTES = (1 << 31) - (1 << 20)


def op_name(op, where: str = "accumulate") -> str:
    if isinstance(op, str) and op.lower() in MPI_OPS:
        return op.lower()
    for k, v in MPI_OPS.items():
        if op == v:
            return k
    raise InputError(f"{where}: op must be one of {rs.OPS} (or MPI.SUM/MAX/MIN/REPLACE), got {op!r}")


def check_op_dtype(name: str, dtype: np.dtype, where: str) -> None:
    """MPI's rules for reductions: ``sum`` on integers, floats and complex numbers,
    ``max``/``min`` on integers and floats, ``replace`` on any of them; bools only
    ``replace``; structured dtypes none.  Raises :class:`InputError` naming ``where``."""
    if dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in "biufc":
        raise InputError(f"{where}: reductions need rows of one numeric dtype; {dtype} is not")
    if name == "replace":
        return
    if dtype.kind == "b" or (dtype.kind == "c" and name in ("max", "min")):
        raise InputError(f"{where}: MPI defines no {name!r} on {dtype} rows (use 'replace' or another dtype)")


def element_type(dtype: np.dtype):
    """``(MPI type of one element, True)`` or ``(MPI.BYTE, False)`` when MPI has none."""
    try:
        return dtlib.from_numpy_dtype(dtype), True
    except Exception:  # noqa: BLE001 - e.g. float16: rows are moved as bytes
        return MPI.BYTE.Dup(), False


def blocks_type(old, blocklength: int, byte_disps: np.ndarray):
    """A committed datatype: ``blocklength`` x ``old`` at each byte displacement."""
    disps = np.ascontiguousarray(byte_disps, dtype=np.int64)
    if _ext_hindexed_blocks is not None:
        return _ext_hindexed_blocks(old, blocklength, disps)
    return old.Create_hindexed_block(blocklength, disps).Commit()


def default_owners(ctx, nranges: int, name: str) -> list[int]:
    servers = ctx.ranks_of("server")
    if nranges == len(servers):
        return servers
    firsts = [ctx.ranks_of("server", host=n)[:1] for n in range(ctx.num_hosts)]
    if nranges == ctx.num_hosts and all(firsts):
        return [f[0] for f in firsts]
    raise InputError(f"RowStore {name!r}: {nranges} row range(s) but {len(servers)} server(s) on "
                     f"{ctx.num_hosts} host(s); pass owners=")
