"""Link prediction with GraphSAGE and learnable node embeddings, under one MPI launch.

Run on every rank (``mpirun -n R python examples/link_prediction.py ...``); servers
and samplers serve inside :func:`hpcgnn.initialize`, trainers train:

1. **Held-out edges.**  An edge ``(a, b)`` is held out when ``u(a, b) < val_frac +
   test_frac``, where ``u`` in ``[0, 1)`` is a hash of the unordered node pair and
   ``split_seed``: the same set on every rank and for any trainer count, with no
   array to broadcast, and every parallel copy and the reverse of an edge in the
   same set.  ``u < val_frac`` are validation edges, the next ``test_frac`` test
   edges, the rest training edges.  Each trainer gets its share of each set with
   ``edge_split``.  The held-out edges stay in the partitioned graph's structure;
   they are removed from every sampled neighbourhood (training and evaluation) by
   dropping the sampled edges whose pair hashes into the held-out range, so the
   model never reads an edge it is evaluated on, nor a copy of it.  Each trainer
   reads every edge's endpoints once at the start for this (~0.1 s per million
   edges from node-local memory).
2. **Training.**  ``DistEdgeDataLoader`` over the training edges with
   ``negative_sampler=Uniform(num_negs)`` and ``exclude='self'``.  Node input =
   ``concat(features, a learnable DistEmbedding row)``; the embedding is trained
   with ``SparseAdagrad``, the dense part (the encoder, ``SAGE`` unless ``--model``
   names another, + scorer) with Adam under
   DDP.  Loss: binary cross-entropy on ``edge_label``.
3. **Evaluation.**  Each held-out edge ``(u, v)`` is ranked against
   ``eval_negatives`` destinations ``v'`` drawn from a hash of the edge id (the same
   for every run): MRR and hits@K (OGB's rank: ties count half).  Node
   representations come from sampled neighbourhoods (``NeighborSampler`` around the
   endpoints); the per-trainer sums are reduced with MPI.

**Sparse updates and reproducibility.**  With ``emb_updates='ordered'`` the
trainers apply their embedding updates one after the other, each followed by a
barrier (``T`` barriers per step for ``T`` trainers): rows are read and written
in a fixed order, so a run is bitwise reproducible and a resumed run ends with
the same model and embedding table as an uninterrupted one.  ``'concurrent'``
(the default: it scales to many trainers) applies them all at once (Hogwild-style:
MPI accumulates are atomic but their order between trainers is not fixed, so the
last bits of the embedding rows vary from run to run) followed by one barrier.

Trainer 0 writes ``log.jsonl``, ``metrics.csv``, ``curve.png``, the final ``model.pt``
(dense ``state_dict``) and ``embedding.npy`` (the whole embedding table) to the run
directory and prints ``test MRR:`` and ``test hits@10:`` with 4 decimals last.
Checkpoints (every ``checkpoint_every`` steps, at ``max_steps``, and on
SIGUSR1/SIGTERM) hold the dense model and optimizer, the embedding rows and their
Adagrad state, RNG states and the loader position; ``--resume`` continues from the
newest one.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..comm.agree import agreed
from ..comm.collectives import barrier
from ..errors import InputError
from ..graph import DistEmbedding, SparseAdagrad, edge_split
from ..sampling import DistEdgeDataLoader, NeighborSampler, fetch_features
from ..sampling.blocks import adjs_like
from ..sampling.negative import Uniform
from .link_config import LinkConfig, parse_args  # noqa: F401  (parse_args: tests, entry points)
from .zoo import build_model, input_style
from .common import check_run_dir, finalize_and_report, run_or_exit, seed_all, settings_or_exit, start
from .common import allsum as _allsum
from .trainer import Trainer


# --------------------------------------------------------------------------- held-out edges
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray, salt: int) -> np.ndarray:
    """splitmix64 of ``x + salt`` (uint64, elementwise; pure)."""
    with np.errstate(over="ignore"):
        z = np.asarray(x).astype(np.uint64) + np.uint64(salt & (2**64 - 1)) * _GOLDEN + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _unit(x, salt: int) -> np.ndarray:
    """A uniform ``[0, 1)`` float per element, a pure function of ``(x, salt)``."""
    return (_mix(x, salt) >> np.uint64(11)).astype(np.float64) / float(2**53)


def _pair_unit(src, dst, salt: int) -> np.ndarray:
    """A uniform ``[0, 1)`` float per node pair, the same for ``(u, v)``, ``(v, u)``
    and every parallel copy of the edge."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    lo, hi = np.minimum(src, dst).astype(np.uint64), np.maximum(src, dst).astype(np.uint64)
    return (_mix(_mix(lo, salt) ^ hi, salt) >> np.uint64(11)).astype(np.float64) / float(2**53)


class HeldOut:
    """Which edges are validation/test edges: a hash of the edge's node pair (no
    array), so that a parallel copy or the reverse of a held-out edge is held out
    with it (split by edge id, a duplicate of a test edge was a training edge)."""

    def __init__(self, val_frac: float, test_frac: float, seed: int):
        self.val_frac, self.test_frac, self.seed = float(val_frac), float(test_frac), int(seed)

    def u(self, src, dst) -> np.ndarray:
        return _pair_unit(src, dst, self.seed)

    def held(self, src, dst) -> np.ndarray:
        return self.u(src, dst) < self.val_frac + self.test_frac

    def masks(self, g, chunk: int = 1 << 22) -> dict[str, np.ndarray]:
        """Boolean masks over all edge ids of ``g``: ``train``, ``val``, ``test``
        (reads every edge's endpoints, a chunk at a time)."""
        num_edges = g.num_edges()
        out = {k: np.empty(num_edges, dtype=bool) for k in ("train", "val", "test")}
        for a in range(0, num_edges, chunk):
            b = min(num_edges, a + chunk)
            src, dst = (np.asarray(t) for t in g.find_edges(np.arange(a, b, dtype=np.int64)))
            u = self.u(src, dst)
            out["val"][a:b] = u < self.val_frac
            out["test"][a:b] = (u >= self.val_frac) & (u < self.val_frac + self.test_frac)
            out["train"][a:b] = u >= self.val_frac + self.test_frac
        return out

    def drop_from(self, b) -> None:
        """Remove the held-out edges from a sampled mini-batch."""
        if b.num_edges:
            n_id = b.n_id.numpy()
            ei = b.edge_index.numpy()
            held = self.held(n_id[ei[0]], n_id[ei[1]])
            if held.any():
                b.drop_edges(b.e_id.numpy()[held])


def eval_negatives(eids: np.ndarray, k: int, num_nodes: int, seed: int) -> np.ndarray:
    """``[len(eids), k]`` negative destinations of each held-out edge: a pure
    function of the edge id (the same in every run and for any trainer count)."""
    keys = np.asarray(eids, dtype=np.int64)[:, None] * k + np.arange(k, dtype=np.int64)[None, :]
    return (_mix(keys, seed ^ 0x5EED) % np.uint64(num_nodes)).astype(np.int64)


# --------------------------------------------------------------------------- model
class LinkModel(nn.Module):
    """An encoder (output dim ``hidden``; ``model``: a name of the zoo or
    ``package.module:ClassName``, :func:`~hpcgnn.train.zoo.build_model`) and an edge
    scorer: ``dot`` (``h_u . h_v``) or ``mlp`` (``MLP(h_u * h_v)``)."""

    def __init__(self, in_dim: int, hidden: int, num_layers: int, dropout: float, scorer: str = "mlp",
                 model: str = "sage"):
        super().__init__()
        self.encoder = build_model(model, in_dim, hidden, hidden, num_layers, dropout)
        self.style = input_style(self.encoder)
        self.scorer = scorer
        self.predictor = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)) \
            if scorer == "mlp" else None

    def score(self, hu: torch.Tensor, hv: torch.Tensor) -> torch.Tensor:
        if self.predictor is None:
            return (hu * hv).sum(-1)
        return self.predictor(hu * hv).squeeze(-1)

    def encode(self, x, b) -> torch.Tensor:
        """The seeds' representations of batch ``b`` (its blocks, or its whole sampled
        graph for an encoder taking ``edge_index``)."""
        if getattr(self.encoder, "takes_hop_counts", False):
            return self.encoder(x, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges)
        if self.style == "edge_index":
            return self.encoder(x, b.edge_index)[: b.batch_size]
        return self.encoder(x, adjs_like(b.adjs, x))

    def forward(self, x, b, pairs):
        """Logits of the pairs ``pairs`` (``[2, P]`` local ids among the seeds of
        batch ``b``)."""
        h = self.encode(x, b)
        return self.score(h[pairs[0]], h[pairs[1]])


def _inputs(b, emb: DistEmbedding) -> torch.Tensor:
    return torch.cat([b.x.float(), emb(b.n_id)], dim=1)


@torch.no_grad()
def rank_metrics(model: LinkModel, g, emb: DistEmbedding, eids, cfg: LinkConfig, held: HeldOut,
                 sampler: NeighborSampler, salt: int) -> np.ndarray:
    """Independent: ``[sum of 1/rank, sum of hits@K, count]`` over this trainer's
    held-out edges ``eids``, each ranked against ``cfg.eval_negatives``
    destinations.  Rank = 1 + (#negatives scoring higher) + (#ties)/2 (OGB)."""
    eids = np.asarray(eids, dtype=np.int64)
    was = model.training
    model.eval()
    n, k = g.num_nodes(), cfg.eval_negatives
    rr = hits = 0.0
    for i, a in enumerate(range(0, len(eids), cfg.eval_batch_size)):
        e = eids[a:a + cfg.eval_batch_size]
        src, dst = (t.numpy() for t in g.find_edges(e))
        neg = eval_negatives(e, k, n, cfg.split_seed)
        uniq, inv = np.unique(np.concatenate([src, dst, neg.reshape(-1)]), return_inverse=True)
        B = len(e)
        b = sampler.sample(g, uniq, rng=np.random.default_rng([cfg.seed, salt, i]))
        fetch_features(b, g, cfg.feat, None)
        held.drop_from(b)
        h = model.encode(_inputs(b, emb), b)
        hs, hd, hn = h[inv[:B]], h[inv[B:2 * B]], h[inv[2 * B:]].reshape(B, k, -1)
        pos = model.score(hs, hd)
        negs = model.score(hs[:, None, :].expand(-1, k, -1), hn)
        rank = 1.0 + (negs > pos[:, None]).sum(1).double() + 0.5 * (negs == pos[:, None]).sum(1).double()
        rr += float((1.0 / rank).sum())
        hits += float((rank <= cfg.hits_k).sum())
    model.train(was)
    return np.array([rr, hits, float(len(eids))])


def _metrics(tc, model, g, emb, eids, cfg, held, sampler, salt) -> tuple[float, float, int]:
    tot = _allsum(tc, rank_metrics(model, g, emb, eids, cfg, held, sampler, salt))
    n = max(tot[2], 1.0)
    return tot[0] / n, tot[1] / n, int(tot[2])


# --------------------------------------------------------------------------- the run
def _check_inputs(cfg: LinkConfig, g, tc) -> dict[str, np.ndarray]:
    """Every trainer raises the same InputError before any training step."""
    with agreed(tc):
        if cfg.feat not in g.ndata:
            raise InputError(f"{cfg.part_config}: graph {g.graph_name!r} has no node feature {cfg.feat!r} "
                             f"(setting feat); it has {sorted(g.ndata)}")
        if tc.Get_rank() == 0:
            check_run_dir(cfg.run_dir)
    held = HeldOut(cfg.val_frac, cfg.test_frac, cfg.split_seed)
    masks = held.masks(g)
    book = g.get_partition_book()
    shares = {}
    with agreed(tc):
        for key in ("train", "val", "test"):
            shares[key] = edge_split(masks[key], book).numpy()
        del masks
        counts = _allsum(tc, [len(shares[k]) for k in ("train", "val", "test")])
        if counts[0] < tc.Get_size() * cfg.batch_size:
            raise InputError(f"{cfg.part_config}: {int(counts[0])} training edges for {tc.Get_size()} trainers "
                             f"and batch_size={cfg.batch_size}; every trainer needs a full batch "
                             "(use a smaller batch_size or test_frac)")
        if counts[2] < 1:
            raise InputError(f"{cfg.part_config}: test_frac={cfg.test_frac} holds out no edge of "
                             f"{g.num_edges()}; use a larger test_frac")
    return shares


def _sparse_step(sparse: SparseAdagrad, emb: DistEmbedding, tc, ordered: bool) -> None:
    """Apply the embedding updates of every trainer and make them visible."""
    if ordered:
        for r in range(tc.Get_size()):
            if r == tc.Get_rank():
                sparse.step()
            emb.weight.barrier()
    else:
        sparse.step()
        emb.weight.barrier()


def _save_table(path: str, t, chunk_rows: int = 1 << 16) -> None:
    """Write every row of DistTensor ``t`` to an ``.npy`` file, a chunk at a time."""
    out = np.lib.format.open_memmap(path + ".tmp.npy", mode="w+", dtype=np.float32, shape=tuple(t.shape))
    for a in range(0, t.shape[0], chunk_rows):
        b = min(t.shape[0], a + chunk_rows)
        out[a:b] = np.asarray(t[np.arange(a, b)])
    out.flush()
    del out
    os.replace(path + ".tmp.npy", path)


def run(cfg: LinkConfig) -> dict | None:
    """Train and evaluate; returns the final metrics on trainers (servers and
    samplers serve inside ``hpcgnn.initialize`` and never return)."""
    ctx, tc, g = start(cfg)
    me = tc.Get_rank()
    shares = _check_inputs(cfg, g, tc)
    held = HeldOut(cfg.val_frac, cfg.test_frac, cfg.split_seed)
    feat_dim = int(g.ndata[cfg.feat].shape[1])

    seed_all(cfg.seed)
    with agreed(tc):
        model = LinkModel(feat_dim + cfg.emb_dim, cfg.hidden, cfg.num_layers, cfg.dropout, cfg.scorer, cfg.model)
    init_rng = np.random.default_rng([cfg.seed, 0xE3B, me])
    emb = DistEmbedding(g.num_nodes(), cfg.emb_dim, name="link_prediction_node_emb",
                        init_func=lambda shape, dtype: (0.1 * init_rng.standard_normal(shape)).astype(np.float32),
                        ctx=ctx)
    sparse = SparseAdagrad([emb], lr=cfg.emb_lr)
    meta = {"fanouts": json.dumps(cfg.fanouts), "batch_size": cfg.batch_size, "seed": cfg.seed,
            "num_negs": cfg.num_negs, "scorer": cfg.scorer, "emb_dim": cfg.emb_dim, "model_name": cfg.model,
            "held_out": json.dumps(["node pairs", cfg.val_frac, cfg.test_frac, cfg.split_seed])}
    tensors = {"embedding": emb.weight, "embedding_adagrad_sum": sparse.state[emb.name]}
    trainer = Trainer(model, lr=cfg.lr, run_dir=cfg.run_dir, device="cpu", ctx=ctx,   # CPU only (the GPU path:
                      checkpoint_every=cfg.checkpoint_every, max_steps=cfg.max_steps,  # node classification)
                      resume=cfg.resume, progress=cfg.progress, graph=g, meta=meta, tensors=tensors,
                      name="hpcgnn link prediction", lr_given="lr" in getattr(cfg, "given", {"lr"}))
    sampler = NeighborSampler(cfg.fanouts)
    train_loader = DistEdgeDataLoader(g, shares["train"], sampler, cfg.batch_size, shuffle=True, drop_last=False,
                                      negative_sampler=Uniform(cfg.num_negs), exclude="self", seed=cfg.seed,
                                      prefetch=cfg.prefetch, feat=cfg.feat)
    n_sets = _allsum(tc, [len(shares[k]) for k in ("train", "val", "test")])
    ordered = cfg.emb_updates == "ordered"
    ddp, opt = trainer.ddp, trainer.optimizer

    def train_step(b):
        held.drop_from(b)
        opt.zero_grad()
        sparse.zero_grad()
        logits = ddp(_inputs(b, emb), b, b.edge_label_index)
        loss = F.binary_cross_entropy_with_logits(logits, b.edge_label)
        loss.backward()
        opt.step()
        _sparse_step(sparse, emb, tc, ordered)
        return loss, ((logits > 0).float() == b.edge_label).sum(), len(b.edge_label)

    def evaluate(epoch):
        if cfg.val_frac <= 0:
            return {"val_mrr": None}
        return {"val_mrr": _metrics(tc, model, g, emb, shares["val"], cfg, held, sampler, 1000 + epoch)[0]}

    fit = trainer.fit(train_loader, step_fn=train_step, epochs=cfg.epochs, evaluate=evaluate,
                      eval_every=cfg.eval_every, eval_keys=("val_mrr",),
                      describe=f"{g}, edges train/val/test "
                      f"{int(n_sets[0])}/{int(n_sets[1])}/{int(n_sets[2])}")
    if fit.stopped:
        memory = finalize_and_report(ctx, tc.Get_rank() == 0)
        return {"stopped": True, "step": fit.step, "model": model, "memory": memory}

    t0 = time.perf_counter()
    hk = f"hits@{cfg.hits_k}"
    result = {}
    if cfg.val_frac > 0:
        result["val_mrr"], result[f"val_{hk}"], _ = _metrics(tc, model, g, emb, shares["val"], cfg, held,
                                                             sampler, 1)
    result["test_mrr"], result[f"test_{hk}"], result["test_edges"] = _metrics(tc, model, g, emb, shares["test"],
                                                                              cfg, held, sampler, 2)
    result["eval_s"] = time.perf_counter() - t0
    if me == 0:
        _save_table(os.path.join(cfg.run_dir, "embedding.npy"), emb.weight)
    result = trainer.finish(result)
    barrier(tc)                 # trainer 0 has read the whole table before anyone finalizes
    result["memory"] = finalize_and_report(ctx, me == 0)
    if me == 0:                 # the metrics stay the last lines
        print(f"test MRR: {result['test_mrr']:.4f}", flush=True)
        print(f"test {hk}: {result[f'test_{hk}']:.4f}", flush=True)
    result["model"] = model
    return result


def main(argv=None, prog: str = "link_prediction.py") -> int:
    cfg = settings_or_exit(parse_args, argv, prog)
    if cfg is None:
        return 2
    return run_or_exit(run, cfg, prog)


if __name__ == "__main__":
    sys.exit(main())
