"""What a study still wants: one answer for the scheduler, `status`, the planned-run count and the ETA.

A `Snapshot` is what one decision reads from disk, once (catalog.snapshot): the preset's current records
(finished and diverged), the places in flight in other processes, why its secondary runs are held ('' when
they are not: the longer-budget check trains first) and the finished records that give a pace.
`wanted(params, snapshot)` sorts the grid's unfinished runs, in training order, into `left` (the design
trains them now, or they are in flight), `waiting` (the stopping rule, a budget or the primary grid
decides on them after the runs in flight) and `held` (secondary runs held for the longer-budget check);
a run the design rules out (design.decide: skip) is in none. Without a design every unfinished run is left.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.variants import parse_variant
from . import design
from .result import Result, results

Place = tuple[str, str, int]  # (dataset, canonical variant, seed)
LEFT, WAITING, HELD = "left", "waiting", "held"


def grid(params) -> list[Place]:
    """The (dataset, canonical variant, seed) triples of a preset, in training order (a preset with a
    design: every run it may train, primary seed-major first; design.ordered_runs)."""
    if params.design.active:
        return design.ordered_runs(params)
    if params.order == "seed":
        return [(d, parse_variant(v).name, s) for d in params.datasets for s in params.seeds for v in params.variants]
    return [(d, parse_variant(v).name, s) for d in params.datasets for v in params.variants for s in params.seeds]


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
    def done(self) -> set[Place]:
        """Places with a current record: finished or diverged, so not trained again."""
        return {r.place for r in self.records}


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
        verdict, why = ("train", "") if place in busy else design.decide(params, place, snapshot.records, busy, held)
        if verdict != "skip":
            found.append((place, LEFT if verdict == "train" else WAITING))
        elif held and why == held:
            found.append((place, HELD))
    return Wanted(tuple(found))


def primary_settled(params, records: list[dict]) -> bool:
    """Whether one dataset's primary grid is settled (its current records, finished and diverged): at
    least min_seeds complete and no primary run left that the stopping rule or the budget would still
    train (a run in flight elsewhere counts as left). Its contrasts then stay as they are."""
    if design.primary_progress(params, records).complete < params.design.stopping.min_seeds:
        return False
    dataset = Result.of(records[0]).dataset
    primary = {parse_variant(v).name for v in params.design.primary}
    return not any(d == dataset and v in primary for d, v, _ in wanted(params, Snapshot(records)).runs)
