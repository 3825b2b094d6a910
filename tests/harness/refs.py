"""Single-process full-batch references for the accuracy tests: stock PyG layers
trained on the whole raw graph (a helper of tests/train/test_zoo_mpi.py and
tests/train/test_train_mpi.py, not a test module).

A reference is trained once and stored in tests/data/full_batch_refs.json under a key
naming everything it depends on: a digest of the raw graph's arrays, the model kind and
settings, and the torch and PyG versions.  A key not stored (another graph, a new PyG)
is trained again, here and now; ``HPCGNN_TEST_STORE_REFS=1`` stores it.
"""
import hashlib
import json
import os

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HIDDEN, HEADS = 64, 4


class FullBatch(nn.Module):
    """Two layers of one stock PyG kind (the zoo's widths and heads), ReLU and dropout
    0.5 between them, over the whole raw graph; ``mlp``: two linear layers."""

    def __init__(self, kind, d_in, classes, ei, hidden=HIDDEN):
        from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv   # PyG: an optional dependency

        super().__init__()
        self.kind, self.ei = kind, ei
        dims = [(d_in, hidden), (hidden, classes)]
        if kind == "mlp":
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in dims)
        elif kind == "sage":
            self.layers = nn.ModuleList(SAGEConv(a, b) for a, b in dims)
        elif kind == "gcn":
            self.layers = nn.ModuleList(GCNConv(a, b) for a, b in dims)
        elif kind == "gat":
            self.layers = nn.ModuleList([GATConv(d_in, hidden // HEADS, heads=HEADS), GATConv(hidden, classes)])
        elif kind == "gin":
            self.layers = nn.ModuleList(GINConv(nn.Sequential(nn.Linear(a, b), nn.LayerNorm(b), nn.ReLU(),
                                                              nn.Linear(b, b))) for a, b in dims)

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) if self.kind == "mlp" else layer(x, self.ei)
            if i == 0:
                x = F.dropout(F.relu(x), 0.5, self.training)
        return x


_REF = {}
STORED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "full_batch_refs.json")


def _digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def _stored() -> dict:
    try:
        with open(STORED) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def _store(new: dict) -> None:
    if new and os.environ.get("HPCGNN_TEST_STORE_REFS") == "1":
        refs = {**_stored(), **new}
        with open(STORED, "w") as f:
            json.dump(dict(sorted(refs.items())), f, indent=1)
            f.write("\n")


def full_batch_accuracy(raw, kinds, epochs, hidden=HIDDEN, lr=0.01, at_best_val=True) -> dict:
    """``{kind: test accuracy}`` of each kind trained full-batch on the raw graph
    (Adam, ``lr``, seed 0): at the epoch (every 10th) of best validation accuracy, or
    after the last epoch (``at_best_val=False``).  Kept for the process's later calls."""
    import torch_geometric   # PyG: an optional dependency

    with h5py.File(raw) as f:
        names = ["edges/src", "edges/dst"] + [f"nodes/data/{k}" for k in
                                              ("feat", "label", "train_mask", "val_mask", "test_mask")]
        arrays = {n: f[n][:] for n in names}
    graph = f"{_digest(arrays.values())}:torch={torch.__version__}:pyg={torch_geometric.__version__}"
    stored, new = _stored(), {}
    ei = torch.from_numpy(np.stack([arrays["edges/src"], arrays["edges/dst"]])).long()
    x = torch.from_numpy(arrays["nodes/data/feat"]).float()
    y = torch.from_numpy(arrays["nodes/data/label"]).long()
    masks = tuple(torch.from_numpy(arrays[f"nodes/data/{k}"]).bool() for k in ("train_mask", "val_mask", "test_mask"))
    out, threads = {}, torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)        # all the cores (a job may have left one thread)
    try:
        for kind in kinds:
            key = f"{graph}:{kind}:epochs={epochs}:hidden={hidden}:lr={lr}:best_val={at_best_val}"
            if key not in _REF:
                _REF[key] = stored.get(key)
            if _REF[key] is None:
                _REF[key] = new[key] = _train(FullBatch, kind, x, y, ei, masks, epochs, hidden, lr, at_best_val)
            out[kind] = _REF[key]
    finally:
        torch.set_num_threads(threads)
    _store(new)
    return out


def _train(cls, kind, x, y, ei, masks, epochs, hidden, lr, at_best_val) -> float:
    tr, va, te = masks
    torch.manual_seed(0)
    model = cls(kind, x.shape[1], int(y.max()) + 1, ei, hidden)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    best = (-1.0, 0.0)
    for epoch in range(epochs):
        model.train()
        loss = F.cross_entropy(model(x)[tr], y[tr])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if at_best_val and (epoch + 1) % 10 == 0 or epoch + 1 == epochs:
            model.eval()
            with torch.no_grad():
                pred = model(x).argmax(1)
            v, t = (float((pred[m] == y[m]).float().mean()) for m in (va, te))
            best = max(best, (v, t)) if at_best_val else (v, t)
    return best[1]
