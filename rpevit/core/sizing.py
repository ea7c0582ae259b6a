"""Model-size sanity before anything is allocated: parameters and activation memory per batch,
estimated from a run's settings and compared with the memory of the device it would train on."""

from __future__ import annotations

import os

import torch

from .errors import UserError

BYTES = 4  # fp32 weights, gradients, optimizer state and activations (an upper bound under bf16)


def estimate(model, batch_size: int, eval_batch_size: int) -> dict:
    """Rough upper estimates for one ViT: parameters, bytes of weights + gradients + AdamW state, and
    bytes of activations for one training batch (kept for backward) or one evaluation batch."""
    tokens = (model.image_size // model.patch_size) ** 2 + 1
    d, m, depth = model.dim, model.mlp_dim, model.depth
    per_block = 4 * d * d + 2 * d * m + 9 * d + m
    params = model.patch_size**2 * model.channels * d + 2 * tokens * d + depth * per_block + d * model.num_classes
    per_image = depth * tokens * (12 * d + 2 * m + 2 * model.heads * tokens)  # softmax attention: the worst case
    return {
        "tokens": tokens,
        "params": params,
        "state_bytes": 4 * BYTES * params,
        "train_bytes": BYTES * batch_size * per_image,
        "eval_bytes": BYTES * eval_batch_size * per_image // depth,
    }


def machine_memory(device) -> int:
    """Bytes of memory of the device a run would use (a CUDA device's, else this machine's RAM)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB"


def check_fits(model, train_cfg, device) -> None:
    """One UserError, with the numbers, if a run of this model and batch cannot fit the device's memory."""
    size = estimate(model, train_cfg.batch_size, train_cfg.eval_batch_size)
    need = size["state_bytes"] + max(size["train_bytes"], size["eval_bytes"])
    have = machine_memory(device)
    if need <= have:
        return
    raise UserError(
        f"the model does not fit this machine: about {size['params']:.3g} parameters "
        f"({_gb(size['state_bytes'])} with gradients and AdamW state) and {_gb(size['train_bytes'])} of "
        f"activations per training batch of {train_cfg.batch_size} images ({size['tokens']} tokens, "
        f"model.dim {model.dim}, depth {model.depth}, mlp_dim {model.mlp_dim}) — about {_gb(need)} against "
        f"{_gb(have)} of {torch.device(device).type} memory; lower model.dim, model.depth, model.mlp_dim or "
        "train.batch_size (a batch larger than the training set trains as one batch of the whole set)."
    )
