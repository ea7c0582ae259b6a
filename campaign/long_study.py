"""The longer-budget study's one line (params/canvas40_long.yaml): how many runs have finished, its go/no-go
by the pre-registered rule so far, and each Performer's gap to softmax at the longest budget with its 95 %
t-interval over seeds. Its report carries the line (`**In one line**`), and the README quotes it in its
`long` block (`python -m campaign gap-pilot canvas40_long` writes both)."""

from __future__ import annotations

import math

from rpevit.lab.result import results
from rpevit.lab.schema import finished
from rpevit.lab.store.catalog import grid
from rpevit.lab.tables import signed

from . import gap_pilot, primary_contrasts, readme_blocks

QUOTED = ("canvas40_long",)  # studies outside the pilot orders whose line the README quotes


def _gap(row: dict) -> str:
    """'favor −1.80 [−2.40, −1.20] (4 seeds)' or 'favor −0.07 (1 seed)'."""
    backend = row["contrast"].split(" − ")[0]
    interval = "" if math.isnan(row["low"]) else f" [{signed(row['low'])}, {signed(row['high'])}]"
    return f"{backend} {signed(row['mean'])}{interval} ({row['seeds']} seed{'s' * (row['seeds'] != 1)})"


def one_line(summary: dict) -> str:
    """The study's line from its report's summary (gap_pilot.pilot_summary): runs finished, the go/no-go by
    the pre-registered rule ("so far" while runs are left), each Performer's gap at the longest budget."""
    params, found = summary["params"], summary["found"]
    longest, planned = params.train.epochs, len(grid(params))
    done = len(finished(results(found["own"])))
    at_end = gap_pilot.at_longest(summary["raw_gaps"], longest)
    verdict = ("GO" if gap_pilot.is_go(at_end, params.name) else "NO-GO") if at_end else "not decided"
    short, _ = primary_contrasts.PRIMARY[params.name]
    backends = gap_pilot.performers(params)
    rows = primary_contrasts.contrast_rows(found["top1"], list(params.seeds), backends, short, longest)
    gaps = [_gap(r) for r in rows if r["kind"] == "gap" and r["seeds"]]
    waiting = [r["contrast"].split(" − ")[0] for r in rows if r["kind"] == "gap" and not r["seeds"]]
    return (
        f"`{params.name}`, {done} of {planned} runs: "
        f"**{verdict}{'' if summary['complete'] else ' so far'}** — Performer − softmax at {longest} epochs: "
        + "; ".join([*gaps, *([f"{', '.join(waiting)}: no finished pair yet"] if waiting else [])])
        + "."
    )


def report_lines(summary: dict) -> list[str]:
    """The report's `**In one line**` (after its intro) for a study the README quotes; [] for any other."""
    return ["", readme_blocks.ONE_LINE + one_line(summary)] if summary["params"].name in QUOTED else []


def sync_readme(readme, report) -> bool:
    """Put the study report's `**In one line**` into the README's long block; True if it changed."""
    said = [line for line in report.read_text().splitlines() if line.startswith(readme_blocks.ONE_LINE)]
    return readme_blocks.fill(
        readme, "long", "".join(f"- {line.removeprefix(readme_blocks.ONE_LINE)}\n" for line in said)
    )
