"""Training: the model-agnostic runtime (:class:`Trainer`), the model zoo, layer-wise
inference, checkpoints and run logs; the built-in tasks (node classification, link
prediction, R-GCN/R-GAT) are clients of the runtime."""
from .inference import layerwise_inference
from .trainer import FitResult, Trainer
from .zoo import GAT, GCN, GIN, MODELS, SAGEPyG, build_model

__all__ = ["Trainer", "FitResult", "layerwise_inference", "build_model", "MODELS", "GCN", "GAT", "GIN", "SAGEPyG"]
