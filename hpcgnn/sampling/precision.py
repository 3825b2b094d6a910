"""Half-precision features (``hpcgnn partition --feat-dtype bf16|fp16``): gathered
so, handed to the model as float32."""
from __future__ import annotations

import torch

#: The half-precision feature dtypes.
HALF = (torch.bfloat16, torch.float16)


def float_features(x):
    """``x`` as float32 when it holds half-precision features, else as it is."""
    if isinstance(x, torch.Tensor) and x.dtype in HALF:
        return x.float()
    return x
