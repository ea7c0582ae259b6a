"""The pre-registered primary contrasts of the longer-budget study (params/canvas40_long.yaml, "Primary
contrasts"): per Performer b, (1) its gap b − softmax in test top-1 points at the longest budget and (2)
the gap's change from the shorter budget to the longest, both paired by seed, each with a 95 %
Student-t interval over the seeds that have every run the contrast reads; the contrasts form their own
family under Holm's step-down rule (Holm 1979) over their two-sided p-values.

Beside them, descriptive and outside that family: the same contrasts with the seed SD pooled over the
Performers' cells of one kind (their gaps at the longest budget, or their changes), which share model,
recipe, seeds and budgets (pilot_answer.pooled_sd): with two seeds a cell alone has df 1, pooled over k
cells df k.

A contrast with fewer than two seeds has no interval or p: it is "not testable yet" and does not count
in the family, so an interim table adjusts over the contrasts testable so far (and says how many).
"""

from __future__ import annotations

import math

from rpevit.core.stats import contrast_test, holm
from rpevit.lab.tables import markdown_table, signed

from .gap_arithmetic import gap_changes, seed_gaps
from .gap_pilot import GO_GAP, GO_UPPER, PRIMARY, performers
from .pilot_answer import pooled_interval, pooled_sd

ALPHA = 0.05
NOT_YET = "not testable yet"
NOTE = "These changes per seed are tested below, with the gaps at the longest budget, as pre-registered."


def _reading(kind: str, test: dict, adjusted: float) -> str:
    """What one contrast says once adjusted: a direction only where Holm's adjusted p is below ALPHA."""
    if math.isnan(adjusted):
        return NOT_YET
    if adjusted >= ALPHA:
        return "inconclusive"
    return _direction(kind, test["effect"] < 0)


def _direction(kind: str, softmax_ahead: bool) -> str:
    """A direction's words: for a gap who is ahead, for a change of the gap whether softmax's lead grew."""
    if kind == "gap":
        return "softmax ahead" if softmax_ahead else "Performer ahead"
    return "softmax's lead grew" if softmax_ahead else "softmax's lead shrank"


def contrast_rows(top1: dict, seeds: list[int], backends, short: int, long: int) -> list[dict]:
    """Per Performer backend: the gap at `long` epochs and its change from `short`, paired by seed, with the
    95 % t-interval, the two-sided p, Holm's adjusted p over the family's testable contrasts and the reading.
    Rows carry numbers (nan where not testable); `table` formats them."""
    rows = []
    for backend in backends:
        pair = f"{backend} − softmax"
        for kind, label, values in (
            ("gap", f"{pair} at {long}", seed_gaps(top1, seeds, long, backend)),
            ("change", f"change of {pair}, {short}→{long}", gap_changes(top1, seeds, short, long, backend)),
        ):
            test = contrast_test(values, "less") if values else {"effect": math.nan, "n": 0}
            two_sided = min(1.0, 2 * min(test["p_support"], test["p_contradict"])) if test["n"] > 1 else math.nan
            rows.append(
                {
                    "kind": kind,
                    "contrast": label,
                    "seeds": test["n"],
                    "per seed": ", ".join(map(signed, values)) or "—",
                    "values": values,
                    "mean": test["effect"],
                    "low": test.get("low", math.nan),
                    "high": test.get("high", math.nan),
                    "p": two_sided,
                    "test": test,
                }
            )
    for row, adjusted in zip(rows, holm([r["p"] for r in rows])):
        row["p (Holm)"] = adjusted
        row["reading"] = _reading(row["kind"], row["test"], adjusted)
    return rows


def _number(value: float, text: str) -> str:
    return "—" if math.isnan(value) else text


def table(rows: list[dict]) -> list[dict]:
    """The rows as the report prints them: signed points, an interval, p-values to three digits."""
    return [
        {
            "contrast": r["contrast"],
            "seeds": r["seeds"],
            "per seed": r["per seed"],
            "mean": _number(r["mean"], signed(r["mean"])),
            "95 % interval": _number(r["low"], f"[{signed(r['low'])}, {signed(r['high'])}]"),
            "p": _number(r["p"], f"{r['p']:.3f}"),
            "p (Holm)": _number(r["p (Holm)"], f"{r['p (Holm)']:.3f}"),
            "reading": r["reading"],
        }
        for r in rows
    ]


def family_note(rows: list[dict], complete: bool) -> str:
    """How the family was adjusted: over how many of its contrasts, and whether every run had finished."""
    testable = sum(not math.isnan(r["p"]) for r in rows)
    state = "" if complete else " Interim: not every run has finished, so fewer seeds enter than planned."
    # `complete` is also true when the spent budget ended the study: its decision line says with how many runs
    return (
        f"Per seed: Performer − softmax in test top-1 points (negative: softmax ahead), over the seeds with "
        f"every run the contrast reads. 95 % Student-t intervals over those seeds, unadjusted, as "
        f"pre-registered; p two-sided (H0: no difference); Holm's step-down adjustment over the {testable} of "
        f"{len(rows)} contrasts testable now (two seeds or more); a direction is read only where the adjusted "
        f"p is below {ALPHA}.{state}"
    )


def backend_of(row: dict) -> str:
    """The Performer a contrast row reads ('favor' of 'favor − softmax at 64')."""
    return row["contrast"].split(" − ")[0]


def _pooled_reading(kind: str, low: float, high: float) -> str:
    return "inconclusive" if low <= 0 <= high else _direction(kind, high < 0)


def _pooled(rows: list[dict], kind: str) -> tuple[dict | None, list[tuple[dict, tuple]]]:
    """(the seed SD pooled over the rows of `kind` with two seeds or more (pilot_answer.pooled_sd), and per such
    row its (mean, low, high) with that SD); (None, []) where no row has two seeds."""
    mine = [r for r in rows if r["kind"] == kind and len(r["values"]) > 1]
    if not (pooled := pooled_sd([r["values"] for r in mine])):
        return None, []
    return pooled, [(r, pooled_interval(r["values"], pooled)) for r in mine]


def pooled_clause(rows: list[dict]) -> str:
    """The gaps' pooled intervals in a few words, for the study's one line: 'seed SD pooled over 3 cells,
    0.24 (df 3; descriptive): favor [−0.80, +0.26], …'; '' where fewer than two gaps have two seeds."""
    pooled, intervals = _pooled(rows, "gap")
    if not pooled or pooled["cells"] < 2:  # one cell: its own interval, already said
        return ""
    named = (f"{backend_of(r)} [{signed(low)}, {signed(high)}]" for r, (_, low, high) in intervals)
    return (
        f"seed SD pooled over {pooled['cells']} cells, {pooled['sd']:.2f} (df {pooled['df']}; descriptive): "
        + ", ".join(named)
    )


def pooled_sentences(rows: list[dict], upper: float | None = None) -> list[str]:
    """Per kind of contrast (gap, change): each Performer's mean with a 95 % t-interval from the seed SD pooled
    over the Performers' cells of that kind that have two seeds or more; [] where none has two. With the rule's
    upper bound `upper` (gap_pilot.GO_UPPER), also which gaps its thresholds pass with the pooled intervals."""
    said, passing = [], []
    for kind, what in (("gap", "gap at the longest budget"), ("change", "change of the gap")):
        pooled, intervals = _pooled(rows, kind)
        if not pooled:
            continue
        parts = []
        for r, (mean, low, high) in intervals:
            wide = kind == "gap" and low <= -GO_GAP <= high
            if kind == "gap" and upper is not None and mean <= -GO_GAP and high < upper:
                passing.append(backend_of(r))
            reading = _pooled_reading(kind, low, high) + (f"; −{GO_GAP:g} inside it" if wide else "")
            parts.append(f"{r['contrast']} {signed(mean)} [{signed(low)}, {signed(high)}] ({reading})")
        bartlett = "" if math.isnan(pooled["bartlett_p"]) else f", Bartlett p {pooled['bartlett_p']:.2f}"
        said.append(
            f"Each {what} (SD {pooled['sd']:.2f} points pooled over {pooled['cells']} cells, df {pooled['df']}"
            f"{bartlett}): " + "; ".join(parts) + "."
        )
    if said and upper is not None:
        said.append(
            f"The rule's thresholds (mean ≤ −{GO_GAP:g}, upper end < {signed(upper)}) read with the pooled intervals: "
            + (f"met by {', '.join(passing)}" if passing else "met by no Performer")
            + " (descriptive; the verdict is the pre-registered rule's)."
        )
    return said


def summary_rows(summary: dict) -> list[dict]:
    """contrast_rows of a report's summary (gap_pilot.pilot_summary) at its preset's PRIMARY budgets, computed
    once per summary: kept in it under "contrasts" for the report's one line (long_study) and its table."""
    if "contrasts" not in summary:
        params = summary["params"]
        top1, seeds = summary["found"]["top1"], list(params.seeds)
        summary["contrasts"] = contrast_rows(top1, seeds, performers(params), *PRIMARY[params.name])
    return summary["contrasts"]


def section(summary: dict) -> list[str]:
    """The report's lines for a preset with pre-registered primary contrasts, after its budget-sensitivity
    tables ([] for any other), from its report's summary (gap_pilot.pilot_summary)."""
    params = summary["params"]
    if params.name not in PRIMARY:
        return []
    rows = summary_rows(summary)
    shown = table(rows)
    return [
        NOTE,
        "",
        f"## Primary contrasts (pre-registered: {len(rows)} contrasts, one family under Holm)",
        "",
        markdown_table(shown, list(shown[0])),
        family_note(rows, summary["complete"]),
        *pooled_lines(rows, GO_UPPER.get(params.name)),
    ]


def pooled_lines(rows: list[dict], upper: float | None = None) -> list[str]:
    """The pooled reading (pooled_sentences) as the report's paragraph after the family's table; [] without one."""
    if not (said := pooled_sentences(rows, upper)):
        return []
    return [
        "",
        "Pooled (descriptive, outside the pre-registered family and its rule): the Performers' cells of one kind "
        "share model, recipe, seeds and budgets, so their seed SDs pool into one with more degrees of freedom "
        "than a cell's own (df 1 with two seeds); unadjusted 95 % t-intervals. " + " ".join(said),
    ]
