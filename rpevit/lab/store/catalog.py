"""The catalog of a preset's runs: its grid in training order and the current record of each run.

A record is current when its key matches the preset's present settings (run.Run.key); it is read
from the run's directory under runs/, else from the copy kept under reports/<preset>/records/
(presets with keep_records), so a fresh clone without runs/ sees every kept run. Read-only: the
study runner (rpevit.lab.schedule.study, rpevit.lab.schedule.cell) writes what this reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core.errors import UserError
from ..design import grid
from ..params import Params, checked_by, load_params
from ..result import Result, results
from ..schema import finished as finished_runs
from ..schema import is_finished
from . import records
from .run import Run


@dataclass(frozen=True)
class Snapshot:
    """One decision's reads: current records (finished and diverged, as Results), places in flight
    elsewhere, why secondary runs are held ('' none) and the finished records that give a pace."""

    records: tuple[Result, ...] = ()
    busy: frozenset = frozenset()
    held: str = ""
    pace: tuple = field(default=(), compare=False)

    def __post_init__(self):
        object.__setattr__(self, "records", tuple(results(self.records)))
        object.__setattr__(self, "busy", frozenset(self.busy))
        object.__setattr__(self, "pace", tuple(self.pace))

    @property
    def done(self) -> set[tuple[str, str, int]]:
        """Places with a current record: finished or diverged, so not trained again."""
        return {r.place for r in self.records}


def _current(run: Run):
    """(record, its directory) of the run's current record — from runs/, else the copy kept in
    reports/ — if it was made with the preset's current settings, else None."""
    run = run.rooted()
    for directory in (run.dir, run.kept_dir if run.params.keep_records else None):
        record = None if directory is None else records.read_record(directory)
        if run.matches(record):
            return record, directory
    return None


def current_record(run: Run) -> dict | None:
    """The run's record (from runs/, else the copy kept in reports/) if it was made with the preset's
    current settings, else None."""
    found = _current(run)
    return None if found is None else found[0]


def grid_runs(params: Params, runs_root=None, reports_root=None) -> list[Run]:
    """The preset's runs in grid order, rooted (the given roots, else the defaults)."""
    return [Run(params, *place, runs_root=runs_root, reports_root=reports_root).rooted() for place in grid(params)]


def unfinished_runs(params: Params, runs_root=None, reports_root=None) -> list[Run]:
    """The preset's runs without a current record (here or kept), rooted, in grid order."""
    return [run for run in grid_runs(params, runs_root, reports_root) if current_record(run) is None]


def run_history(run: Run) -> list[dict]:
    """Per-epoch history rows of the run whose record is current (beside that record), [] if none or
    if the history is damaged (then moved aside and named, like a damaged record)."""
    found = _current(run)
    if found is None:
        return []
    record, directory = found
    return records.read_history(directory, record["epochs"] if is_finished(record) else None)


def has_record(run: Run) -> bool:
    """True if the run has a record (finished or diverged) made with the preset's current settings."""
    return current_record(run) is not None


def in_flight(params: Params, runs_root=None) -> set[tuple[str, str, int]]:
    """The places of the preset's grid that another process is training now (their run lock: held by
    a live process, or not yet readable)."""
    return {run.place for run in grid_runs(params, runs_root) if run.lock().holder()}


def in_flight_and_records(params: Params, runs_root=None, reports_root=None) -> tuple[set, list[dict]]:
    """(in_flight, study_records), read in that order: a run that finishes between the two reads is
    then seen as in flight and finished (harmless), never as neither (its seed would look abandoned)."""
    busy = in_flight(params, runs_root)
    return busy, study_records(params, runs_root, reports_root)


def study_records(params: Params, runs_root=None, reports_root=None) -> list[Result]:
    """The current records of the preset's grid, in grid order, as Results that know their Run."""
    roots = {"runs_root": runs_root, "reports_root": reports_root}
    runs = [Run(params, *place, **roots) for place in grid(params)]
    return [Result.of(record, run) for run in runs if (record := current_record(run)) is not None]


def pace_records(params: Params, runs_root=None, reports_root=None, own: list[dict] | None = None) -> list[dict]:
    """The finished records to take a run's pace from (time_limit): the preset's own (`own`, when the
    caller has just read them: study_records), and those of the studies whose design names it as their
    longer-budget check (the same variants and recipe)."""
    found = list(study_records(params, runs_root, reports_root) if own is None else own)
    for name in checked_by(params.name):
        found += study_records(load_params(name), runs_root, reports_root)
    return finished_runs(found)


def reference_runs(params: Params, runs_root=None, reports_root=None) -> list[Run]:
    """The runs `params.reference` trains for this preset (its variants this preset does not list, on
    this preset's datasets and seeds); one UserError if any would differ from the run this preset would
    train itself (another key: data, training or model settings the variant reads)."""
    from ..params_checks import referenced_variants

    if not params.reference:
        return []
    reference = load_params(params.reference)
    found = []
    for dataset in params.datasets:
        for variant in referenced_variants(params, reference):
            for seed in params.seeds:
                mine = Run(params, dataset, variant, seed)
                theirs = Run(reference, dataset, variant, seed, runs_root=runs_root, reports_root=reports_root)
                if mine.key != theirs.key:
                    raise UserError(
                        f"reference ({reference.name}): its {variant} runs use other data, training or model "
                        f"settings than this preset gives {variant}; change only what {variant} does not read "
                        "(model.favor for a softmax reference)."
                    )
                found.append(theirs)
    return found


def reference_records(params: Params, runs_root=None, reports_root=None) -> list[Result]:
    """The finished records of reference_runs(params), read from the reference's runs or kept copies."""
    runs = reference_runs(params, runs_root, reports_root)
    return [Result.of(record, run) for run in runs if is_finished(record := current_record(run) or {})]
