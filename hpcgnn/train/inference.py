"""Distributed layer-wise full-graph inference (as DGL's distributed examples do).

Layer ``i`` is computed for every node before layer ``i+1`` starts: each trainer
takes its share of all nodes (:func:`~hpcgnn.graph.node_split`), in batches reads
the batch's full in-neighbourhood (one hop, every edge) and the neighbours' layer
inputs, applies the layer and writes the outputs into a :class:`DistTensor` that
is the next layer's input.  Unlike evaluating on sampled neighbourhoods, the
result is exact and each node's representation is computed once per layer.
"""
from __future__ import annotations

import numpy as np
import torch

from ..graph import DistTensor, node_split
from ..sampling import NeighborSampler


@torch.no_grad()
def layerwise_inference(model, g, feat: str = "feat", batch_size: int = 4096, progress=None, device=None):
    """Collective over the trainers: the model's output for every node, as a
    ``(num_nodes, out_dim)`` float32 :class:`DistTensor` (``progress``: an optional
    callable ``(layer, done, total)``; ``device``: where the model is, default CPU)."""
    was_training = model.training
    model.eval()
    n = g.num_nodes()
    mine = node_split(np.ones(n, dtype=bool), g.get_partition_book()).numpy()
    full = NeighborSampler([-1])
    x_in = g.ndata[feat]
    out = None
    for i in range(model.num_layers):
        out = DistTensor((n, model.dims[i + 1]), torch.float32)
        for lo in range(0, len(mine), batch_size):
            seeds = mine[lo:lo + batch_size]
            b = full.sample(g, seeds, rng=0)
            x = torch.as_tensor(x_in[b.n_id]).float()
            if device is not None:
                x, ei = x.to(device, non_blocking=True), b.edge_index.to(device, non_blocking=True)
            else:
                ei = b.edge_index
            h = model.layer(i, x, ei, num_dst=len(seeds))
            out[seeds] = h.cpu().numpy()
            if progress is not None:
                progress(i, min(lo + batch_size, len(mine)), len(mine))
        out.barrier()                       # every row of layer i written before anyone reads it
        if i > 0:
            x_in.free()
        x_in = out
    model.train(was_training)
    return out
