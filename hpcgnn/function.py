"""DGL's built-in message functions (``import hpcgnn.function as fn``, DGL's
``dgl.function``), for ``apply_edges`` on the pair graphs of link batches
(:class:`~hpcgnn.sampling.pair_graph.PairGraph`): ``fn.u_dot_v("h", "h", "score")``
scores every edge with the dot product of its endpoints' ``h``.

``fn.<a>_<op>_<b>(lhs_field, rhs_field, out)``, ``a != b`` each one of ``u`` (the
source's ``ndata``), ``v`` (the destination's) and ``e`` (the edge's ``edata``),
``op`` one of ``add``, ``sub``, ``mul``, ``div`` (element-wise; the feature shapes,
after the edge dimension, broadcast as DGL's do) and ``dot`` (over the last
dimension, kept with size 1: ``[E, D]`` rows give ``[E, 1]``), as DGL's;
``fn.copy_u(field, out)``, ``fn.copy_e(field, out)`` (and DGL's older
``copy_src``/``copy_edge``).  Each is a :class:`MessageFunction`: called with the
edges' gathered rows, it computes one tensor op over all edges at once.

DGL's reduce functions (``fn.sum``, ``fn.mean``, ...) and ``update_all`` are not
here: :mod:`hpcgnn.nn`'s layers aggregate over hpcgnn's blocks themselves.
"""
from __future__ import annotations

import itertools

import torch

from .errors import DGLError

#: The binary operators of DGL's ``u_<op>_v`` family.
BINARY_OPS = ("add", "sub", "mul", "div", "dot")
#: Where an operand is read: the source node, the destination node, the edge.
TARGETS = ("u", "v", "e")


class MessageFunction:
    """A built-in message function: ``name`` (DGL's, e.g. ``"u_dot_v"``), the
    operands ``(target, field)`` it reads and the edge field ``out`` it writes."""

    def __init__(self, name: str, operands: tuple, op: str | None, out: str):
        for target, field in operands:
            if not isinstance(field, str):
                raise DGLError(f"hpcgnn.function.{name}: the field of '{target}' must be a name (str), "
                               f"got {type(field).__name__} {field!r}")
        if not isinstance(out, str):
            raise DGLError(f"hpcgnn.function.{name}: out must be a name (str), got {type(out).__name__} {out!r}")
        self.name, self.operands, self.op, self.out = name, tuple(operands), op, out

    def __call__(self, *rows: torch.Tensor) -> torch.Tensor:
        """The message of every edge from the operands' rows, one row per edge, in
        the order of :attr:`operands`."""
        if self.op is None:
            return rows[0]
        a, b = _aligned(*rows)
        if self.op == "dot":
            if a.shape[-1] != b.shape[-1] and 1 not in (a.shape[-1], b.shape[-1]):
                raise DGLError(f"hpcgnn.function.{self.name}: the feature shapes {tuple(a.shape[1:])} and "
                               f"{tuple(b.shape[1:])} differ in their last dimension")
            return (a * b).sum(-1, keepdim=True)
        try:
            return {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}[self.op](a, b)
        except RuntimeError as e:
            raise DGLError(f"hpcgnn.function.{self.name}: the feature shapes {tuple(rows[0].shape[1:])} and "
                           f"{tuple(rows[1].shape[1:])} do not broadcast") from e

    def __repr__(self):
        args = ", ".join(repr(f) for _, f in self.operands)
        return f"fn.{self.name}({args}, {self.out!r})"


def _aligned(a: torch.Tensor, b: torch.Tensor):
    """The two operands (one row per edge) with as many feature dimensions each,
    padded with size-1 dimensions after the first, as DGL broadcasts feature shapes
    (numpy's rule applied to the shapes after the edge dimension; a ``[E]`` column is
    ``[E, 1]``)."""
    nd = max(a.dim(), b.dim(), 2)
    return tuple(t.reshape(t.shape[0], *([1] * (nd - t.dim())), *t.shape[1:]) for t in (a, b))


def _binary(lhs: str, op: str, rhs: str):
    name = f"{lhs}_{op}_{rhs}"

    def make(lhs_field: str, rhs_field: str, out: str) -> MessageFunction:
        return MessageFunction(name, ((lhs, lhs_field), (rhs, rhs_field)), op, out)

    make.__name__ = make.__qualname__ = name
    make.__doc__ = (f"DGL's ``fn.{name}(lhs_field, rhs_field, out)``: the message of each edge is "
                    f"``{lhs}.data[lhs_field] {op} {rhs}.data[rhs_field]``.")
    return make


def _copy(target: str, name: str):
    def make(field: str, out: str) -> MessageFunction:
        return MessageFunction(name, ((target, field),), None, out)

    make.__name__ = make.__qualname__ = name
    whose = {"u": "its source's ``ndata``", "e": "its own ``edata``"}[target]
    make.__doc__ = f"DGL's ``fn.{name}(field, out)``: the message of each edge is {whose}[field]."
    return make


__all__ = ["MessageFunction", "copy_u", "copy_e", "copy_src", "copy_edge"]
for _l, _r in itertools.permutations(TARGETS, 2):
    for _op in BINARY_OPS:
        globals()[f"{_l}_{_op}_{_r}"] = _binary(_l, _op, _r)
        __all__.append(f"{_l}_{_op}_{_r}")
del _l, _r, _op
copy_u = copy_src = _copy("u", "copy_u")
copy_e = copy_edge = _copy("e", "copy_e")
