"""What a study still wants: one answer for the scheduler, `status`, the planned-run count and the ETA.

A `Snapshot` (catalog.Snapshot) is what one decision reads from disk, once (`snapshot`): the preset's current records
(finished and diverged), the places in flight in other processes, why its secondary runs are held ('' when
they are not: the longer-budget check trains first) and the finished records that give a pace.
`wanted(params, snapshot)` sorts the grid's unfinished runs, in training order, into `left` (the design
trains them now, or they are in flight), `waiting` (the stopping rule, a budget or the primary grid
decides on them after the runs in flight) and `held` (secondary runs held for the longer-budget check);
a run the design rules out (policy.decide: skip) is in none. Without a design every unfinished run is left.
The planned runs (`planned_runs`, `planned_line`: what notebooks 10 and 45 count) and why secondary runs are
held (`secondary_held`) read it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..design import grid
from ..params import Params, load_params
from ..result import Result, results
from ..schema import finished as finished_runs
from ..store import catalog
from ..store.catalog import Snapshot
from ..store.run import Run
from . import policy

Place = tuple[str, str, int]  # (dataset, canonical variant, seed)
LEFT, WAITING, HELD = "left", "waiting", "held"


@dataclass(frozen=True)
class Wanted:
    """The unfinished runs a study still wants, each with its group (LEFT, WAITING or HELD), in order."""

    sorted: tuple[tuple[Place, str], ...]

    def _group(self, name: str) -> list[Place]:
        return [place for place, group in self.sorted if group == name]

    @property
    def left(self) -> list[Place]:
        return self._group(LEFT)

    @property
    def waiting(self) -> list[Place]:
        return self._group(WAITING)

    @property
    def held(self) -> list[Place]:
        return self._group(HELD)

    @property
    def runs(self) -> list[Place]:
        """What the design still trains, now or after the runs in flight (left and waiting), in order."""
        return [place for place, group in self.sorted if group != HELD]


def wanted(params, snapshot: Snapshot) -> Wanted:
    """The grid's unfinished runs by what happens to them now (module docstring)."""
    done, busy, held = snapshot.done, snapshot.busy, snapshot.held
    places = [place for place in grid(params) if place not in done]
    if not params.design.active:
        return Wanted(tuple((place, LEFT) for place in places))
    found = []
    for place in places:
        verdict, why = (
            ("train", "") if place in busy else policy.decide(Run(params, *place), snapshot.records, busy, held)
        )
        if verdict != "skip":
            found.append((place, LEFT if verdict == "train" else WAITING))
        elif held and why == held:
            found.append((place, HELD))
    return Wanted(tuple(found))


def primary_settled(params, records: list[dict]) -> bool:
    """Whether one dataset's primary grid is settled (its current records, finished and diverged): at
    least min_seeds complete and no primary run left that the stopping rule or the budget would still
    train (a run in flight elsewhere counts as left). Its contrasts then stay as they are."""
    if policy.primary_progress(params, records).complete < params.design.stopping.min_seeds:
        return False
    dataset = Result.of(records[0]).dataset
    primary = set(params.design.primary)  # stored canonical
    return not any(d == dataset and v in primary for d, v, _ in wanted(params, Snapshot(records)).runs)


def planned_runs(params: Params, current: list[dict]) -> list[tuple[str, str, int]]:
    """The runs a preset has finished or will still train, given its current records (study_records): its
    grid; for a design, its finished runs and those its stopping rule and budgets still want
    (wanted.wanted: left and waiting), so seeds and variants it has ruled out are not counted on."""
    if not params.design.active:
        return grid(params)
    done = [r.place for r in finished_runs(results(current))]
    return done + wanted(params, Snapshot(current)).runs


def planned_line(params: Params, current: list[dict]) -> str:
    """'k of n planned runs finished for <preset>': n counts, for a design, its finished runs and those
    its stopping rule still wants (planned_runs) — the count notebook 45 states — with the grid's
    size named as the most it could train."""
    done = len(finished_runs(results(current)))
    line = f"{done} of {len(planned_runs(params, current))} planned runs finished for {params.name}"
    if params.design.active:
        line += f" (a designed study: its stopping rule and budgets could train at most {len(grid(params))})"
    return line


def secondary_held(params: Params, runs_root=None, reports_root=None) -> str:
    """Why the design's secondary runs may not start yet ("" when they may): its longer-budget check
    (design.plateau_check, a preset) still wants runs — finished neither here nor in flight. It
    trains first; the message says how to train it."""
    name = params.design.plateau_check
    if not name:
        return ""
    check = load_params(name)
    busy, finished = catalog.in_flight_and_records(check, runs_root, reports_root)
    left = wanted(check, Snapshot(finished, busy)).runs
    if not left:
        return ""
    flying = sum(place in busy for place in left)
    head = f"the longer-budget check {name} trains before the secondary variants and wants {len(left)} more runs"
    if flying == len(left):
        return head + " (all in flight in other processes); run this study again once they finish"
    return head + (f" ({flying} in flight)" if flying else "") + f"; train it with `python -m rpevit study {name}`"


def snapshot(params: Params, runs_root=None, reports_root=None, ours=frozenset()) -> Snapshot:
    """What one decision reads, once (catalog.Snapshot): runs in flight (and `ours`, handed out by this
    process and not ended), the current records, why secondary runs are held, the records giving a pace."""
    busy, current = catalog.in_flight_and_records(params, runs_root, reports_root)
    held = secondary_held(params, runs_root, reports_root) if params.design.active else ""
    pace = catalog.pace_records(params, runs_root, reports_root, own=current)
    return Snapshot(current, busy | set(ours), held, pace)
