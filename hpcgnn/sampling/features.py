"""Reading a sampled batch's features and labels from the graph's storage: what a
loader's task does after sampling (:mod:`hpcgnn.sampling.tasks`); the
:class:`~hpcgnn.sampling.MiniBatch` record itself reads nothing."""
from __future__ import annotations

import numpy as np
import torch

from ..errors import InputError
from ..graph.tensor_store import bits_as_torch
from .buffers import FEATURES
from .precision import HALF, float_features

#: How :func:`fetch_features` hands over ``x``: a gathered copy, or the rows'
#: addresses (:class:`~hpcgnn.graph.row_refs.RowRefs`).
FEATURE_ROWS = ("copy", "refs")


def fetch_features(batch, g, feat: str | None = "feat", label: str | None = "label", device=None,
                   label_rows: str = "all", feature_rows: str = "copy", keep_half: bool = False):
    """Gather a batch's ``x = g.ndata[feat][n_id]`` and ``y = g.ndata[label][n_id]`` (one
    one-sided read per owner each; None skips one).  ``label_rows="seeds"``: ``y``
    holds the seeds' labels only (``n_id[:batch_size]``, all a node classifier
    reads; the other nodes' labels are never read).  ``device``: assemble them in
    that device's memory (``DistTensor.gather_to``: a cache on that device serves
    its rows there).  ``feature_rows="refs"``: ``x`` is a
    :class:`~hpcgnn.graph.row_refs.RowRefs`, the rows' addresses instead of a copy
    (host memory only; a copy where it does not apply), which
    :class:`~hpcgnn.train.model.SAGE`'s first layer reads in place (float32
    features only: half-precision ones are copied).  Features stored at half
    precision (``hpcgnn partition --feat-dtype bf16|fp16``) are gathered so (half
    the bytes) and ``x`` is float32, as for any other graph, unless ``keep_half``
    (the loader's sampler ranks send them half; the trainer makes them float32).
    Returns ``batch``.
    """
    if label_rows not in ("all", "seeds"):
        raise InputError(f"fetch_features: label_rows must be 'all' or 'seeds', got {label_rows!r}")
    if feature_rows not in FEATURE_ROWS:
        raise InputError(f"fetch_features: feature_rows must be one of {FEATURE_ROWS}, "
                         f"got {feature_rows!r}")
    for name in (feat, label):
        if name is not None and name not in g.ndata:
            raise InputError(f"fetch_features: {name!r} is not a node feature of graph "
                             f"{g.graph_name!r} (node features: {sorted(g.ndata) or 'none'})")
    ids = batch.n_id.cpu().numpy()
    if feat is not None:
        has = g.get_partition_config()["node_feats"][feat].get("ntypes") if batch.n_type is not None else None
        if has:     # typed graph, feature of some types only: read those rows, zeros elsewhere
            book = g.get_partition_book()
            rows = np.flatnonzero(np.isin(batch.n_type.numpy(), [book.ntype_id(t) for t in has]))
            x = torch.zeros((len(ids),) + tuple(g.ndata[feat].shape[1:]), dtype=g.ndata[feat].dtype,
                            device=device)
            if len(rows):        # on a device through gather_to, so that a cache there serves
                got = g.ndata[feat][ids[rows]] if device is None else g.ndata[feat].gather_to(ids[rows], device)
                x[torch.from_numpy(rows).to(x.device)] = _as_tensor(got)
            batch.x = x
        elif device is not None:
            batch.x = g.ndata[feat].gather_to(ids, device)
        else:
            t = g.ndata[feat]
            refs = t.row_refs(ids) if feature_rows == "refs" and t.dtype not in HALF else None
            batch.x = refs if refs is not None else _gather_features(t, ids, not keep_half)
        if not keep_half:
            batch.x = float_features(batch.x)
    if label is not None:
        batch.y = _as_tensor(g.ndata[label][ids if label_rows == "all" else ids[: batch.batch_size]])
        if device is not None:
            batch.y = batch.y.to(device)
    return batch


def _gather_features(t, ids, upcast: bool) -> torch.Tensor:
    """``t[ids]`` for a DistTensor of a torch dtype, into a buffer of
    :data:`~hpcgnn.sampling.buffers.FEATURES` (reused once the batch is gone);
    half-precision rows made float32 (into another such buffer) with ``upcast``."""
    if not isinstance(t.dtype, torch.dtype):      # rows torch cannot hold come back as NumPy
        return _as_tensor(t[ids])
    rows = t.gather(ids, FEATURES.take(len(ids), t.shape[1:], t.np_dtype))
    x = bits_as_torch(rows, t.dtype) if t.dtype == torch.bfloat16 else torch.from_numpy(rows)
    if upcast and x.dtype in HALF:
        x = torch.from_numpy(FEATURES.take(len(ids), t.shape[1:], np.float32)).copy_(x)
    return x


def _as_tensor(a):
    return a if isinstance(a, torch.Tensor) else torch.as_tensor(a)
