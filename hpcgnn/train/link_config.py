"""Settings of the link-prediction loop (:mod:`hpcgnn.train.link_prediction`):
defaults < ``--config FILE.toml`` < flags, unknown keys rejected naming the closest."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InputError
from .config import HELP as _BASE_HELP
from .config import from_mapping as _from_mapping
from .config import parse_settings

@dataclass
class LinkConfig:
    part_config: str = ""
    graph_name: str | None = None
    layout: str = "servers=1,samplers=0,trainers=rest"
    ranks_per_node: int | None = None
    feat: str = "feat"
    epochs: int = 3
    batch_size: int = 256
    fanouts: list = field(default_factory=lambda: [10, 5])
    hidden: int = 64
    dropout: float = 0.0
    lr: float = 0.003
    emb_dim: int = 16
    emb_lr: float = 0.05
    emb_updates: str = "concurrent"
    num_negs: int = 1
    scorer: str = "mlp"
    model: str = "sage"
    val_frac: float = 0.05
    test_frac: float = 0.1
    split_seed: int = 0
    eval_negatives: int = 50
    hits_k: int = 10
    eval_batch_size: int = 256
    eval_every: int = 1
    seed: int = 0
    prefetch: int = 2
    threads: int = 0
    run_dir: str = "runs/link_prediction"
    checkpoint_every: int = 0
    resume: bool = False
    max_steps: int = 0
    progress: str = "auto"

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)


HELP = {**_BASE_HELP, **{
    'feat': 'node feature (input = this feature concatenated with the learnable embedding)',
    'fanouts': 'neighbours per hop, seeds first, e.g. 10,5',
    'emb_dim': 'dimension of the learnable per-node embedding (DistEmbedding)',
    'emb_lr': 'SparseAdagrad learning rate of the embedding',
    'emb_updates': ('concurrent (one barrier per step) or ordered (trainers update the embeddings in turn: '
                    'bitwise reproducible, T barriers per step)'),
    'num_negs': 'negative pairs per training edge (Uniform(k))',
    'scorer': 'edge scorer: mlp (MLP of h_u*h_v) or dot (h_u . h_v)',
    'model': 'encoder: sage, sage-pyg, gcn, gat, gin or package.module:ClassName (output width: hidden)',
    'val_frac': 'fraction of edges held out for validation (by a hash of the edge id)',
    'test_frac': 'fraction of edges held out for the test',
    'split_seed': 'seed of the held-out edge hash and of the evaluation negatives',
    'eval_negatives': 'random negative destinations each held-out edge is ranked against',
    'hits_k': 'K of hits@K',
    'eval_batch_size': 'held-out edges per evaluation batch',
    'eval_every': 'validation MRR every N epochs (0: never)',
}}

_CHOICES = {"emb_updates": ("ordered", "concurrent"), "scorer": ("mlp", "dot"),
            "progress": ("auto", "on", "off")}


def from_mapping(data: dict, where: str, base: LinkConfig | None = None) -> LinkConfig:
    return _from_mapping(data, where, base, LinkConfig)


def parse_args(argv=None, prog: str = "link_prediction.py") -> LinkConfig:
    """``[--config FILE.toml] [--key value ...]`` -> a checked :class:`LinkConfig`
    (defaults < TOML file < flags; unknown keys name the closest one)."""
    cfg = parse_settings(LinkConfig, HELP, argv, prog, "Link prediction with GraphSAGE and learnable node "
                         "embeddings on a partitioned graph (run under mpirun/srun).")
    for name, allowed in _CHOICES.items():
        if getattr(cfg, name) not in allowed:
            raise InputError(f"{prog}: {name} must be one of {', '.join(allowed)}, got {getattr(cfg, name)!r}")
    for name in ("epochs", "batch_size", "hidden", "emb_dim", "num_negs", "eval_negatives", "hits_k",
                 "eval_batch_size"):
        if getattr(cfg, name) < 1:
            raise InputError(f"{prog}: {name} must be >= 1, got {getattr(cfg, name)}")
    if not (0 <= cfg.val_frac and 0 < cfg.test_frac and cfg.val_frac + cfg.test_frac < 1):
        raise InputError(f"{prog}: need 0 <= val_frac, 0 < test_frac and val_frac + test_frac < 1, got "
                         f"val_frac={cfg.val_frac}, test_frac={cfg.test_frac}")
    if not (cfg.lr > 0 and cfg.emb_lr > 0 and 0 <= cfg.dropout < 1):
        raise InputError(f"{prog}: lr and emb_lr must be > 0 and dropout in [0, 1), got lr={cfg.lr}, "
                         f"emb_lr={cfg.emb_lr}, dropout={cfg.dropout}")
    return cfg
