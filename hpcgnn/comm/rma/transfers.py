"""The MPI calls that move rows of one :class:`~hpcgnn.comm.rma.rowstore.RowStore` range
to or from one target rank, and their completion.

Every operation names an indexed block of rows on the target side (byte
displacements in the target's segment) and a contiguous slice, or an indexed block
of places, on this side.  Gets from another host may go as ``Rget`` requests, which
complete without a ``Flush``.
"""
from __future__ import annotations

from .datatypes import blocks_type
from ..mpi import MPI


def issue(win, target, disps, rows2d, kind, spans, old, per_row, row_bytes, *, op=None,
          result2d=None, origin_rows=None, requests=False) -> list:
    """One operation per ``(start, end)`` of ``spans`` (positions in ``disps``):
    ``kind`` ``"get"``, ``"put"``, ``"acc"`` (``Accumulate`` with ``op``) or
    ``"getacc"`` (``Get_accumulate``, old values into ``result2d``), ``per_row`` x
    ``old`` per row.  ``origin_rows`` (gets only): the rows of ``rows2d`` that
    receive, in order (a plain slice when they are consecutive).  ``requests`` (gets
    only): ``Rget`` instead of ``Get``.  Returns ``[(win, target to flush or None,
    datatype or None, request or None), ...]`` for :func:`complete`.  On an error
    what was issued is completed (and its datatypes freed) before it propagates."""
    issued = []
    flush = None if requests else target
    try:
        for s, e in spans:
            m = e - s
            dt = blocks_type(old, per_row, disps[s:e])
            issued.append((win, flush, dt, None))         # freed by complete, even on an error
            if origin_rows is None:
                origin = [rows2d[s:e], m * per_row, old]
            else:
                r = origin_rows[s:e]
                if int(r[-1]) - int(r[0]) == m - 1:       # ascending, so consecutive
                    origin = [rows2d[int(r[0]):int(r[0]) + m], m * per_row, old]
                else:
                    odt = blocks_type(old, per_row, r * row_bytes)
                    issued.append((win, flush, odt, None))
                    origin = [rows2d, 1, odt]
            tgt = [0, 1, dt]
            if requests:
                # the owner starts on this piece while the next one's datatype is built
                issued.append((win, None, None, win.Rget(origin, target, tgt)))
            elif kind == "get":
                win.Get(origin, target, tgt)
            elif kind == "put":
                win.Put(origin, target, tgt)
            elif kind == "acc":
                win.Accumulate(origin, target, tgt, op)
            else:
                win.Get_accumulate(origin, [result2d[s:e], m * per_row, old], target, tgt, op)
    except BaseException:
        complete(issued)             # what was issued lands, nothing is leaked
        raise
    return issued


def complete(pending) -> None:
    """Wait for the requests, flush each (window, target) once, free the datatypes."""
    reqs = [req for *_, req in pending if req is not None]
    if reqs:
        MPI.Request.Waitall(reqs)
    done = set()
    for win, target, _, _ in pending:
        if target is not None and (id(win), target) not in done:
            win.Flush(target)
            done.add((id(win), target))
    for _, _, dt, _ in pending:
        if dt is not None:
            dt.Free()
