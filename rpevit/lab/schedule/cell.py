"""One grid cell — one run of a preset's grid (a `Run` with its roots) — from its files on disk to
its summary row.

A run has up to two copies of its record and history: the run directory in runs/ (with its
checkpoints) and, for presets with `keep_records`, the kept copy in reports/<preset>/records/.
`settle` decides the run's state from both — finished, missing (to train), damaged, stale (the
kept copy differs from runs/, or a finished run lacks its resolution rows) — and, asked to, repairs
it, naming every repair in the log and the study summary:

- a damaged record, history or checkpoint (unreadable, wrong schema, non-finite numbers, a failing
  checksum) is moved aside (`<name>.damaged-<time>`);
- a finished run's lost history is rebuilt from its checkpoint, else from a good kept copy, else the
  run counts as unfinished again;
- a finished run whose final checkpoint is lost while the previous one is good trains its last
  epoch again (bit-exact on CPU), so it has its tested weights again;
- a lost run record is rebuilt from a good kept copy where the run's checkpoint is here;
- a kept copy that is missing, damaged or stale is restored from runs/;
- kept weights (weights.pt: runs.weights_wanted) that are damaged, made for another result, or missing
  for the preset's first seed are written again from the run's checkpoint where it is here.

`run_cell` does this under the run's lock (first removing temporary files of interrupted writes in
both places), then trains what is missing, evaluates what lacks resolution rows and keeps the
result; both engines (study.run_study, cluster.run_study_ray) run
every cell through it; `run_pack` does the same for runs of one variant trained together.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from ...core.errors import UserError
from ..params import Params
from ..schema import is_finished
from ..store import records
from ..store.run import Run
from ..training.runs import keep_first_weights, weights_wanted
from ..training.train import Diverged, train_run


def cells(params: Params, grid, runs_root, reports_root) -> list[Run]:
    """The runs of a preset's grid (study.grid: (dataset, variant, seed) in training order), each with
    the roots its files live under."""
    return [Run(params, d, v, s, runs_root=Path(runs_root), reports_root=Path(reports_root)) for d, v, s in grid]


@dataclass
class State:
    """What `settle` found: the current record (from runs/, else kept) and the work left."""

    record: dict | None = None
    repairs: list[str] = field(default_factory=list)  # what was (or would be) repaired
    damaged: bool = False  # a file was (or would be) set aside
    train: bool = False
    evaluate: bool = False

    @property
    def kind(self) -> str:
        """finished | missing (to train) | damaged | stale (the kept copy or resolution rows behind)."""
        if self.damaged:
            return "damaged"
        if self.train:
            return "missing"
        return "stale" if self.work else "finished"

    @property
    def work(self) -> bool:
        return bool(self.repairs or self.train or self.evaluate)


def _read(path: Path, check, *args):
    """(value, problem) of a file read with `check(bytes, *args)`; (None, None) if there is none."""
    return check(path.read_bytes(), *args) if path.is_file() else (None, None)


def _expected_epochs(record: dict) -> int | None:
    return record["epochs"] if is_finished(record) else None


def settle(cell: Run, repair: bool) -> State:
    """The run's state from both copies; with `repair` (the run's lock held), repair it."""
    state, keep = State(), cell.params.keep_records
    directory, kept = cell.dir, cell.kept_dir if cell.params.keep_records else None

    def fix(message: str, action=None, names_itself: bool = False) -> None:
        state.repairs.append(message)
        if repair:
            if action is not None:
                action()
            if not names_itself:
                records.note(f"repaired: {message}")

    def set_aside(path: Path, why: str, tag: str = "damaged") -> None:
        state.damaged = True
        fix(f"{path} is {tag}: {why}", lambda: records.move_aside(path, why, tag), names_itself=True)

    record, why = _read(directory / records.RECORD, records.record_problem)
    if why:
        set_aside(directory / records.RECORD, why)
        record = None
    current = record if cell.matches(record) else None
    kept_record, why = _read(kept / records.RECORD, records.record_problem) if keep else (None, None)
    if why:
        set_aside(kept / records.RECORD, why)
        kept_record = None
    kept_current = kept_record if cell.matches(kept_record) else None

    good = set()
    for name in (records.CHECKPOINT, records.PREVIOUS_CHECKPOINT):
        path = directory / name
        if path.is_file() and (why := records.checkpoint_problem(path)):
            set_aside(path, why)
        elif path.is_file():
            good.add(name)
    final, previous = records.CHECKPOINT in good, records.PREVIOUS_CHECKPOINT in good

    history, why = _read(directory / records.HISTORY, records.history_problem, current and _expected_epochs(current))
    if why:
        set_aside(directory / records.HISTORY, why)
    kept_history = None
    if keep:
        epochs = kept_current and _expected_epochs(kept_current)
        kept_history, why = _read(kept / records.HISTORY, records.history_problem, epochs)
        if why:
            set_aside(kept / records.HISTORY, why)
    if kept_current is not None and kept_history is None and current is None:
        if is_finished(kept_current):
            set_aside(kept / records.RECORD, "its history is damaged or lost and runs/ has no copy")
            kept_current = None

    if is_finished(current) and not final and previous:
        why = f"its final {records.CHECKPOINT} (the tested weights) is lost; the last epoch is trained again"
        set_aside(directory / records.RECORD, why, tag="unverified")
        current, state.train = None, True
    if is_finished(current) and history is None:
        current = _rebuild_history(cell, current, kept_current, kept_history, final, fix, set_aside)
    if current is None and record is None and kept_current is not None and final:
        fix(
            f"{directory / records.RECORD} rebuilt from the kept copy in {kept}",
            lambda: [records.write_bytes(directory / n, (kept / n).read_bytes()) for n in records.KEPT],
        )
        current = kept_current
    if current is None and record is None and (final or previous):
        state.train = True  # interrupted here (or its record set aside): resume from the checkpoint

    state.record = current or kept_current
    state.train = state.train or state.record is None
    stale = _differs(directory, kept) if keep and current is not None else []
    if stale:
        fix(f"kept {' and '.join(stale)} in {kept} restored from {directory}", lambda: records.keep(directory, kept))
    elif keep and current is not None and final and (why := weights_wanted(cell)):
        message = f"kept {records.KEPT_WEIGHTS} in {kept} is {why}"
        fix(message, lambda: records.note(f"repaired: {message}: {keep_first_weights(cell)}"), names_itself=True)
    state.evaluate = not state.train and needs_evaluation(cell.params, state.record)
    return state


def _rebuild_history(cell: Run, current, kept_current, kept_history, final, fix, set_aside):
    """A finished run's lost history: from its checkpoint, else the kept copy; else the record goes aside."""
    directory, kept = cell.dir, cell.kept_dir
    path = directory / records.HISTORY
    if final:
        fix(f"{path} rebuilt from the run's checkpoint", lambda: _history_from_checkpoint(directory, current))
        return current
    if kept_history is not None and kept_current == current:
        fix(
            f"{path} rebuilt from the kept copy",
            lambda: records.write_bytes(path, (kept / records.HISTORY).read_bytes()),
        )
        return current
    set_aside(directory / records.RECORD, "its history is damaged or lost and nothing holds a copy", tag="unverified")
    return None


def _history_from_checkpoint(directory: Path, record: dict) -> None:
    """history.csv from the checkpoint's history; if it holds no complete one, the record goes aside."""
    checkpoint = records.load_checkpoint(directory / records.CHECKPOINT)
    if checkpoint is None or len(checkpoint["history"]) != record["epochs"]:
        why = "its history is lost and its checkpoint holds no complete one"
        records.move_aside(directory / records.RECORD, why, tag="unverified")
        return
    records.write_csv(directory / records.HISTORY, checkpoint["history"])


def _differs(directory: Path, kept: Path) -> list[str]:
    """The names of the run directory's record and history that the kept copy lacks or differs from."""
    return [
        name
        for name in records.KEPT
        if (directory / name).is_file()
        and (not (kept / name).is_file() or (kept / name).read_bytes() != (directory / name).read_bytes())
    ]


def needs_evaluation(params: Params, record: dict | None) -> bool:
    """True if a finished run lacks the preset's multi-resolution evaluation."""
    if not is_finished(record) or not params.evaluate.resolutions:
        return False
    if not params.evaluate.covers(record["variant"]):
        return False
    return {row.get("resolution") for row in record.get("resolution_eval", [])} != set(params.evaluate.resolutions)


def failure_row(cell: Run, kind: str, message: str) -> dict:
    """The summary row of a run that failed or was skipped in this sitting."""
    parsed = cell.parsed
    return {
        "preset": cell.params.name,
        "dataset": cell.dataset,
        "variant": cell.variant,
        "backend": parsed.backend,
        "positions": list(parsed.positions),
        "seed": cell.seed,
        "status": kind,
        "message": message,
    }


def run_cell(cell: Run, load, *, progress: bool = False) -> dict:
    """Settle, train, evaluate and keep one run under its lock; returns its summary row (its record,
    or a failure row with status skipped / failed). `load()` gives the dataset, called only if needed."""
    state = settle(cell, repair=False)
    if not state.work:
        return state.record
    if not state.train and not state.repairs and not (cell.dir / records.CHECKPOINT).is_file():
        _say_not_here(cell)  # only an evaluation is missing, and the weights are elsewhere
        return state.record
    try:
        with cell.lock():
            _clean_temporary(cell)
            state = settle(cell, repair=True)
            if state.repairs:  # a second look sees what the repairs left (a record set aside: train)
                state = settle(cell, repair=True)
            if state.train:
                try:
                    train_run(cell, _loaded(load, cell.params), progress=progress)
                except Diverged as exc:
                    print(f"diverged: {exc}", flush=True)
            return _finish(cell, state, load)
    except records.RunBusy as exc:
        print(f"skipped: {exc}", flush=True)
        return failure_row(cell, "skipped", str(exc))


def _finish(cell: Run, state: State, load) -> dict:
    """After training (the run's lock held): evaluate what lacks resolution rows, keep, and the summary row."""
    record = _current(cell) or state.record
    if needs_evaluation(cell.params, record):
        _evaluate(cell, load)
    if cell.params.keep_records and _current(cell) is not None:
        if _differs(cell.dir, cell.kept_dir):
            print(f"[{cell.label}] keeping its record and history in {cell.kept_dir}", flush=True)
            records.keep(cell.dir, cell.kept_dir)
        if said := keep_first_weights(cell):  # also where a repair kept the record
            print(f"[{cell.label}] {said}", flush=True)
    record = _current(cell) or state.record
    return record if record is not None else failure_row(cell, "failed", "no record after training")


def run_pack(pack: list[Run], load) -> list[dict]:
    """`run_cell` for runs of one variant (pack.train_pack trains those missing in one vectorised step):
    each settled and repaired under its lock, then evaluated and kept; their summary rows in order."""
    from ..training.pack import train_pack

    rows: dict[int, dict] = {}
    with contextlib.ExitStack() as locks:
        ready = []
        for i, cell in enumerate(pack):
            state = settle(cell, repair=False)
            if not state.work:
                rows[i] = state.record
                continue
            try:
                locks.enter_context(cell.lock())
            except records.RunBusy as exc:
                print(f"skipped: {exc}", flush=True)
                rows[i] = failure_row(cell, "skipped", str(exc))
                continue
            _clean_temporary(cell)
            state = settle(cell, repair=True)
            if state.repairs:
                state = settle(cell, repair=True)
            ready.append((i, cell, state))
        training = [cell for _, cell, state in ready if state.train]
        if training:
            train_pack(training, _loaded(load, training[0].params))
        for i, cell, state in ready:
            rows[i] = _finish(cell, state, load)
    return [rows[i] for i in range(len(pack))]


def _clean_temporary(cell: Run) -> None:
    """Remove what interrupted writes left in the run directory and its kept folder (the lock held)."""
    records.clean_temporary(cell.dir)
    if cell.params.keep_records:
        records.clean_temporary(cell.kept_dir)


def _current(cell: Run) -> dict | None:
    """The run directory's record if it is current, else None."""
    record = records.read_record(cell.dir)
    return record if cell.matches(record) else None


def _say_not_here(cell: Run) -> None:
    print(
        f"[{cell.label}] multi-resolution evaluation skipped: its checkpoint is not on this machine "
        "(only its kept record is)",
        flush=True,
    )


def _evaluate(cell: Run, load) -> None:
    """The preset's multi-resolution evaluation of a finished run whose weights are here."""
    from ..training.evaluate import evaluate_resolutions

    if not (cell.dir / records.CHECKPOINT).is_file():
        _say_not_here(cell)
        return
    resolutions = cell.params.evaluate.resolutions
    print(f"[{cell.label}] multi-resolution evaluation at {', '.join(map(str, resolutions))} px", flush=True)
    try:
        evaluate_resolutions(cell, load(), resolutions)
    except UserError as exc:  # its tested weights are lost: the run is unfinished again
        print(f"not evaluated: {exc}", flush=True)


def _loaded(load, params: Params):
    """The dataset, with a note when the batch is larger than its training set."""
    dataset = load()
    if params.train.batch_size > len(dataset.train):
        print(
            f"note: train.batch_size {params.train.batch_size} exceeds the {len(dataset.train)} training images "
            f"of {dataset.info.name}: each epoch is one step over the whole training set",
            flush=True,
        )
    return dataset
