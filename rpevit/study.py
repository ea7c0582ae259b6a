"""Study runner: a preset's grid (datasets × variants × seeds) → run records → summary tables.

Finished runs (a record whose key matches the preset's settings) are skipped and interrupted
runs resume from their last checkpoint, so a study stopped at any point continues where it
stopped and nothing finished is recomputed. A diverged run is recorded as such, not retried.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from . import records
from .data import DATASETS, load_dataset
from .evaluate import evaluate_resolutions
from .params import PROJECT_ROOT, Params
from .train import Diverged, resolve_device, run_key, train_run
from .variants import parse_variant

REPORTS_ROOT = Path(os.environ.get("RPEVIT_REPORTS", PROJECT_ROOT / "reports"))

SUMMARY_COLUMNS = [
    "dataset", "variant", "backend", "positions", "seed", "status", "epochs", "best_epoch", "best_val_acc",
    "top1", "top5", "precision", "recall", "f1", "log_likelihood", "aic", "bic", "num_params",
    "flops_per_image", "train_seconds_per_epoch", "train_images_per_second", "ms_per_image_batched",
    "ms_single_image", "peak_memory_mb", "device", "amp",
]


def grid(params: Params) -> list[tuple[str, str, int]]:
    """The (dataset, canonical variant, seed) triples of a preset."""
    return [(d, parse_variant(v).name, s) for d in params.datasets for v in params.variants for s in params.seeds]


def is_finished(params: Params, dataset: str, variant: str, seed: int, runs_root=None) -> bool:
    """True if the run has a record made with the preset's current settings."""
    record = records.read_record(records.run_dir(params.name, dataset, variant, seed, runs_root))
    return record is not None and record.get("key") == run_key(params, DATASETS[dataset], variant, seed)


def run_study(params: Params, *, runs_root=None, reports_root=None, progress: bool = False) -> list[dict]:
    """Run every missing run of the preset's grid, then write the summary; returns the records."""
    todo = [run for run in grid(params) if not is_finished(params, *run, runs_root=runs_root)]
    total = len(grid(params))
    print(f"study {params.name}: {total} runs, {total - len(todo)} already finished, {len(todo)} to run",
          flush=True)
    for dataset_name in params.datasets:
        pending = [(v, s) for d, v, s in todo if d == dataset_name]
        unevaluated = [(v, s) for d, v, s in grid(params) if d == dataset_name and (v, s) not in pending
                       and needs_resolution_eval(params, d, v, s, runs_root)]
        if not pending and not unevaluated:
            continue
        dataset = load_dataset(dataset_name, root=params.data.root, download=params.data.download,
                               device=resolve_device(params.train.device), split_seed=params.data.split_seed,
                               val_size=params.data.val_size)
        for variant, seed in pending:
            out_dir = records.run_dir(params.name, dataset_name, variant, seed, runs_root)
            try:
                train_run(params, dataset, variant, seed, out_dir, resume=True, progress=progress)
            except Diverged as exc:
                print(f"diverged: {exc}", flush=True)
                records.write_json(out_dir / records.RECORD, {
                    "preset": params.name, "dataset": dataset_name, "variant": variant, "seed": seed,
                    "backend": parse_variant(variant).backend, "positions": list(parse_variant(variant).positions),
                    "status": "diverged", "message": str(exc),
                    "key": run_key(params, DATASETS[dataset_name], variant, seed)})
        for variant, seed in pending + unevaluated:
            if needs_resolution_eval(params, dataset_name, variant, seed, runs_root):
                evaluate_resolutions(params, dataset, variant, seed, params.evaluate.resolutions, runs_root)
    results = study_records(params, runs_root)
    write_summary(params.name, results, reports_root)
    return results


def needs_resolution_eval(params: Params, dataset: str, variant: str, seed: int, runs_root=None) -> bool:
    """True if a finished run lacks the preset's multi-resolution evaluation."""
    if not params.evaluate.resolutions:
        return False
    record = records.read_record(records.run_dir(params.name, dataset, variant, seed, runs_root))
    if record is None or record.get("status") != "finished":
        return False
    done = {row["resolution"] for row in record.get("resolution_eval", [])}
    return done != set(params.evaluate.resolutions)


def study_records(params: Params, runs_root=None) -> list[dict]:
    """The current records of the preset's grid, in grid order."""
    found = []
    for dataset, variant, seed in grid(params):
        record = records.read_record(records.run_dir(params.name, dataset, variant, seed, runs_root))
        if record is not None and record.get("key") == run_key(params, DATASETS[dataset], variant, seed):
            found.append(record)
    return found


def _cell(column: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if column in ("top1", "top5", "precision", "recall", "f1", "best_val_acc"):
        return f"{100 * value:.2f}"
    if column == "positions":
        return "+".join(value) or "none"
    if column == "flops_per_image":
        return f"{value / 1e6:.2f}M"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def write_summary(preset: str, results: list[dict], reports_root=None) -> Path:
    """reports/<preset>/summary.csv (raw numbers) and summary.md (rounded; accuracies in %)."""
    out = Path(reports_root or REPORTS_ROOT) / preset
    rows = [{c: (("+".join(r[c]) or "none") if c == "positions" and c in r else r.get(c)) for c in SUMMARY_COLUMNS}
            for r in results]
    records.write_csv(out / "summary.csv", rows)
    lines = [f"# {preset}: summary of {len(results)} runs", "",
             "Accuracies, precision, recall and F1 (macro) in %; log-likelihood on the test set; "
             "FLOPs are forward matmul FLOPs per image; timing on the device named.", "",
             "| " + " | ".join(SUMMARY_COLUMNS) + " |", "|" + "---|" * len(SUMMARY_COLUMNS)]
    lines += ["| " + " | ".join(_cell(c, r.get(c)) for c in SUMMARY_COLUMNS) + " |" for r in results]
    records.write_text(out / "summary.md", "\n".join(lines) + "\n")
    return out
