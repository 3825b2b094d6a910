"""The model zoo of ``hpcgnn train --model``: GCN, GAT, GIN and stock-SAGE from PyTorch
Geometric's layers, GraphSAGE with hpcgnn's fused kernels, and a user's own class.

Every zoo model follows the block protocol that hpcgnn's runtime, evaluation and
layer-wise inference use (and that a user's model may follow too):

* ``forward(x, adjs)``: ``x`` the rows of every node of a batch, ``adjs`` its
  per-layer blocks (``MiniBatch.adjs``, outermost layer first); returns the rows of
  the last block's destinations (the seeds);
* ``num_layers`` and ``layer(i, x, adj)``: layer ``i`` alone on one block
  (``x`` holds ``adj.num_src`` rows, the result ``adj.num_dst``), activation
  included: with these, inference is layer-wise over the full graph.

A user's class is named ``package.module:ClassName`` and is built as
``ClassName(in_channels=..., hidden_channels=..., out_channels=..., num_layers=...,
dropout=...)`` (PyG's ``BasicGNN`` keywords).  Its ``forward`` takes ``(x, adjs)``,
or ``(x, edge_index)`` (PyG's ``NeighborLoader`` way: the batch's whole sampled
graph, every node computed in every layer; the seeds' rows are the first
``batch_size``).
"""
from __future__ import annotations

import importlib
import inspect
from abc import ABC, abstractmethod

import torch
from torch import nn

from ..errors import InputError
from . import pyg_ops as pyg
from .attention import gat_conv
from .kernels import relu_dropout
from .model import SAGE

#: the built-in models of ``--model``
MODELS = ("sage", "sage-pyg", "gcn", "gat", "gin")


class BlockGNN(nn.Module, ABC):
    """Layers of one PyG convolution kind with ReLU and dropout between them, run on
    per-layer blocks.  Subclasses build ``self.convs`` and define :meth:`conv`.
    ReLU and dropout are one compiled pass on CPUs (:func:`~hpcgnn.train.kernels.relu_dropout`:
    PyTorch's CPU dropout draws ~13 ns per element, a third of a GCN step)."""

    def __init__(self, dims: list[int], dropout: float):
        super().__init__()
        self.dims, self.dropout = dims, dropout

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    @abstractmethod
    def conv(self, i: int, x: torch.Tensor, adj) -> torch.Tensor:
        """Layer ``i``'s convolution on block ``adj`` (no activation)."""

    def layer(self, i: int, x: torch.Tensor, adj) -> torch.Tensor:
        """Layer ``i`` on block ``adj``: ``adj.num_dst`` rows out."""
        h = self.conv(i, x, adj)
        if i < self.num_layers - 1:
            h = relu_dropout(h, p=self.dropout, training=self.training)
        return h

    def forward(self, x: torch.Tensor, adjs) -> torch.Tensor:
        for i, adj in enumerate(adjs):
            x = self.layer(i, x, adj)
        return x


def _dims(in_channels, hidden_channels, out_channels, num_layers) -> list[int]:
    return [int(in_channels)] + [int(hidden_channels)] * (int(num_layers) - 1) + [int(out_channels)]


class SAGEPyG(BlockGNN):
    """Stock ``SAGEConv`` (mean) on the blocks: one sparse product per layer."""

    def __init__(self, in_channels, hidden_channels, out_channels, num_layers=2, dropout=0.5):
        super().__init__(_dims(in_channels, hidden_channels, out_channels, num_layers), dropout)
        self.convs = nn.ModuleList(pyg.SAGEConv(a, b) for a, b in zip(self.dims[:-1], self.dims[1:]))

    def conv(self, i, x, adj):
        return self.convs[i]((x, x[: adj.num_dst]), adj.adj_t)


class GCN(BlockGNN):
    """``GCNConv`` on self-looped blocks normalised by the destination's degree,
    ``D^-1 (A + I)`` (:meth:`~hpcgnn.sampling.blocks.LayerAdj.gcn_norm`; DGL's
    ``GraphConv(norm='right')``): the symmetric normalisation counted within a
    sampled block would make a node's output depend on the other nodes of its batch
    (in training and in layer-wise inference alike).  A layer narrower at its
    input than at its output aggregates first and multiplies the ``num_dst``
    aggregated rows by the layer's weight (as DGL's ``GraphConv`` orders it);
    ``GCNConv`` itself would multiply all ``num_src`` rows first."""

    def __init__(self, in_channels, hidden_channels, out_channels, num_layers=2, dropout=0.5):
        super().__init__(_dims(in_channels, hidden_channels, out_channels, num_layers), dropout)
        self.convs = nn.ModuleList(pyg.GCNConv(a, b, normalize=False, add_self_loops=False)
                                   for a, b in zip(self.dims[:-1], self.dims[1:]))

    def conv(self, i, x, adj):
        conv = self.convs[i]
        if conv.in_channels >= conv.out_channels:
            return conv(x, adj.gcn_norm())
        h = conv.lin(torch.sparse.mm(adj.gcn_norm(), x))
        return h if conv.bias is None else h + conv.bias


class GAT(BlockGNN):
    """``GATConv`` with ``heads`` attention heads (concatenated; the last layer's
    one head) along the block's edges, self-loops added; on CPUs computed by
    :func:`~hpcgnn.train.attention.gat_conv` (no per-edge message tensors)."""

    def __init__(self, in_channels, hidden_channels, out_channels, num_layers=2, dropout=0.5, heads: int = 4):
        super().__init__(_dims(in_channels, hidden_channels, out_channels, num_layers), dropout)
        if int(hidden_channels) % heads:
            raise InputError(f"GAT: hidden_channels ({hidden_channels}) must be a multiple of heads ({heads})")
        last = len(self.dims) - 2
        self.convs = nn.ModuleList(
            pyg.GATConv(a, b if i == last else b // heads, heads=1 if i == last else heads)
            for i, (a, b) in enumerate(zip(self.dims[:-1], self.dims[1:])))

    def conv(self, i, x, adj):
        return gat_conv(self.convs[i], x, adj)


class GIN(BlockGNN):
    """``GINConv`` (sum) with a two-layer MLP per layer, ``LayerNorm`` after its first
    product: the sums over sampled neighbourhoods are large, and without a norm Adam
    barely moves the loss in the first hundred steps (test accuracy 0.12 on the
    100k-node graph after 45 steps, 0.86 with it).  ``LayerNorm`` rather than GIN's
    usual ``BatchNorm1d``: a trainer's batches come from its own partition, whose
    classes differ from the others', and batch statistics (or DDP's broadcast of
    rank 0's running statistics) would carry one partition's scale into every
    other's; a per-row norm has no batch statistics at all.  The norm also makes a
    layer's output nearly independent of the sum's scale, so layer-wise full-graph
    inference (sums over whole neighbourhoods) serves the model trained on sums over
    ``fanout`` neighbours: 0.864 test accuracy there, 0.827 evaluated on sampled
    neighbourhoods."""

    def __init__(self, in_channels, hidden_channels, out_channels, num_layers=2, dropout=0.5):
        super().__init__(_dims(in_channels, hidden_channels, out_channels, num_layers), dropout)
        self.convs = nn.ModuleList(
            pyg.GINConv(nn.Sequential(nn.Linear(a, b), nn.LayerNorm(b), nn.ReLU(), nn.Linear(b, b)))
            for a, b in zip(self.dims[:-1], self.dims[1:]))

    def conv(self, i, x, adj):
        return self.convs[i]((x, x[: adj.num_dst]), adj.adj_t)


def load_class(spec: str):
    """``package.module:ClassName`` -> the class (InputError naming what failed)."""
    mod_name, _, cls_name = spec.partition(":")
    if not mod_name or not cls_name:
        raise InputError(f"--model {spec!r}: give one of {', '.join(MODELS)} or package.module:ClassName")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:             # noqa: BLE001 - any import failure is the user's to see
        raise InputError(f"--model {spec!r}: module {mod_name!r} does not import "
                         f"({type(e).__name__}: {e})") from None
    cls = getattr(mod, cls_name, None)
    if cls is None or not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise InputError(f"--model {spec!r}: {mod_name} has no torch.nn.Module subclass {cls_name!r}")
    return cls


def build_model(spec: str, in_dim: int, hidden: int, out_dim: int, num_layers: int,
                dropout: float) -> nn.Module:
    """Independent: the model ``--model spec`` names, for ``in_dim`` input features and
    ``out_dim`` outputs (InputError for an unknown name, a module that does not
    import, a constructor that does not take the documented keywords)."""
    builtin = {"sage-pyg": SAGEPyG, "gcn": GCN, "gat": GAT, "gin": GIN}
    if spec == "sage":
        return SAGE(in_dim, hidden, out_dim, num_layers, dropout)
    cls = builtin.get(spec) or load_class(spec)
    try:
        return cls(in_channels=in_dim, hidden_channels=hidden, out_channels=out_dim, num_layers=num_layers,
                   dropout=dropout)
    except InputError:
        raise
    except Exception as e:             # noqa: BLE001
        raise InputError(f"--model {spec!r}: {cls.__name__}(in_channels={in_dim}, hidden_channels={hidden}, "
                         f"out_channels={out_dim}, num_layers={num_layers}, dropout={dropout}) failed: "
                         f"{type(e).__name__}: {e}") from None


def input_style(model: nn.Module) -> str:
    """``"adjs"`` or ``"edge_index"``: what the model's ``forward`` takes after ``x``
    (by the name of its second parameter; DDP-wrapped models are looked through)."""
    m = getattr(model, "module", model)
    params = [p for p in inspect.signature(m.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(params) >= 2 and params[1].name == "edge_index":
        return "edge_index"
    return "adjs"


def has_layers(model: nn.Module) -> bool:
    """Whether the model offers ``num_layers`` and ``layer(i, x, adj)`` (layer-wise
    inference), and does not say ``layerwise = False``."""
    m = getattr(model, "module", model)
    return callable(getattr(m, "layer", None)) and isinstance(getattr(m, "num_layers", None), int) \
        and getattr(m, "layerwise", True)
