"""DGL's ``HeteroGraphConv`` on hpcgnn's typed blocks (:class:`~hpcgnn.nn.HeteroBlock`,
from :func:`~hpcgnn.nn.to_hetero_blocks`): one module per relation, run on that
relation's block, the results aggregated per destination type."""
from __future__ import annotations

from functools import partial

import torch
from torch import nn

from ..errors import DGLError, InputError
from ..sampling.batch import Block
from .heteroblock import HeteroBlock

__all__ = ["HeteroGraphConv", "get_aggregate_fn"]


def _reduce(inputs, dsttype, fn):
    if len(inputs) == 0:
        return None
    return fn(torch.stack(inputs, dim=0), dim=0)


def _stack(inputs, dsttype):
    if len(inputs) == 0:
        return None
    return torch.stack(inputs, dim=1)


_REDUCERS = {"sum": torch.sum, "mean": torch.mean, "max": lambda t, dim: torch.max(t, dim=dim)[0],
             "min": lambda t, dim: torch.min(t, dim=dim)[0]}


def get_aggregate_fn(agg):
    """The function ``f(list_of_tensors, dsttype)`` that ``aggregate`` names: ``sum``,
    ``mean``, ``max``, ``min`` over the relations, or ``stack`` (along dim 1, in
    the block's edge type order)."""
    if agg == "stack":
        return _stack
    if agg not in _REDUCERS:
        raise DGLError(f'HeteroGraphConv: aggregate must be "sum", "max", "min", "mean", "stack" or a callable, '
                       f'got {agg!r}')
    return partial(_reduce, fn=_REDUCERS[agg])


def _as_hetero(g) -> HeteroBlock:
    if isinstance(g, HeteroBlock):
        return g
    if isinstance(g, Block):
        shape = f"{len(g.src_nodes)} sources, {len(g.dst_nodes)} destinations, {g.edge_index.shape[1]} edges"
        if g.e_type is None:
            raise InputError(f"HeteroGraphConv: given a block without edge types ({shape}; e_type is None); "
                             "it takes a heterogeneous block (hpcgnn.nn.to_hetero_blocks of a typed batch)")
        raise DGLError(f"HeteroGraphConv: given a typed hpcgnn Block ({shape}); split it by type first: "
                       "hpcgnn.nn.to_hetero_blocks(batch_or_blocks, g)")
    raise InputError(f"HeteroGraphConv: expected a HeteroBlock (hpcgnn.nn.to_hetero_blocks), got "
                     f"{type(g).__name__}")


def _check_inputs(g: HeteroBlock, feats, what: str, count) -> None:
    if not isinstance(feats, dict):
        raise InputError(f"HeteroGraphConv: {what} features must be a dict node type -> tensor, got "
                         f"{type(feats).__name__}")
    for t, v in feats.items():
        if t not in g.ntypes:
            raise DGLError(f"HeteroGraphConv: {what} features of node type {t!r}, the block's node types are "
                           f"{g.ntypes}")
        n = count(t)
        if not isinstance(v, torch.Tensor) or v.shape[0] != n:
            got = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
            raise InputError(f"HeteroGraphConv: {what} features of {t!r} have shape {got}, the block has {n} "
                             f"{what} nodes of that type")


class HeteroGraphConv(nn.Module):
    """Runs ``mods[relation]`` (keyed by relation name or canonical triple) on each
    relation's block of a :class:`~hpcgnn.nn.HeteroBlock` with ``(source features of
    its source type, destination features of its destination type)`` and combines
    the results per destination type by ``aggregate`` (``sum``, ``max``, ``min``,
    ``mean``, ``stack`` or ``f(tensors, dsttype)``).  ``inputs``: a dict node type
    -> ``[num_src_nodes(type), ...]`` (the destinations are its first rows) or a
    ``(src_dict, dst_dict)`` pair; relations whose types have no input are skipped.
    ``mod_args`` / ``mod_kwargs``: per relation name, extra arguments of its module.
    The modules are made to allow destinations without in-edges (as DGL does)."""

    def __init__(self, mods, aggregate="sum"):
        super().__init__()
        self.mod_dict = mods
        self.mods = nn.ModuleDict({str(k): v for k, v in mods.items()})
        for v in self.mods.values():
            allow = getattr(v, "set_allow_zero_in_degree", None)
            if callable(allow):
                allow(True)
        self.agg_fn = get_aggregate_fn(aggregate) if isinstance(aggregate, str) else aggregate

    def _get_module(self, etype):
        mod = self.mod_dict.get(etype)
        if mod is None:
            mod = self.mod_dict.get(etype[1])
        if mod is None:
            raise DGLError(f"HeteroGraphConv: no module for edge type {etype} (modules: {list(self.mod_dict)})")
        return mod

    def forward(self, g, inputs, mod_args=None, mod_kwargs=None):
        g = _as_hetero(g)
        mod_args, mod_kwargs = mod_args or {}, mod_kwargs or {}
        if isinstance(inputs, tuple):
            if len(inputs) != 2:
                raise InputError(f"HeteroGraphConv: inputs are a dict or a (source, destination) pair of dicts, "
                                 f"got a tuple of {len(inputs)}")
            src_inputs, dst_inputs = inputs
            _check_inputs(g, src_inputs, "source", g.num_src_nodes)
            _check_inputs(g, dst_inputs, "destination", g.num_dst_nodes)
        else:
            _check_inputs(g, inputs, "source", g.num_src_nodes)
            src_inputs = inputs
            dst_inputs = {k: v[:g.num_dst_nodes(k)] for k, v in inputs.items()}
        outputs = {t: [] for t in g.dsttypes}
        for etype in g.canonical_etypes:
            stype, rel, dtype = etype
            if stype not in src_inputs or dtype not in dst_inputs:
                continue
            try:
                out = self._get_module(etype)(g[etype], (src_inputs[stype], dst_inputs[dtype]),
                                              *mod_args.get(rel, ()), **mod_kwargs.get(rel, {}))
            except InputError as e:
                raise type(e)(f"HeteroGraphConv, relation {etype}: {e}") from e
            outputs[dtype].append(out)
        return {t: self.agg_fn(alist, t) for t, alist in outputs.items() if alist}
