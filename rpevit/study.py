"""Study runner: a preset's grid (datasets × variants × seeds) → run records → summary tables.

Everything checkable is checked before the first run starts (runs.preflight). Finished runs (a
record whose key matches the preset's settings, also under rpevit 0.1's key scheme) are skipped
and interrupted runs resume from their last good checkpoint, so a study stopped at any point
continues where it stopped and nothing finished is recomputed. A run another live process is
training is skipped with a message; a diverged run is recorded as such, not retried; damaged
files are moved aside and the summary says what was recovered.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

from . import design, records, runs
from .errors import UserError
from .evaluate import evaluate_resolutions
from .params import PROJECT_ROOT, Params
from .schema import SUMMARY_COLUMNS
from .tables import markdown_table
from .train import Diverged, train_run
from .variants import parse_variant

REPORTS_ROOT = Path(os.environ.get("RPEVIT_REPORTS", PROJECT_ROOT / "reports"))


def grid(params: Params) -> list[tuple[str, str, int]]:
    """The (dataset, canonical variant, seed) triples of a preset, in training order (a preset with
    a design: every run it may train, primary seed-major first; rpevit.design)."""
    if params.design.active:
        return design.ordered_runs(params)
    return [(d, parse_variant(v).name, s) for d in params.datasets for v in params.variants for s in params.seeds]


def kept_dir(params: Params, dataset: str, variant: str, seed: int, reports_root=None) -> Path:
    """Where a preset with `keep_records` keeps a run's record and history in the repository."""
    return Path(reports_root or REPORTS_ROOT) / params.name / "records" / dataset / variant / f"seed{seed}"


def _current(params: Params, dataset: str, variant: str, seed: int, runs_root=None, reports_root=None):
    """(record, its directory) of the run's current record — from runs/, else the copy kept in
    reports/ — if it was made with the preset's current settings, else None."""
    for directory in (
        records.run_dir(params.name, dataset, variant, seed, runs_root),
        kept_dir(params, dataset, variant, seed, reports_root) if params.keep_records else None,
    ):
        record = None if directory is None else records.read_record(directory)
        if record is not None and runs.matches(record.get("key"), params, dataset, variant, seed):
            return record, directory
    return None


def current_record(
    params: Params, dataset: str, variant: str, seed: int, runs_root=None, reports_root=None
) -> dict | None:
    """The run's record (from runs/, else the copy kept in reports/) if it was made with the preset's
    current settings, else None."""
    found = _current(params, dataset, variant, seed, runs_root, reports_root)
    return None if found is None else found[0]


def run_history(params: Params, dataset: str, variant: str, seed: int, runs_root=None, reports_root=None):
    """Per-epoch history rows of the run whose record is current (beside that record), [] if none."""
    found = _current(params, dataset, variant, seed, runs_root, reports_root)
    return [] if found is None else records.read_history(found[1])


def _keep(params: Params, dataset: str, variant: str, seed: int, runs_root, reports_root) -> None:
    if params.keep_records:
        records.keep(
            records.run_dir(params.name, dataset, variant, seed, runs_root),
            kept_dir(params, dataset, variant, seed, reports_root),
        )


def is_finished(params: Params, dataset: str, variant: str, seed: int, runs_root=None, reports_root=None) -> bool:
    """True if the run has a record (finished or diverged) made with the preset's current settings."""
    return current_record(params, dataset, variant, seed, runs_root, reports_root) is not None


class Progress:
    """One line per event: run k of N with an ETA from the runs trained so far in this sitting."""

    def __init__(self, total: int, todo: int):
        self.total, self.todo, self.done, self.started = total, todo, 0, time.perf_counter()

    def start(self, dataset: str, variant: str, seed: int) -> None:
        elapsed = time.perf_counter() - self.started
        eta = (
            ""
            if not self.done
            else f", ETA {_minutes(elapsed / self.done * (self.todo - self.done))} for the remaining runs"
        )
        print(
            f"run {self.total - self.todo + self.done + 1} of {self.total}: {variant} on {dataset}, seed {seed}{eta}",
            flush=True,
        )

    def finish(self) -> None:
        self.done += 1


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def run_study(params: Params, *, runs_root=None, reports_root=None, progress: bool = False) -> list[dict]:
    """Run every missing run of the preset's grid, then write the summary; returns the records."""
    runs.preflight(params, runs_root=runs_root)
    records.recovered.clear()
    todo = [
        run for run in grid(params) if not is_finished(params, *run, runs_root=runs_root, reports_root=reports_root)
    ]
    total = len(grid(params))
    print(f"study {params.name}: {total} runs, {total - len(todo)} already finished, {len(todo)} to run", flush=True)
    meter = Progress(total, len(todo))
    skipped = []
    for dataset_name in params.datasets:
        pending = [(v, s) for d, v, s in todo if d == dataset_name]
        unevaluated = [
            (v, s)
            for d, v, s in grid(params)
            if d == dataset_name
            and (v, s) not in pending
            and needs_resolution_eval(params, d, v, s, runs_root, reports_root)
        ]
        if not pending and not unevaluated:
            continue
        dataset = runs.dataset_for(params, dataset_name)
        for variant, seed in pending:
            if params.design.active:  # the stopping rule and the budget decide as the runs finish
                now, why = design.due(
                    params, (dataset_name, variant, seed), study_records(params, runs_root, reports_root)
                )
                if not now:
                    print(f"not started: {variant} on {dataset_name}, seed {seed} ({why})", flush=True)
                    continue
            meter.start(dataset_name, variant, seed)
            try:
                train_run(params, dataset, variant, seed, runs_root=runs_root, resume=True, progress=progress)
            except Diverged as exc:
                print(f"diverged: {exc}", flush=True)
            except records.RunBusy as exc:
                print(f"skipped: {exc}", flush=True)
                skipped.append((dataset_name, variant, seed))
            _keep(params, dataset_name, variant, seed, runs_root, reports_root)
            meter.finish()
        for variant, seed in pending + unevaluated:
            if (dataset_name, variant, seed) in skipped or not needs_resolution_eval(
                params, dataset_name, variant, seed, runs_root, reports_root
            ):
                continue
            if not (
                records.run_dir(params.name, dataset_name, variant, seed, runs_root) / records.CHECKPOINT
            ).is_file():
                print(
                    f"[{variant} | {dataset_name} | seed {seed}] multi-resolution evaluation skipped: its "
                    "checkpoint is not on this machine (only its kept record is)",
                    flush=True,
                )
                continue
            print(
                f"[{variant} | {dataset_name} | seed {seed}] multi-resolution evaluation at "
                f"{', '.join(map(str, params.evaluate.resolutions))} px",
                flush=True,
            )
            try:
                evaluate_resolutions(params, dataset, variant, seed, params.evaluate.resolutions, runs_root)
            except UserError as exc:  # its tested weights are lost: the run is unfinished again
                print(f"not evaluated: {exc}", flush=True)
            _keep(params, dataset_name, variant, seed, runs_root, reports_root)
    results = study_records(params, runs_root, reports_root)
    write_summary(params.name, results, reports_root, notes=list(records.recovered))
    return results


def needs_resolution_eval(
    params: Params, dataset: str, variant: str, seed: int, runs_root=None, reports_root=None
) -> bool:
    """True if a finished run lacks the preset's multi-resolution evaluation."""
    if not params.evaluate.resolutions or not params.evaluate.covers(variant):
        return False
    record = current_record(params, dataset, variant, seed, runs_root, reports_root)
    if record is None or record.get("status") != "finished":
        return False
    done = {row["resolution"] for row in record.get("resolution_eval", [])}
    return done != set(params.evaluate.resolutions)


def study_records(params: Params, runs_root=None, reports_root=None) -> list[dict]:
    """The current records of the preset's grid, in grid order."""
    found = (current_record(params, *run, runs_root=runs_root, reports_root=reports_root) for run in grid(params))
    return [record for record in found if record is not None]


def retime_study(params: Params, everything: bool = False, runs_root=None, reports_root=None) -> list[dict]:
    """Re-time the inference of the preset's finished runs whose timings were taken on a busy machine
    (all finished runs with `everything`) and whose weights are on this machine (evaluate.retime); keep
    the updated records and rewrite the summary. Returns the re-timed records."""
    from .evaluate import retime
    from .metrics import busy

    done = [r for r in study_records(params, runs_root, reports_root) if r.get("status") == "finished"]
    chosen = [r for r in done if everything or busy(r)]
    here = [r for r in chosen if runs.weights_here(params, r, runs_root)]
    without = len(chosen) - len(here)
    print(
        f"retime {params.name}: {len(chosen)} of {len(done)} finished runs to time again"
        + ("" if everything else " (timed on a busy machine)")
        + (f"; {without} of them have no weights here and keep their timings" if without else ""),
        flush=True,
    )
    retimed, datasets = [], {}
    for r in here:
        if r["dataset"] not in datasets:
            datasets[r["dataset"]] = runs.dataset_for(params, r["dataset"])
        record = retime(params, datasets[r["dataset"]], r["variant"], r["seed"], runs_root)
        _keep(params, r["dataset"], r["variant"], r["seed"], runs_root, reports_root)
        print(
            f"[{r['variant']} | {r['dataset']} | seed {r['seed']}] {r['ms_per_image_batched']:.4f} → "
            f"{record['ms_per_image_batched']:.4f} ms/image at load {record['load_average']:.1f}"
            + (" (busy again)" if busy(record) else ""),
            flush=True,
        )
        retimed.append(record)
    write_summary(params.name, study_records(params, runs_root, reports_root), reports_root)
    return retimed


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


def write_summary(preset: str, results: list[dict], reports_root=None, notes=()) -> Path:
    """reports/<preset>/summary.csv (raw numbers) and summary.md (rounded; accuracies in %)."""
    out = Path(reports_root or REPORTS_ROOT) / preset
    rows = [
        {c: (("+".join(r[c]) or "none") if c == "positions" and c in r else r.get(c)) for c in SUMMARY_COLUMNS}
        for r in results
    ]
    records.write_csv(out / "summary.csv", rows, columns=SUMMARY_COLUMNS)
    shown = [{c: _cell(c, r.get(c)) for c in SUMMARY_COLUMNS} for r in results]
    lines = [
        f"# {preset}: summary of {len(results)} runs",
        "",
        "Accuracies, precision, recall and F1 (macro) in %; log-likelihood on the test set; "
        "FLOPs are forward matmul FLOPs per image; timing on the device named, with the machine's "
        "1-minute load average and torch threads at the time.",
        "",
        markdown_table(shown, SUMMARY_COLUMNS) if shown else "No finished runs yet.",
    ]
    if notes:
        lines += ["", "## Notes from the last study run", ""] + [f"- {note}" for note in notes]
    records.write_text(out / "summary.md", "\n".join(lines) + "\n")
    return out
