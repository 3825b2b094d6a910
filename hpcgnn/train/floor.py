"""The model-only floor of an epoch: the same batches, staged on the device before
the clock starts, replayed through a copy of the model and its optimizer.  What an
epoch would take if sampling, gathering and copying cost nothing (``hpcgnn train
--floor-steps N``, ``bench/gpu_bench.py``'s ``floor_epoch_s``)."""
from __future__ import annotations

import copy
import time

import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def model_floor(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader, loss_fn, steps: int,
                device) -> dict:
    """Local: seconds per step of ``loss_fn(model_copy, batch)``, backward and an
    optimizer step over the first ``steps`` batches of ``loader`` (a fresh loader:
    its next epoch is read), every batch staged on ``device`` first (its blocks
    built, its tensors there).  The model and optimizer given are copied, not
    changed.  ``{"floor_step_s", "floor_steps"}``."""
    device = torch.device(device)
    batches = []
    it = iter(loader)
    for b in it:
        batches.append(b.stage(device))
        if len(batches) >= steps:
            break
    it.close()                        # its producer stopped: nothing else runs while the clock does
    m = copy.deepcopy(model)
    opt = type(optimizer)(m.parameters(), **optimizer.defaults)

    def step(b):
        out = loss_fn(m, b)
        loss = out[0] if isinstance(out, tuple) else out
        opt.zero_grad()
        loss.backward()
        opt.step()

    if not batches:
        return {"floor_step_s": None, "floor_steps": 0}
    step(batches[0])                  # warm-up: kernels chosen, memory allocated
    _sync(device)
    t0 = time.perf_counter()
    for b in batches:
        step(b)
    _sync(device)
    return {"floor_step_s": (time.perf_counter() - t0) / len(batches), "floor_steps": len(batches)}
