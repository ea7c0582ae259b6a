"""Stable checkpoints kept in the repository, so that a longer budget goes on from a finished run anywhere.

Under warmup–stable–decay a run writes checkpoint.stable.pt where its own decay starts (rpevit/lab/training/
train.py); a preset with `continues:` starts its runs there instead of from initialisation (continuation.py,
after Hu et al. 2024, MiniCPM §4.1: a 128-epoch run passes through the state a 64-epoch run keeps after its
epoch 48). runs/ is git-ignored, so that file went with the machine that trained the run. `park` keeps each
finished run's stable checkpoint in reports/<preset>/stable/<dataset>/<variant>/seed<N>/ (tracked: commit
it), and `restore` puts those of a preset and of the preset it continues back into runs/ where runs/ has
none — only for a run whose current record has finished, and only a file made with that run's settings and
written where its decay starts (its key and epoch are checked).
"""

from __future__ import annotations

from pathlib import Path

from rpevit.core import budgets
from rpevit.lab.params import Params
from rpevit.lab.schema import is_finished
from rpevit.lab.store import records
from rpevit.lab.store.catalog import current_record, grid_runs
from rpevit.lab.store.run import Run
from rpevit.lab.training.continuation import donor_params

from .parking import read_state

STABLE = "stable"  # reports/<preset>/stable/<dataset>/<variant>/seed<N>/checkpoint.stable.pt: tracked


def kept_path(run: Run) -> Path:
    """Where a rooted run's stable checkpoint is kept in the repository."""
    relative = run.dir.relative_to(run.runs_root / run.params.name)
    return run.reports_root / run.params.name / STABLE / relative / records.STABLE_CHECKPOINT


def _belongs(run: Run, path: Path) -> bool:
    """Whether `path` is a readable stable checkpoint of this run: its settings (key) and the epoch where the
    run's own decay starts (a damaged file is not, and is left where it is)."""
    state = read_state(path)
    return state.get("epoch") == budgets.stable_end(run.train_config) and state.get("key") == run.key


def _finished_runs(params: Params) -> list[Run]:
    """A WSD preset's runs whose current record (here or kept) has finished, in grid order."""
    if params.train.schedule != "wsd":
        return []
    return [run for run in grid_runs(params) if is_finished(current_record(run))]


def keep(params: Params) -> list[str]:
    """Copy each finished run's stable checkpoint from runs/ to its kept place where the copy there differs;
    one line if any was written."""
    written = 0
    for run in _finished_runs(params):
        source, target = run.dir / records.STABLE_CHECKPOINT, kept_path(run)
        if not source.is_file() or not _belongs(run, source):
            continue
        data = source.read_bytes()
        if not target.is_file() or target.read_bytes() != data:
            records.write_bytes(target, data)
            written += 1
    if not written:
        return []
    return [
        f"{params.name}: {written} finished run(s)' stable checkpoint(s) kept in reports/{params.name}/{STABLE}/ "
        "(a longer budget goes on from them); commit it"
    ]


def restore(params: Params) -> list[str]:
    """Put the kept stable checkpoints of `params` and of the preset it continues into runs/ where a finished
    run has none; one line per preset that got any."""
    if params.train.schedule != "wsd":
        return []  # no stable phase, and `continues` needs one (checked when a preset loads)
    lines = []
    for preset in (params, donor_params(params)) if params.continues else (params,):
        placed = 0
        for run in _finished_runs(preset):
            source, target = kept_path(run), run.dir / records.STABLE_CHECKPOINT
            if source.is_file() and not target.is_file() and _belongs(run, source):
                records.write_bytes(target, source.read_bytes())
                placed += 1
        if placed:
            lines.append(f"{preset.name}: {placed} stable checkpoint(s) restored from reports/{preset.name}/{STABLE}/")
    return lines


def status_line(params: Params) -> list[str]:
    """Under WSD, with a finished run: how many finished runs' stable checkpoints the repository keeps."""
    finished = _finished_runs(params)
    if not finished:
        return []
    kept = sum(kept_path(run).is_file() for run in finished)
    return [
        f"stable checkpoints kept in reports/{params.name}/{STABLE}/ (`park` keeps them): {kept} of "
        f"{len(finished)} finished runs"
    ]
