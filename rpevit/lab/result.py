"""A run's record as a value: `Result`, the one typed result every report, claim, rule and notebook
reads. Its fields are the record schema's (rpevit.lab.schema.RunRecord: the list exists once), read
as attributes (`result.top1`, `result.test_correct`, `result.budgets`); it also knows its `Run` (when
read through the catalog), its place in the grid, its canonical variant name and whether it finished.

Records stay plain JSON on disk (`record.json`, kept copies); `Result.of` reads one, keeping fields of
older records that the schema no longer lists in `extra`, and `as_record()` gives the record back as
written. A Result is immutable. It still answers `result["top1"]` and `result.get(...)` (a read-only
mapping of the record's fields) so that the record files, the summary writer and code that serialises
records take either; readers use the attributes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.metrics import busy_load
from ..core.variants import parse_variant
from .schema import FIELDS, FINISHED, RunRecord

_ORDER = tuple(f.name for f in FIELDS)  # the schema's fields, in its order
_NAMES = frozenset(_ORDER)


@dataclass(frozen=True)
class Result(RunRecord, Mapping):
    """A run record as a value: the schema's fields, plus what an older record held beyond them
    (`extra`) and the `Run` it belongs to (`run`; None for a record read without its preset)."""

    extra: dict = field(default_factory=dict, compare=False, repr=False)
    run: Any = field(default=None, compare=False, repr=False)  # rpevit.lab.store.run.Run

    @classmethod
    def of(cls, record: Mapping, run=None) -> Result:
        """The Result of a record (a dict as written, or a Result: returned as is, with `run` set)."""
        if isinstance(record, Result):
            return record if run is None else dataclasses.replace(record, run=run)
        known = {k: v for k, v in record.items() if k in _NAMES}
        return cls(**known, extra={k: v for k, v in record.items() if k not in _NAMES}, run=run)

    @property
    def finished(self) -> bool:
        """Trained and tested (a diverged run, or a failed or skipped row, has no test metrics)."""
        return self.status == FINISHED

    @property
    def place(self) -> tuple[str, str, int]:
        """(dataset, variant, seed): the run's place in its preset's grid."""
        return self.dataset, self.variant, self.seed

    @property
    def name(self) -> str:
        """The canonical variant name (mechanisms in their fixed order)."""
        return parse_variant(self.variant).name

    @property
    def busy(self) -> bool:
        """Whether its timings were taken on a busy machine (1-minute load above the cores + 0.5)."""
        return busy_load(self.load_average, self.cpu_count)

    def as_record(self) -> dict:
        """The record as written: the schema's fields and the older ones kept in `extra`."""
        return {**{name: getattr(self, name) for name in _ORDER}, **self.extra}

    # a read-only mapping of the record's fields (for writers and serialisers; readers use attributes)
    def __getitem__(self, key: str):
        if key in _NAMES:
            return getattr(self, key)
        return self.extra[key]

    def __iter__(self) -> Iterator[str]:
        return iter([*_ORDER, *self.extra])

    def __len__(self) -> int:
        return len(_ORDER) + len(self.extra)


def results(records: Iterable[Mapping]) -> list[Result]:
    """Records (dicts or Results) as Results, in order."""
    return [Result.of(record) for record in records]
