"""What each variant costs to train, read from the side-by-side speed benchmark kept for a preset
(reports/bench/cpu_speed_<preset>.csv, written by `python -m rpevit bench speed --csv`): the rows
(`read_speed`) and the median seconds per image per variant (`train_costs`), which the time limit and
`status` scale a finished variant's pace by, and the claims read."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from ..params import load_params
from . import records


def speed_path(params, reports_root=None) -> Path:
    """Where the preset's side-by-side speed benchmark is kept: reports/bench/cpu_speed_<preset>.csv."""
    return Path(reports_root or records.reports_root()) / "bench" / f"cpu_speed_{params.name}.csv"


def read_speed(params, reports_root=None) -> list[dict] | None:
    """The per-round rows of the preset's speed benchmark (variant_speeds), or None if it was not kept."""
    path = speed_path(params, reports_root)
    if not path.is_file():
        return None
    with path.open() as handle:
        return [
            {k: (v if k in ("variant", "preset") else float(v)) for k, v in row.items()}
            for row in csv.DictReader(handle)
        ]


def train_costs(params, reports_root=None) -> dict[str, float]:
    """Per variant, the median training seconds per image over the rounds of the side-by-side speed
    benchmark kept for the preset — or, for a longer-budget check, for the study that names it (the
    same variants and model): what one variant costs relative to another (time_limit.seconds_per_epoch
    scales a finished variant's pace by it). {} when no benchmark was kept."""
    from ..params import checked_by  # read at call time (a test stands in for it)

    for preset in [params, *(load_params(name) for name in checked_by(params.name))]:
        rows = read_speed(preset, reports_root)
        if rows:
            times: dict[str, list[float]] = {}
            for row in rows:
                times.setdefault(row["variant"], []).append(row["train_seconds_per_image"])
            return {variant: statistics.median(t) for variant, t in times.items()}
    return {}
