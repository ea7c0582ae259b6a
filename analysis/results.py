"""Tables computed from run records for the results notebooks: per-variant means over seeds, the
accuracy gap of each Performer variant to softmax, and the seeds' published numbers side by side.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict

from rpevit.core.variants import parse_variant
from rpevit.lab.params import PROJECT_ROOT
from rpevit.lab.result import Result, results
from rpevit.lab.schema import (
    DIVERGED,
    METRIC_COLUMNS,
    finished,  # the one filter (re-exported: notebooks import it from here)
)

PUBLISHED = PROJECT_ROOT / "params" / "published_results.csv"

RESULT_COLUMNS = METRIC_COLUMNS  # (record key, table column, scale), from the record schema


def _groups(records) -> dict[tuple[str, str], list[Result]]:
    """The finished Results per (dataset, variant)."""
    groups = defaultdict(list)
    for result in finished(results(records)):
        groups[(result.dataset, result.variant)].append(result)
    return groups


def results_table(records: list[dict]) -> list[dict]:
    """One row per (dataset, variant): every metric averaged over seeds, with top-1's std."""
    records, rows = results(records), []
    for (dataset, variant), runs in _groups(records).items():
        row = {"dataset": dataset, "variant": variant, "seeds": len(runs)}
        for key, column, scale in RESULT_COLUMNS:
            row[column] = statistics.fmean(getattr(r, key) for r in runs) * scale
            if key == "top1":
                row["top-1 std"] = statistics.stdev(r.top1 * 100 for r in runs) if len(runs) > 1 else math.nan
        # timings taken while the machine's load exceeded its cores are not comparable: say so
        row["busy timings"] = f"{sum(r.busy for r in runs)}/{len(runs)}"
        rows.append(row)
    for result in records:
        if result.status == DIVERGED:
            rows.append({"dataset": result.dataset, "variant": result.variant + " (diverged)", "seeds": 1})
    return rows


def gap_table(records: list[dict]) -> list[dict]:
    """For each Performer variant: its top-1 gap to the exact backend with the same positions and to
    the exact backend with APE.

    gap = Performer accuracy − exact accuracy, in points (positive: the Performer is ahead) — the one
    sign convention of every report (claims, headline, Findings).
    """
    from rpevit.core.attention import exact_backends

    exact = exact_backends()[0]
    mean_top1 = {key: 100 * statistics.fmean(r.top1 for r in runs) for key, runs in _groups(records).items()}
    rows = []
    for (dataset, variant), accuracy in sorted(mean_top1.items()):
        parsed = parse_variant(variant)
        if parsed.backend in exact_backends():
            continue
        same = mean_top1.get((dataset, parse_variant("+".join((exact,) + parsed.positions)).name))
        baseline = mean_top1.get((dataset, f"{exact}+ape"))
        rows.append(
            {
                "dataset": dataset,
                "variant": variant,
                "backend": parsed.backend,
                "positions": "+".join(parsed.positions) or "none",
                "top-1 %": accuracy,
                f"{exact}, same positions %": same if same is not None else math.nan,
                f"Performer − {exact}, same positions (points)": accuracy - same if same is not None else math.nan,
                f"Performer − {exact}+ape (points)": accuracy - baseline if baseline is not None else math.nan,
            }
        )
    return rows


def published_results() -> list[dict]:
    """The seeds' published numbers (params/published_results.csv), each row with its source."""
    with PUBLISHED.open() as handle:
        return [{**row, "value": float(row["value"])} for row in csv.DictReader(handle)]


def published_side_by_side(records: list[dict]) -> list[dict]:
    """Published top-1 (per source, dataset, model) next to our top-1 for the same variant name."""
    groups = _groups(records)
    ours = {variant: 100 * statistics.fmean(r.top1 for r in runs) for (_, variant), runs in groups.items()}
    our_dataset = ", ".join(sorted({dataset for dataset, _ in groups})) or "—"
    rows = []
    for row in published_results():
        if row["metric"] != "top1_pct":
            continue
        rows.append(
            {
                "variant": row["variant"],
                "published top-1 %": row["value"],
                "published dataset": row["dataset"],
                "model": row["model"],
                "source": f"{row['source'].split(' (')[0]}, {row['table']}",
                f"ours top-1 % ({our_dataset})": ours.get(row["variant"], math.nan),
            }
        )
    return rows
