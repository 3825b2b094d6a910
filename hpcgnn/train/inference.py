"""Distributed layer-wise full-graph inference (as DGL's distributed examples do).

Layer ``i`` is computed for every node before layer ``i+1`` starts: each trainer
takes its share of all nodes (:func:`~hpcgnn.graph.node_split`), in batches reads
the batch's full in-neighbourhood (one hop, every edge) and the neighbours' layer
inputs, applies the layer and writes the outputs into a :class:`DistTensor` that
is the next layer's input.  Unlike evaluating on sampled neighbourhoods, the
result is exact and each node's representation is computed once per layer.

Any model that offers ``num_layers`` and ``layer(i, x, adj)`` (the block protocol of
:mod:`hpcgnn.train.zoo`: ``x`` the rows of ``adj.num_src`` nodes, the result the
rows of its ``adj.num_dst`` destinations, activation included) runs this way.
"""
from __future__ import annotations

import numpy as np
import torch

from ..comm import peers, watchdog
from ..comm.collectives import all_max
from ..graph import DistTensor, node_split
from ..comm.context import current_context
from ..errors import PeerFailed
from ..sampling import NeighborSampler


@torch.no_grad()
def layerwise_inference(model, g, feat: str = "feat", batch_size: int = 4096, progress=None, device=None):
    """Collective over the trainers: the model's output for every node, as a
    ``(num_nodes, out_dim)`` float32 :class:`DistTensor` (``progress``: an optional
    callable ``(layer, done, total)``; ``device``: where the model is, default CPU).
    A layer's output width is ``model.dims[i + 1]`` where the model has ``dims``,
    else that of its first batch (agreed by the trainers)."""
    was_training = model.training
    model.eval()
    n = g.num_nodes()
    mine = node_split(np.ones(n, dtype=bool), g.get_partition_book()).numpy()
    full = NeighborSampler([-1])
    x_in = g.ndata[feat]
    out = None
    dims = getattr(model, "dims", None)
    if not (isinstance(dims, (list, tuple)) and len(dims) == model.num_layers + 1):
        dims = None                # not a list of layer widths: ask the first batch
    tc = current_context(required="layerwise_inference", trainer=True).trainer_comm
    # rows are read through shared memory, so a server of this host that died would
    # otherwise be named only by the launcher once the job ends
    watch = peers.Watch(("server", "sampler"), watchdog.timeout_s())
    for i in range(model.num_layers):
        h, lo = None, 0
        if dims is not None:
            width = int(dims[i + 1])
        else:                      # the first batch tells the width (a trainer without one says 0)
            if len(mine):
                h = _layer_batch(model, g, full, x_in, mine[:batch_size], i, device)
            width = all_max(tc, 0 if h is None else int(h.shape[1]))
        out = DistTensor((n, width), torch.float32)
        if h is not None:
            out[mine[:batch_size]] = h.cpu().float().numpy()
            lo = batch_size
        for lo in range(lo, len(mine), batch_size):
            _check_peers(watch, i)
            seeds = mine[lo:lo + batch_size]
            out[seeds] = _layer_batch(model, g, full, x_in, seeds, i, device).cpu().float().numpy()
            if progress is not None:
                progress(i, min(lo + batch_size, len(mine)), len(mine))
        out.barrier()                       # every row of layer i written before anyone reads it
        if i > 0:
            x_in.free()
        x_in = out
    model.train(was_training)
    return out


def _check_peers(watch, layer: int) -> None:
    failed = watch.failed()
    if failed is not None:
        raise PeerFailed(f"{peers.describe(failed)}; layer-wise inference stops in layer {layer} ({peers.me()} "
                         "ends the job)")


def _layer_batch(model, g, full, x_in, seeds, i: int, device):
    """Layer ``i`` for ``seeds`` from their whole in-neighbourhood (one block)."""
    b = full.sample(g, seeds, rng=0)
    x = torch.as_tensor(x_in[b.n_id]).float()
    b.x = x
    adj = b.adjs[0]
    if device is not None:
        x, adj = x.to(device, non_blocking=True), adj.to(device, non_blocking=True)
    return model.layer(i, x, adj)
