"""Study runner: a preset's grid (datasets × variants × seeds) → run records → summary tables.

Everything checkable is checked before the first run starts (runs.preflight; check_precision: a
sitting trains in the precision of the study's finished runs). Finished runs (a
record whose key matches the preset's settings: run.Run.key) are skipped
and interrupted runs resume from their last good checkpoint, so a study stopped at any point
continues where it stopped and nothing finished is recomputed. A run another live process is
training is skipped with a message; a diverged run is recorded as such, not retried. A preset with
a design (rpevit.lab.design) trains only what its stopping rule and budget want, choosing each next run
afresh (designed_order) and waiting (polling) while another process trains the runs that decide it. Each grid
cell goes through cell.run_cell (the run's state from runs/ and its kept copy, repairs, training,
evaluation, keeping), as on Ray; the summary says what was recovered and repaired.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ...core.device import check_one_precision, planned_precision
from ..params import Params
from ..paths import inside
from ..progress import Progress, label
from ..schema import SUMMARY_COLUMNS, is_finished
from ..schema import finished as finished_runs
from ..store import records
from ..store.catalog import Snapshot, current_record, grid, pace_records, study_records, unfinished_runs
from ..store.costs import train_costs
from ..store.run import Run
from ..tables import markdown_table
from ..training import runs
from . import policy
from .cell import State, cells, needs_evaluation, run_cell, run_pack, settle
from .time_limit import TimeLimit, expected_total
from .wanted import snapshot, wanted

Gate = Callable[[Run], str]  # why a run may not start ("" when it may): a start gate the caller passes
POLL_SECONDS = 60  # how often a waiting study looks again at the runs other processes train


def _keep(run: Run) -> None:
    """Copy a run's record and history to its kept place (keep_records), under the run's lock."""
    if run.params.keep_records:
        run = run.rooted()
        with run.lock():
            records.keep(run.dir, run.kept_dir)


def loader_cache(params: Params, dataset_loader=None):
    """load(name) → the dataset, loaded once per name with `dataset_loader(params, name)` (default
    runs.dataset_for); one dataset in memory at a time."""
    loaded: dict = {}

    def load(name: str):
        if name not in loaded:
            loaded.clear()
            loaded[name] = (dataset_loader or runs.dataset_for)(params, name)
        return loaded[name]

    return load


def outcome(row: dict, before: State) -> tuple[str, str]:
    """(kind, message) of a cell's summary row for the progress display: done / diverged / failed / skipped."""
    status = row.get("status")
    if status in ("failed", "skipped", "diverged"):
        return status, row.get("message", "")
    top1 = row.get("top1")
    score = f"top-1 {100 * top1:.2f}%" if top1 is not None else ""
    return "done", score + (f"; {len(before.repairs)} repaired" if before.repairs else "")


def announce(params: Params, states: list[State], where: str = "") -> None:
    """One line: how many runs the grid has and how many are finished, missing, damaged or stale."""
    kinds = [s.kind for s in states]
    repair = [f"{kinds.count(k)} {k}" for k in ("damaged", "stale") if k in kinds]
    print(
        f"study {params.name}{where}: {len(states)} runs, {kinds.count('finished')} already finished, "
        f"{kinds.count('missing')} to run" + (f"; to repair: {', '.join(repair)}" if repair else ""),
        flush=True,
    )


def check_precision(params: Params, states: list[State]) -> None:
    """Before any training: a sitting that trains must train in the precision of the study's
    finished runs (device.check_one_precision)."""
    if any(s.train for s in states):
        _check_precision(params, [s.record for s in states if is_finished(s.record)])


def check_run_precision(params: Params, run: Run) -> None:
    """Before `train` trains one run: when it is one of the preset's grid at the preset's epochs (the
    study would keep it), it must train in the precision of the study's finished runs, as a study
    sitting must (check_precision)."""
    if run.place in grid(params) and run.epochs in (None, params.train.epochs):
        found = study_records(params, run.runs_root, run.reports_root)
        _check_precision(params, finished_runs(found))


def _check_precision(params: Params, finished: list[dict]) -> None:
    train = params.train
    check_one_precision(params.name, train.amp, planned_precision(train.device, train.amp), train.device, finished)


def run_study(
    params: Params,
    *,
    runs_root=None,
    reports_root=None,
    progress: bool = False,
    dataset_loader=None,
    summary: bool = True,
    summary_root=None,
    time_limit: TimeLimit | None = None,
    pack_size: int | None = None,
    gates: Sequence[Gate] = (),
) -> list[dict]:
    """Run every cell of the preset's grid that has work (cell.run_cell: repair, train, evaluate,
    keep), then write the summary (unless `summary` is False: a notebook that only shows, e.g. under
    nbval, leaves reports/ as it found it; `summary_root`: the folder above the summary's, where not the reports
    root — make study's demo writes local/reports/smoke/); returns the current records in grid order.
    `dataset_loader(params, name)` loads a dataset (default runs.dataset_for); with a `time_limit`
    no run starts that is not expected to finish within it (rpevit.lab.schedule.time_limit); nor one that a start gate
    of `gates` refuses (the caller's rules, e.g. a pre-registered budget: plain_order). With `pack_size` (the pack
    engine; 0: no limit) the runs of one variant train together in packs (cell.run_pack; a design's
    adaptive order trains one run per pack)."""
    runs.preflight(params, runs_root=runs_root)
    records.recovered.clear()
    grid_cells = cells(params, grid(params), runs_root or records.runs_root(), reports_root or records.reports_root())
    states = [settle(c, repair=False) for c in grid_cells]
    check_precision(params, states)
    announce(params, states)
    load = loader_cache(params, dataset_loader)
    todo = [(c, s) for c, s in zip(grid_cells, states) if s.work]
    meter, rows = Progress(len(todo)), {}
    if params.design.active:
        order = designed_order(params, todo, meter, time_limit)
    else:
        order = plain_order(params, todo, time_limit, gates)
    # the pack engine groups a plain grid by variant; a design's adaptive order trains one run per pack
    packed = pack_size is not None and not params.design.active
    groups = packs(list(order), pack_size) if packed else ([item] for item in order)
    for group in groups:
        for run, _ in group:
            meter.event("running", run.place)
        if pack_size is None:
            found = [run_cell(group[0][0], lambda run=group[0][0]: load(run.dataset), progress=progress)]
        else:
            found = run_pack([run for run, _ in group], lambda run=group[0][0]: load(run.dataset))
        for (run, before), row in zip(group, found, strict=True):
            rows[run.place] = row
            kind, message = outcome(row, before)
            meter.event(kind, run.place, message)
    return summarise(params, grid_cells, rows, records.recovered, write=summary, root=summary_root)


def packs(todo: list[tuple[Run, State]], size: int) -> list[list[tuple[Run, State]]]:
    """The runs grouped for packed training: runs of one dataset and variant together, in the order each
    group first appears, at most `size` per pack (0: no limit)."""
    groups: dict[tuple[str, str], list] = {}
    for run, state in todo:
        groups.setdefault((run.dataset, run.variant), []).append((run, state))
    step = (size or max(len(g) for g in groups.values())) if groups else 1
    return [g[i : i + step] for g in groups.values() for i in range(0, len(g), step)]


def started_runs(params: Params, runs_root=None, reports_root=None) -> list[Run]:
    """The preset's unfinished runs that hold a checkpoint here: started, so finished whatever a gate says."""
    return [run for run in unfinished_runs(params, runs_root, reports_root) if (run.dir / records.CHECKPOINT).is_file()]


def refusal(time_limit: TimeLimit | None, run: Run, before: State, pace: list[dict], costs: dict) -> str:
    """Why a run must not start in the time limit's time left ('' when it may, or with no limit);
    `pace`: finished records (catalog.pace_records), `costs`: costs.train_costs."""
    return "" if time_limit is None else time_limit.refusal(run, pace, train=before.train, costs=costs)


def plain_order(
    params: Params, todo: list[tuple[Run, State]], time_limit: TimeLimit | None = None, gates: Sequence[Gate] = ()
):
    """The runs of `todo` in grid order, leaving unstarted (and saying so) those a `time_limit` refuses, and
    those not yet started that a start gate refuses (`gate(run)`: why not, "" to let it start; a started run
    is finished, as a part informs nothing). A run another process is training is not judged here: the
    runner skips it with its own message."""
    costs = train_costs(params, todo[0][0].reports_root) if todo and time_limit is not None else {}
    for run, before in todo:
        pace = pace_records(params, run.runs_root, run.reports_root) if time_limit is not None else []
        flying = time_limit is not None and run.lock().holder() is not None
        why = "" if flying else refusal(time_limit, run, before, pace, costs)
        if not why and not flying and not (run.dir / records.CHECKPOINT).is_file():
            why = next((refused for gate in gates if (refused := gate(run))), "")
        if why:
            print(f"not started: {label(*run.place)} ({why})", flush=True)
            continue
        yield run, before


# why a secondary run does not start after an earlier run was refused for time (its part of the design)
OVERTAKING = {
    "primary": "the primary grid comes first, and its next run does not fit in the time left",
    "secondary": "the secondary variants train in the order listed, and an earlier one's next run does not fit in the "
    "time left",
}


def designed_order(
    params: Params,
    todo: list[tuple[Run, State]],
    meter: Progress,
    time_limit: TimeLimit | None = None,
    submitted: Callable[[], set] | None = None,
):
    """A designed study's runs, each chosen afresh when the last one ends: the first of `todo`
    (design order) that the design would train now (policy.decide), that is neither finished, in
    flight in another process, nor tried already by this one, and that a `time_limit` lets start
    (else a later one it lets start, but no secondary run after a primary or an earlier secondary run
    that does not fit: the budget gives way from the last-listed secondary variant). While
    only runs that wait on others are left, poll every POLL_SECONDS (until the time limit ends);
    when none is left, say which runs were not started and why. Scanning from the top each time
    picks up a run another process left unfinished (it stopped) before any later one, so secondary
    runs never overtake a primary seed that still lacks a run. `submitted` (an engine running several
    at once, Ray): the places this process handed out that have not ended — they count as in flight,
    and where the order would wait on them it yields None instead (ask again when one ends)."""
    if not todo:
        return
    roots, tried, said = (todo[0][0].runs_root, todo[0][0].reports_root), set(), set()
    primary = set(params.design.primary)  # stored canonical
    costs = train_costs(params, roots[1])
    while True:
        ours = submitted() if submitted is not None else set()
        seen = snapshot(params, *roots, ours=ours)  # this scan's reads
        busy, finished, held, pace, done = seen.busy, list(seen.records), seen.held, list(seen.pace), seen.done
        chosen, waits, skips, refused = None, [], [], set()  # refused: "primary" / "secondary" runs refused for time
        for run, before in todo:
            if run.place in tried or run.place in busy or (before.train and run.place in done):
                continue
            verdict, why = policy.decide(run, finished, busy, secondary_held=held) if before.train else ("train", "")
            part = "primary" if run.variant in primary else "secondary"
            if verdict == "train" and part == "secondary" and refused:
                verdict, why = "skip", OVERTAKING["primary" if "primary" in refused else "secondary"]
            if verdict == "train" and (why := refusal(time_limit, run, before, pace, costs)):
                verdict = "skip"
                refused.add(part)
            if verdict == "train":
                chosen = (run, before)
                break
            (waits if verdict == "wait" else skips).append((run, why))
        if chosen is not None:
            untried = [t for t in todo if t[0].place not in tried]
            meter.wanted = functools.partial(wanted_left, params, untried, seen, costs)
            tried.add(chosen[0].place)
            yield chosen
            continue
        if not waits or (time_limit is not None and time_limit.left() <= 0):
            for run, why in skips + [(run, f"{why}; the time limit ended") for run, why in waits]:
                print(f"not started: {label(*run.place)} ({why})", flush=True)
            return
        if ours:  # what it waits on may be this process's own runs: the engine asks again when one ends
            yield None
            continue
        run, why = waits[0]
        if run.place not in said:
            locks = ", ".join(str(Run(params, *place, runs_root=run.runs_root).lock().path) for place in sorted(busy))
            print(
                f"waiting: {label(*run.place)} ({why}); runs in flight hold {locks} — if a holder is gone "
                "(another machine, a reused process id), delete its lock file",
                flush=True,
            )
            said.add(run.place)
        time.sleep(POLL_SECONDS if time_limit is None else max(0.0, min(POLL_SECONDS, time_limit.left())))


def wanted_left(params: Params, todo: list[tuple[Run, State]], seen: Snapshot, costs: dict | None = None):
    """Of `todo` (this process's runs not yet tried, the current one first), those the design trains
    (wanted.wanted: left) once the runs in flight elsewhere have ended, unfinished and not in flight: what
    the ETA counts. Returns (how many, their expected seconds one after another at the pace of the
    snapshot's records scaled by `costs`, the epochs their checkpoints hold subtracted — None where a run
    has no pace to go on)."""
    left = set(wanted(params, dataclasses.replace(seen, busy=frozenset())).left) - seen.busy
    runs = [run for run, state in todo if state.train and run.place in left]
    seconds, unknown = expected_total(runs, seen.pace, costs)
    return len(runs), (None if not runs or unknown else seconds)


def summarise(
    params: Params, grid_cells: list[Run], rows: dict, notes: list[str], write: bool = True, root=None
) -> list[dict]:
    """Write the summary of the grid (if `write`) — its current records, a row for each run that
    failed or was skipped in this sitting, and the notes — and return the current records in grid order."""
    results, shown, failures = [], [], []
    for run in grid_cells:
        record = current_record(run)
        row = rows.get(run.place)
        if record is not None:
            results.append(record)
            shown.append(record)
        elif row is not None and row.get("status") in ("failed", "skipped"):
            shown.append(row)
            failures.append(f"{row['status']}: {label(*run.place)} — {row['message']}")
    reports_root = root or (grid_cells[0].reports_root if grid_cells else None)
    if write:
        notes = list(dict.fromkeys(notes)) + failures
        write_summary(params.name, shown, reports_root, notes=notes, coverage=(len(results), len(grid_cells)))
    return results


def needs_resolution_eval(run: Run) -> bool:
    """True if a finished run lacks the preset's multi-resolution evaluation."""
    return needs_evaluation(run.params, current_record(run))


def retime_study(params: Params, everything: bool = False, runs_root=None, reports_root=None) -> list[dict]:
    """Re-time the inference of the preset's finished runs whose timings were taken on a busy machine
    (all finished runs with `everything`) and whose weights are on this machine (evaluate.retime); keep
    the updated records and rewrite the summary. Returns the re-timed records."""
    from ...core.metrics import busy
    from ..training.evaluate import retime

    done = finished_runs(study_records(params, runs_root, reports_root))
    chosen = [r for r in done if everything or r.busy]
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
        if r.dataset not in datasets:
            datasets[r.dataset] = runs.dataset_for(params, r.dataset)
        run = Run.of(params, r, runs_root=runs_root, reports_root=reports_root)
        record = retime(run, datasets[r.dataset])
        _keep(run)
        print(
            f"[{run.label}] {r.ms_per_image_batched:.4f} → "
            f"{record['ms_per_image_batched']:.4f} ms/image at load {record['load_average']:.1f}"
            + (" (busy again)" if busy(record) else ""),
            flush=True,
        )
        retimed.append(record)
    found = study_records(params, runs_root, reports_root)
    write_summary(params.name, found, reports_root, coverage=(len(found), len(grid(params))))
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


def write_summary(preset: str, results: list[dict], reports_root=None, notes=(), coverage=None) -> Path:
    """reports/<preset>/summary.csv (raw numbers) and summary.md (rounded; accuracies in %). `coverage`:
    (runs with a current record, the grid's runs); the summary says when the first is smaller (written
    mid-study, or a design that trains only some)."""
    out = inside(reports_root or records.reports_root(), preset)
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
    if coverage is not None and coverage[0] < coverage[1]:
        lines[1:1] = [
            "",
            f"{coverage[0]} of the grid's {coverage[1]} runs have a record; the others are not trained yet or not "
            f"wanted by the preset's design (`python -m rpevit status {preset}` says which).",
        ]
    if notes:
        lines += ["", "## Notes from the last study run", ""] + [f"- {note}" for note in notes]
    records.write_text(out / "summary.md", "\n".join(lines) + "\n")
    return out
