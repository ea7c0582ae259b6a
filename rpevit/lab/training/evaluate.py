"""Evaluation of finished runs after training: multi-resolution tests (Heo et al. 2024, RoPE-ViT
§4.1; seed 004) at other input resolutions without fine-tuning, and re-timing of inference (`retime`).

Test images are resized with antialiasing. Two position modes, labelled in every result:
- "extrapolate": positions are rebuilt from the new grid (rotary, ALiBi, iRPE, KRPE-clamp extend
  to the larger grid as they are);
- "interpolate": positions are scaled into the trained range (Chen et al. 2023 position
  interpolation: rotary methods, ALiBi and iRPE offsets, sin-cos APE, the STRING gate; the KRPE
  table is resized).
Learned APE and the IRPE-Gate tables are resized in both modes, so for variants whose methods
ignore position interpolation the two modes coincide and only "extrapolate" is run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...core import data as data_lib
from ...core import metrics
from ...core.errors import UserError
from ...core.loop import predict
from ...core.variants import parse_variant
from ..store import records
from ..store.run import Run, train_config_for
from . import runs

MODES = ("extrapolate", "interpolate")


def resize_split(split, size: int) -> data_lib.Split:
    """The split's images resized to size×size (antialiased bilinear), back to uint8."""
    if split.images.shape[-1] == size:
        return split
    images = F.interpolate(
        split.images.float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False
    )
    return data_lib.Split(images.round().clamp(0, 255).to(torch.uint8), split.labels)


def position_modes(variant: str) -> tuple[str, ...]:
    """The modes that differ for this variant: both if any of its methods follows position scaling."""
    from ...core.position import POSITIONS

    scalable = any(POSITIONS[p].follows_grid_scale for p in parse_variant(variant).positions)
    return MODES if scalable else ("extrapolate",)


def evaluate_resolutions(run: Run, dataset, resolutions) -> list[dict]:
    """Evaluate a finished run's best weights at each resolution and mode; store them in its record
    (under the run's lock: RunBusy while another process trains it)."""
    patch = run.params.model.patch_size
    bad = [r for r in resolutions if r % patch or r < patch]
    if bad:
        raise UserError(f"resolutions {bad} are not positive multiples of the patch size {patch}.")
    with run.lock():
        return _evaluate(run, dataset, resolutions)


def _evaluate(run: Run, dataset, resolutions) -> list[dict]:
    model, record = runs.trained_model(run)
    train_cfg = train_config_for(run.params, record["epochs"])
    device = next(model.parameters()).device
    results = []
    for size in resolutions:
        split = resize_split(dataset.test, size)
        for mode in position_modes(run.variant):
            print(f"[{run.label}] testing at {size}×{size} ({mode})", flush=True)
            logits, labels = predict(
                model,
                split,
                dataset.info,
                train_cfg.eval_batch_size,
                device,
                train_cfg.amp,
                interpolate=mode == "interpolate",
            )
            scores = metrics.classification_metrics(logits, labels, record["num_params"])
            results.append(
                {
                    "resolution": size,
                    "mode": mode,
                    "trained_resolution": dataset.info.image_size,
                    "top1": scores["top1"],
                    "top5": scores["top5"],
                    "log_likelihood": scores["log_likelihood"],
                    "correct": metrics.correct_string(logits, labels),
                }
            )
    record["resolution_eval"] = results
    records.write_json(run.dir / records.RECORD, record)
    return results


def retime(run: Run, dataset) -> dict:
    """Time a finished run's inference again (its tested weights, the same images and batch size as
    training's timing, in the precision and compile state the record states) and store the new times
    with the machine's load in its record. For timings first
    taken on a busy machine (metrics.busy): run it when the machine is quiet."""
    with run.lock():
        model, record = runs.trained_model(run)
        train_cfg = train_config_for(run.params, record["epochs"])
        images = runs.timing_images(dataset, train_cfg, next(model.parameters()).device)
        record.update(
            metrics.inference_timing(
                model,
                images,
                batch_size=train_cfg.eval_batch_size,
                amp="bf16" if record.get("amp") == "bf16" else "off",
                compile_model=bool(record.get("compiled")) and images.device.type == "cuda",  # as train compiles
            )
        )
        record.update(metrics.machine_load())
        records.write_json(run.dir / records.RECORD, record)
    return record
