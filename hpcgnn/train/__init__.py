"""Training: GraphSAGE node classification, layer-wise inference, checkpoints, run logs."""
