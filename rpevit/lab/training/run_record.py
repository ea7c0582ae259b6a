"""The record a run writes when it ends: a finished run tests its best-validation weights, counts
FLOPs and times inference (`record_finished_run`); a run whose loss turned non-finite writes a
`diverged` record (`write_diverged`). Both are the schema's fields (rpevit/lab/schema.py)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ...core import metrics
from ...core.device import device_name
from ...core.loop import predict
from .. import revision
from ..schema import FINISHED, make_record
from ..store import records
from ..store.run import Run
from . import runs


def write_diverged(run: Run, out_dir: Path, exc: Exception) -> None:
    """The `diverged` record of a run whose loss turned non-finite (its message says where)."""
    records.write_json(
        out_dir / records.RECORD,
        make_record(
            preset=run.params.name,
            dataset=run.dataset,
            variant=run.variant,
            seed=run.seed,
            backend=run.parsed.backend,
            positions=list(run.parsed.positions),
            status="diverged",
            message=str(exc),
            key=run.key,
            config=run.config,
        ),
    )


def record_finished_run(
    run: Run, dataset, state, out_dir: Path, device, precision: str, compiled: bool, compile_seconds, replica
) -> dict:
    """Test the best-validation weights, count FLOPs, time inference and write the run's record."""
    train_cfg, info, model, history, best = run.train_config, dataset.info, state.model, state.history, state.best
    train_peak_mb = metrics.peak_memory_mb(device)
    records.write_csv(out_dir / records.HISTORY, history)  # complete even if a kill came before its last write

    print(
        f"[{run.label}] testing the best-validation weights (epoch {best['epoch']}), counting FLOPs, timing inference",
        flush=True,
    )
    model.load_state_dict(best["state"])
    test_logits, test_labels = predict(model, dataset.test, info, train_cfg.eval_batch_size, device, train_cfg.amp)
    num_params = metrics.count_parameters(model)
    timing_images = runs.timing_images(dataset, train_cfg, device)
    epoch_seconds = [row["seconds"] for row in history]
    record = make_record(
        **{
            "preset": run.params.name,
            "dataset": run.dataset,
            "variant": run.variant,
            "backend": run.parsed.backend,
            "positions": list(run.parsed.positions),
            "seed": run.seed,
            "status": FINISHED,
            "key": run.key,
            "epochs": train_cfg.epochs,
            "best_epoch": best["epoch"],
            "best_val_acc": best["val_acc"],
            "budgets": state.branches,
            "continued_from": state.continued_from,
            **metrics.classification_metrics(test_logits, test_labels, num_params),
            # per-image test predictions (space-separated class indices, in test-split order): paired statistics
            "test_predictions": " ".join(map(str, test_logits.argmax(-1).tolist())),
            "test_correct": metrics.correct_string(test_logits, test_labels),
            "num_params": num_params,
            "flops_per_image": metrics.matmul_flops(model, timing_images[:2]),
            "train_seconds_per_epoch": sum(epoch_seconds) / len(epoch_seconds),
            "train_cpu_seconds_per_epoch": _mean_cpu_seconds(history),
            "train_images_per_second": len(dataset.train) * len(epoch_seconds) / sum(epoch_seconds),
            **metrics.inference_timing(
                model,
                timing_images,
                batch_size=train_cfg.eval_batch_size,
                amp="bf16" if precision == "bf16" else "off",
                compile_model=compiled,
            ),
            **metrics.machine_load(),
            "peak_memory_mb": train_peak_mb,
            "device": str(device),
            "device_name": device_name(device),
            "amp": precision,
            "compiled": compiled,
            "compile_seconds": compile_seconds,
            "torch": torch.__version__,
            "code_revision": revision.code_revision(),
            "code_revisions": state.revisions,
            "device_names": state.devices,
            "data_source": dataset.source,
            "augment": state.recipe,
            "config": run.config,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "world_size": replica.world_size,
        }
    )
    records.write_json(out_dir / records.RECORD, record)
    return record


def _mean_cpu_seconds(history: list[dict]) -> float | None:
    """The mean CPU seconds per epoch, None if the history (begun before they were recorded) has none."""
    if not history or any("cpu_seconds" not in row for row in history):
        return None
    return sum(float(row["cpu_seconds"]) for row in history) / len(history)
