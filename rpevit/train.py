"""Training loop (nanoGPT-style, one sitting): AdamW, linear warmup + cosine decay, label
smoothing, gradient clipping; bf16 autocast and optional torch.compile on CUDA, fp32 on CPU.

Protocol of seed 001: validate every epoch, test the best-validation weights. Each epoch ends
with an atomic checkpoint holding everything needed for an exact resume (model, optimizer,
scheduler, data-order generator, RNG states, history, best weights). A non-finite loss stops
the run with a clear message and leaves the last good checkpoint in place.
"""
from __future__ import annotations

import dataclasses
import math
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from . import data as data_lib
from . import metrics, records
from .errors import UserError
from .model import build_model
from .params import Params, fingerprint
from .variants import parse_variant


class Diverged(RuntimeError):
    """Training produced a non-finite loss."""


def resolve_device(name: str) -> torch.device:
    """'auto' → cuda if available else cpu; 'cuda' without a GPU is a user error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("train.device: 'cuda' was asked for but no CUDA GPU is visible; use 'auto' or 'cpu'.")
    return torch.device(name)


def autocast(device: torch.device, amp: str):
    """bf16 autocast on CUDA ('auto' or 'bf16'); fp32 elsewhere."""
    enabled = device.type == "cuda" and amp in ("auto", "bf16")
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled)


def param_groups(model, weight_decay: float) -> list[dict]:
    """AdamW groups: no decay for biases, norms and parameters tagged `no_weight_decay`."""
    decay, no_decay = [], []
    for param in model.parameters():
        if not param.requires_grad:
            continue
        skip = param.ndim <= 1 or getattr(param, "no_weight_decay", False)
        (no_decay if skip else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def warmup_cosine(warmup_steps: int, total_steps: int, lr: float, min_lr: float):
    """LR multiplier: linear warmup to 1, then cosine decay to min_lr/lr."""
    floor = min_lr / lr

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


@torch.no_grad()
def predict(model, split, info, batch_size: int, device, amp: str = "off", interpolate: bool = False):
    """Logits (float32, CPU) and labels for a whole split, in order."""
    model.eval()
    outputs, labels = [], []
    for x, y in data_lib.batches(split, info, batch_size, shuffle=False):
        with autocast(device, amp):
            outputs.append(model(x.to(device), interpolate=interpolate).float().cpu())
        labels.append(y.cpu())
    return torch.cat(outputs), torch.cat(labels)


def _rng_state(device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, device) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def run_settings(params: Params, info, epochs: int | None = None):
    """The model config (sized for the dataset) and train config one run uses."""
    train_cfg = params.train if epochs is None else dataclasses.replace(params.train, epochs=epochs)
    model_cfg = dataclasses.replace(params.model, image_size=info.image_size, channels=info.channels,
                                    num_classes=info.num_classes)
    return model_cfg, train_cfg


def run_key(params: Params, info, variant: str, seed: int, epochs: int | None = None) -> str:
    """Identity of a run's result: a record or checkpoint is reused only if its key matches."""
    model_cfg, train_cfg = run_settings(params, info, epochs)
    return f"{parse_variant(variant).name}|{info.name}|{seed}|" + fingerprint(params.data, model_cfg, train_cfg)


def train_run(params: Params, dataset, variant: str, seed: int, out_dir: Path, *, epochs: int | None = None,
              resume: bool = True, progress: bool = False, on_epoch_end=None) -> dict:
    """Train one variant on a loaded dataset, test the best-validation weights, write the record.

    `resume` continues from out_dir's checkpoint when it was made with the same settings.
    `on_epoch_end(row)` is called after each epoch's checkpoint is safely on disk.
    """
    out_dir = Path(out_dir)
    info = dataset.info
    model_cfg, train_cfg = run_settings(params, info, epochs)
    variant = parse_variant(variant).name
    key = run_key(params, info, variant, seed, epochs)
    device = resolve_device(train_cfg.device)
    recipe = info.augment if params.data.augment == "auto" else params.data.augment

    torch.manual_seed(seed)
    model = build_model(variant, model_cfg).to(device)
    optimizer = torch.optim.AdamW(param_groups(model, train_cfg.weight_decay), lr=train_cfg.lr)
    steps_per_epoch = data_lib.num_batches(len(dataset.train), train_cfg.batch_size)
    schedule = warmup_cosine(max(1, round(train_cfg.warmup_epochs * steps_per_epoch)),
                             train_cfg.epochs * steps_per_epoch, train_cfg.lr, train_cfg.min_lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    generator = torch.Generator().manual_seed(seed)
    history: list[dict] = []
    best = {"val_acc": -1.0, "epoch": 0, "state": None}
    start_epoch = 0

    checkpoint_path = out_dir / records.CHECKPOINT
    if resume and checkpoint_path.is_file():
        checkpoint = records.load_checkpoint(checkpoint_path)
        if checkpoint.get("key") == key:
            model.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            scheduler.load_state_dict(checkpoint["scheduler"])
            generator.set_state(checkpoint["generator"])
            _set_rng_state(checkpoint["rng"], device)
            history, best, start_epoch = checkpoint["history"], checkpoint["best"], checkpoint["epoch"]
            print(f"[{variant} | {info.name} | seed {seed}] resuming after epoch {start_epoch}")
        else:
            print(f"[{variant} | {info.name} | seed {seed}] the checkpoint in {out_dir} was made with other "
                  "settings; starting this run afresh")

    forward = torch.compile(model) if (train_cfg.compile and device.type == "cuda") else model
    metrics.reset_peak_memory(device)
    for epoch in range(start_epoch, train_cfg.epochs):
        model.train()
        loss_sum, correct, seen = torch.zeros((), device=device), torch.zeros((), device=device), 0
        batch_iter = data_lib.batches(dataset.train, info, train_cfg.batch_size, shuffle=True,
                                      generator=generator, recipe=recipe)
        if progress:
            from tqdm.auto import tqdm
            batch_iter = tqdm(batch_iter, total=steps_per_epoch, leave=False,
                              desc=f"{variant} {info.name} epoch {epoch + 1}/{train_cfg.epochs}")
        with metrics.Timer(device) as timer:
            for step, (x, y) in enumerate(batch_iter):
                with autocast(device, train_cfg.amp):
                    logits = forward(x)
                loss = F.cross_entropy(logits.float(), y, label_smoothing=train_cfg.label_smoothing)
                if not torch.isfinite(loss):
                    kept = f"the last good checkpoint (epoch {epoch}) is kept at {checkpoint_path}" \
                        if epoch else "no epoch had finished, so no checkpoint was written"
                    raise Diverged(f"{variant} on {info.name} (seed {seed}): non-finite loss "
                                   f"({loss.item()}) at epoch {epoch + 1}, step {step + 1}; {kept}.")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if train_cfg.grad_clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
                optimizer.step()
                scheduler.step()
                loss_sum += loss.detach() * len(y)
                correct += (logits.argmax(-1) == y).sum()
                seen += len(y)
        val_logits, val_labels = predict(model, dataset.val, info, train_cfg.eval_batch_size, device,
                                         train_cfg.amp)
        row = {"epoch": epoch + 1, "train_loss": loss_sum.item() / seen, "train_acc": correct.item() / seen,
               "val_loss": F.cross_entropy(val_logits, val_labels).item(),
               "val_acc": (val_logits.argmax(-1) == val_labels).float().mean().item(),
               "lr": optimizer.param_groups[0]["lr"], "seconds": timer.seconds}
        history.append(row)
        if row["val_acc"] > best["val_acc"]:
            best = {"val_acc": row["val_acc"], "epoch": epoch + 1,
                    "state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}}
        records.save_checkpoint(checkpoint_path, {
            "key": key, "epoch": epoch + 1, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "generator": generator.get_state(),
            "rng": _rng_state(device), "history": history, "best": best})
        records.write_csv(out_dir / records.HISTORY, history)
        print(f"[{variant} | {info.name} | seed {seed}] epoch {epoch + 1}/{train_cfg.epochs} "
              f"train loss {row['train_loss']:.4f} acc {row['train_acc']:.4f} | "
              f"val loss {row['val_loss']:.4f} acc {row['val_acc']:.4f} | {row['seconds']:.1f}s", flush=True)
        if on_epoch_end is not None:
            on_epoch_end(row)
    train_peak_mb = metrics.peak_memory_mb(device)

    model.load_state_dict(best["state"])
    test_logits, test_labels = predict(model, dataset.test, info, train_cfg.eval_batch_size, device,
                                       train_cfg.amp)
    num_params = metrics.count_parameters(model)
    timing_images = dataset.test.images[:train_cfg.timing_images]
    timing_images = data_lib.normalize(timing_images.float() / 255, info).to(device)
    epoch_seconds = [row["seconds"] for row in history]
    record = {
        "preset": params.name, "dataset": info.name, "variant": variant,
        "backend": parse_variant(variant).backend, "positions": list(parse_variant(variant).positions),
        "seed": seed, "status": "finished", "key": key,
        "epochs": train_cfg.epochs, "best_epoch": best["epoch"], "best_val_acc": best["val_acc"],
        **metrics.classification_metrics(test_logits, test_labels, num_params),
        "num_params": num_params,
        "flops_per_image": metrics.matmul_flops(model, timing_images[:2]),
        "train_seconds_per_epoch": sum(epoch_seconds) / len(epoch_seconds),
        "train_images_per_second": len(dataset.train) * len(epoch_seconds) / sum(epoch_seconds),
        **metrics.inference_timing(model, timing_images, batch_size=train_cfg.eval_batch_size),
        "peak_memory_mb": train_peak_mb,
        "device": str(device), "device_name": _device_name(device), "amp": _amp_name(device, train_cfg.amp),
        "compiled": forward is not model, "torch": torch.__version__,
        "data_source": dataset.source, "augment": recipe,
        "config": {"data": dataclasses.asdict(params.data), "model": dataclasses.asdict(model_cfg),
                   "train": dataclasses.asdict(train_cfg)},
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    records.write_json(out_dir / records.RECORD, record)
    return record


def _device_name(device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu")


def _amp_name(device, amp: str) -> str:
    return "bf16" if device.type == "cuda" and amp in ("auto", "bf16") else "fp32"
