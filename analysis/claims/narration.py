"""The claims in words and tables for notebook 45 and the report: each effect stated with its direction
("favor (Performer) ahead by 0.65 points [0.19, 1.12]"), each verdict with its reason or, when
inconclusive, where its interval lies; the short claims table and its details; the protocol, the
answer to the research question, the seed-level descriptive tables and the timing caveats.

Sign convention everywhere: an effect is a − b as the claim's Comparison writes it, which is
Performer − softmax wherever a Performer meets softmax (positive: the Performer ahead).
"""

from __future__ import annotations

import math

from rpevit.core.attention import exact_backends
from rpevit.core.variants import parse_variant
from rpevit.lab.result import results
from rpevit.lab.schema import finished
from rpevit.lab.store.catalog import grid
from rpevit.lab.tables import signed

from .evaluation import family_size
from .registry import (
    ALPHA,
    CLAIMS,
    CONTRADICTED,
    INCONCLUSIVE,
    MARGIN_POINTS,
    MARGIN_TIME_PCT,
    NO_DATA,
    NOT_PLANNED,
    S002,
    SUPPORTED,
    TOP1,
    UNDECIDED,
    VERDICTS,
    Comparison,
    claims_for,
)
from .speed import BUSY, CROSSOVER_TOKENS

SIGN = "Performer − softmax: positive = Performer ahead"
EFFECT_HEADER = f"effect a − b [interval] ({SIGN})"


# --------------------------------------------------------------------------- numbers and names


def plain(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}".replace("-", "−")


def points(value: float) -> str:
    return f"{value:g} point{'' if value == 1 else 's'}"


def _backend_name(backend: str, other: str) -> str:
    exact = exact_backends()
    return f"{backend} (Performer)" if backend not in exact and other in exact else backend


def side_names(comparison: Comparison) -> tuple[str, str]:
    """What a and b of a comparison are called in words: the backends when only they differ, the
    positional methods when only those differ, else the variants."""
    a, b = parse_variant(comparison.a), parse_variant(comparison.b)
    if a.positions == b.positions and a.backend != b.backend:
        return _backend_name(a.backend, b.backend), _backend_name(b.backend, a.backend)
    if a.backend == b.backend:
        return "+".join(a.positions) or "no position", "+".join(b.positions) or "no position"
    return a.name, b.name


def performer_vs_exact(comparison: Comparison) -> bool:
    """True when each difference of the comparison (a − b, and c − d) is a Performer minus an exact
    backend with the same positions: its effect follows the sign convention Performer − softmax."""
    exact = exact_backends()
    pairs = [(comparison.a, comparison.b)] + ([(comparison.c, comparison.d)] if comparison.differences else [])
    for performer, baseline in pairs:
        p, e = parse_variant(performer), parse_variant(baseline)
        if p.positions != e.positions or p.backend in exact or e.backend not in exact:
            return False
    return True


def ahead(comparison: Comparison, positive: bool, measure: str = TOP1) -> str:
    """Who is ahead when the effect has this sign, in words."""
    if comparison.differences:
        a, b, c, d = (parse_variant(v) for v in comparison.variants)
        direction = "higher" if positive else "lower"
        if (
            (a.backend, b.backend) == (c.backend, d.backend)
            and a.positions == b.positions
            and c.positions == d.positions
        ):
            return (
                f"{a.backend} − {b.backend} {direction} with {'+'.join(a.positions) or 'no position'} "
                f"than with {'+'.join(c.positions) or 'no position'}"
            )
        return f"({comparison.a} − {comparison.b}) {direction} than ({comparison.c} − {comparison.d})"
    a, b = side_names(comparison)
    if measure != TOP1:
        return f"{a} {'slower' if positive else 'faster'}"
    return f"{a if positive else b} ahead"


def _unit(measure: str) -> str:
    return "points" if measure == TOP1 else "% inference time"


def time_multiple(percent: float) -> float:
    """A time claim's effect 100·(a/b − 1) as the one time unit of the reports: a's time × b's (> 1: slower)."""
    return 1 + percent / 100


def effect_words(row: dict) -> str:
    """The effect of a claims row with its interval in the one sign of every page (a − b: Performer −
    softmax wherever a Performer meets softmax), then who is ahead in words:
    '−0.83 points [−1.71, +0.04] (softmax ahead)'; time as a multiple of the other side's:
    'favor (Performer) at 1.84× softmax's time [1.74, 1.93]'; '' without an effect."""
    effect = row.get("effect", math.nan)
    if not math.isfinite(effect):
        return ""
    low, high = row.get("low", math.nan), row.get("high", math.nan)
    if row["measure"] != TOP1:
        a, b = side_names(row["comparison"])
        text = f"{a} at {time_multiple(effect):.2f}× {b.split(' (')[0]}'s time"
        if not math.isfinite(low):
            return text + " (no interval)"
        return text + f" [{time_multiple(low):.2f}, {time_multiple(high):.2f}]"
    interval = f" [{signed(low)}, {signed(high)}]" if math.isfinite(low) else " (no interval)"
    return f"{signed(effect)} points{interval} ({ahead(row['comparison'], effect >= 0, row['measure'])})"


def _margin_text(row: dict) -> str:
    margin = row["margin"]
    if row["measure"] != TOP1:  # the one time unit: × the other's time
        low, high = time_multiple(-margin), time_multiple(margin)
        return f"{low:.2f}–{high:.2f}× time" if row["kind"] == "equal" else f"≤ {high:.2f}× time"
    return f"±{points(margin)}" if row["kind"] == "equal" else f"−{points(margin)}"


def interval_reading(row: dict) -> str:
    """Where a tested row's interval lies, in words: whether it excludes 0 (and who is ahead, in words
    that read the same whichever way the effect is printed) or spans 0, against the margin, and whether
    a one-sided test passed alone (its raw p) but not after Holm."""
    low, high = row.get("low", math.nan), row.get("high", math.nan)
    if not math.isfinite(low):
        return "no interval"
    comparison, measure = row["comparison"], row["measure"]
    none = "0" if measure == TOP1 else "1×"  # no effect: 0 points, or the same time (1× the other's)
    if low > 0:
        text, known = f"interval excludes {none}: {ahead(comparison, True, measure)}", True
    elif high < 0:
        text, known = f"interval excludes {none}: {ahead(comparison, False, measure)}", True
    else:
        text, known = f"interval spans {none}: direction unclear", False
    if known and row["kind"] in ("greater", "less"):
        text += " as claimed" if (low > 0) == (row["kind"] == "greater") else ", against the claim"
    margin = row.get("margin")
    if margin:
        bounds = (-margin, margin) if row["kind"] == "equal" else (-margin,)
        crossed = [bound for bound in bounds if low < bound < high]
        if crossed and measure != TOP1:
            text += f"{', but' if known else ';'} crossing the {_margin_text(row)} margin"
        elif crossed:
            value = f"±{margin:g}" if len(crossed) == 2 else f"{crossed[0]:+g}".replace("-", "−")
            text += f"{', but' if known else ';'} crossing the {value}-point margin"
        elif row["kind"] == "equal" and -margin < low and high < margin:
            text += f", inside {_margin_text(row)}"
        else:
            text += f", wholly beyond {_margin_text(row)}"
    alone = [
        f"raw p {side} the claim {row[key]:.3f}"
        for key, side, verdict in (("p_support", "for", SUPPORTED), ("p_contradict", "against", CONTRADICTED))
        if row.get(key, math.nan) < ALPHA and row["verdict"] != verdict
    ]
    if alone:
        text += f"; {', '.join(alone)}, not significant after Holm"
    return text


def verdict_text(row: dict) -> str:
    """A row's verdict with why: 'supported', 'inconclusive — interval excludes 0: …',
    'undecided: busy machine', 'no data: not run yet', 'not testable here: …'; a row the runs still to
    train will test says that it holds its place in the Holm family."""
    verdict, reason = row["verdict"], row.get("reason") or ""
    if verdict == INCONCLUSIVE and "comparison" in row:
        return f"{verdict} — {interval_reading(row)}"
    if verdict in (SUPPORTED, CONTRADICTED, INCONCLUSIVE):
        return f"{verdict} ({reason})" if reason else verdict
    text = f"{verdict}: {reason}" if reason else verdict
    return text + " (in the Holm family: the runs still to train will test it)" if row.get("pending") else text


def family_text(rows: list[dict]) -> str:
    """One sentence on the table's Holm family: how many rows it holds, how many are tested now and how
    many await the preset's remaining runs (they hold their share of α until tested)."""
    tested, family = family_size(rows)
    text = f"One Holm correction over the {2 * family} one-sided p-values of {family} row{'s' * (family != 1)}"
    if family == tested:
        return text + ": every row tested now."
    return (
        f"{text}: {tested} tested now and {family - tested} awaiting this preset's remaining runs, which enter "
        "with p = 1 (they reject nothing and keep their share of α), so these verdicts are already corrected "
        "for the finished study's family."
    )


# --------------------------------------------------------------------------- tables


def protocol_text(params, claims=None) -> str:
    """The protocol in Markdown: preset, model, budget, margins, sign, intervals and the correction."""
    claims = claims_for(params) if claims is None else claims
    model = params.model
    kinds = sorted({c.kind for c in claims})
    design, seeds = params.design, ", ".join(map(str, params.seeds))
    if design.active:
        rule = design.stopping
        runs = (
            f"- Datasets: {', '.join(params.datasets)}; seeds from {seeds} in order: {len(design.primary)} primary "
            f"variants × {rule.min_seeds}–{rule.max_seeds} seeds (the stopping rule), {len(design.secondary)} "
            f"secondary variants × {design.secondary_seeds} seeds — at most {len(grid(params))} runs."
        )
    else:
        runs = (
            f"- Datasets: {', '.join(params.datasets)}; seeds {seeds} ({len(params.seeds)} training "
            f"run{'s' if len(params.seeds) != 1 else ''} per variant and dataset); {len(params.variants)} variants."
        )
    return "\n".join(
        [
            f"**Preset `{params.name}`** — {params.description or 'no description'}.",
            "",
            runs,
            f"- Budget: {params.train.epochs} epochs of batch {params.train.batch_size}, training images "
            f"{'all' if params.data.train_size is None else f'capped at {params.data.train_size}'} "
            f"(table 45_protocol gives the count); device `{params.train.device}`.",
            f"- Model: patch {model.patch_size}, dim {model.dim}, depth {model.depth}, heads {model.heads}, "
            f"MLP {model.mlp_dim}, pool `{model.pool}`.",
            f"- {len(claims)} claims ({', '.join(f'{sum(c.kind == k for c in claims)} {k}' for k in kinds)}), each "
            f"tested on every dataset. Margins fixed before any result: ±{points(MARGIN_POINTS)} of top-1 and "
            f"{time_multiple(-MARGIN_TIME_PCT):.2f}–{time_multiple(MARGIN_TIME_PCT):.2f}× the other's inference time "
            "for `equal` (equivalence, TOST) and `at_least` (non-inferiority) claims.",
            "- Sign: every effect is a − b as the claim writes it; wherever a Performer meets softmax that is "
            "Performer − softmax (positive = Performer ahead); time: a's time × b's (> 1: a slower), tested as "
            "100·(a/b − 1) over the benchmark's rounds.",
            f"- Intervals: {100 * (1 - ALPHA):.0f}% for `greater`/`less`, {100 * (1 - 2 * ALPHA):.0f}% for `equal`/"
            f"`at_least` (each bound a one-sided test at α = {ALPHA:g}), Student-t over per-seed contrasts (the seed "
            "is the unit of replication; time: over the rounds of the side-by-side speed benchmark). One Holm "
            "correction over every one-sided p-value of the table (for and against each claim), verdicts at "
            f"α = {ALPHA:g}.",
        ]
    )


def verdict_counts(rows: list[dict]) -> list[dict]:
    """Per source (and over all): how many rows have each verdict."""
    table = []
    for source in [*dict.fromkeys(r["source"] for r in rows), "all"]:
        mine = [r for r in rows if source in ("all", r["source"])]
        table.append({"source": str(source), **{k: sum(r["verdict"] == k for r in mine) for k in VERDICTS}})
        table[-1]["rows"] = len(mine)
    return table


def _finding(row: dict) -> str:
    """One row in the answer: its comparison and dataset, the effect in words, and for an inconclusive
    or undecided row where it stands."""
    seeds = f"{row['seeds']} seed{'s' if row['seeds'] != 1 else ''}"
    text = f"`{row['comparison']}` on {row['dataset']}: {effect_words(row) or 'no effect'} ({seeds})"
    if row["verdict"] == INCONCLUSIVE:
        text += f" — {interval_reading(row)}"
    elif row["verdict"] == UNDECIDED:
        text += f" — {verdict_text(row)}"
    return text


def _short_answer(question: list[dict]) -> str:
    counts = {k: sum(r["verdict"] == k for r in question) for k in VERDICTS}
    if not question:
        return "not asked by this table"
    if counts[NO_DATA] == len(question):
        return "not answered yet"
    closed, open_ = counts[SUPPORTED], counts[CONTRADICTED]
    undecided = len(question) - closed - open_
    # the other rows by their own verdicts, so "undecided" keeps its one meaning (registry.UNDECIDED)
    kinds = ", ".join(f"{counts[k]} {k}" for k in VERDICTS if k not in (SUPPORTED, CONTRADICTED) and counts[k])
    rest = f"; no verdict for the other {undecided} ({kinds})" if undecided else ""
    if closed and open_:
        return f"partly: yes for {closed} of the {len(question)} rows, no for {open_}{rest}"
    if closed:
        return (
            f"yes for {closed} of the {len(question)} rows{rest}"
            if undecided
            else "yes, for every method and backend tested"
        )
    if open_:
        return (
            f"no for {open_} of the {len(question)} rows{rest}"
            if undecided
            else "no, for every method and backend tested"
        )
    return f"no verdict from the data so far ({kinds})"


def answer_text(rows: list[dict], missing: list[dict], planned_runs: int) -> str:
    """The study's answer in Markdown, generated from the claims rows: verdicts per source, the research
    question (seed 002: does each RPE close the Performer–softmax gap?) with each effect's direction, and
    what is still missing (missing: evaluation.missing_runs)."""
    lines = []
    for count in verdict_counts(rows)[:-1]:
        lines.append(
            f"- **{count['source']}**: "
            + ", ".join(f"{count[k]} {k if k != NO_DATA else 'without data'}" for k in VERDICTS if count[k])
            + f" (of {count['rows']} rows)."
        )
    question = [r for r in rows if r["source"] == S002]
    tested = sum(r["verdict"] != NO_DATA for r in question)
    margin = f"±{points(MARGIN_POINTS)}"
    lines += [
        "",
        f"**Does each Performer match softmax with a relative encoding here (seed 002's claim)? — "
        f"{_short_answer(question)}.** The claim, per method and Performer backend, is that `backend+method` "
        f"matches `softmax+method` within {margin} of top-1 ({len(question)} rows, {tested} with data; effects "
        f"{SIGN}, in points with their {100 * (1 - 2 * ALPHA):.0f}% interval). A match is not a gap closed: "
        "where the Performer already matches softmax with absolute positions (the scale line below) there is "
        "no gap to close, and whether an encoding closes one is a difference of differences (a designed "
        "study's pre-registered answer tests it):",
    ]
    lines += _question_findings(question, tested, margin)
    baseline = [r for r in rows if r["claim"] == CLAIMS[0].statement and r["verdict"] != NO_DATA]
    if baseline:
        lines += [
            "",
            f"For scale, the gap without relative encodings ({SIGN}; {100 * (1 - ALPHA):.0f}% interval): "
            + "; ".join(_finding(r) for r in baseline)
            + ".",
        ]
    if any(r["reason"] == "one seed" for r in rows):
        lines += [
            "",
            "Rows with a single seed carry test-set uncertainty only (no training randomness): they are "
            "undecided until a second seed finishes.",
        ]
    lines += _missing_lines(rows, missing, planned_runs)
    return "\n".join(lines)


def _question_findings(question: list[dict], tested: int, margin: str) -> list[str]:
    """answer_text's lines on seed 002's question: verdicts per Performer backend, the findings under
    each verdict, and the rows without data."""
    lines: list[str] = []
    if tested:
        per_backend: dict[str, list[str]] = {}
        for r in question:
            per_backend.setdefault(parse_variant(r["comparison"].a).backend, []).append(r["verdict"])
        lines.append(
            "- per Performer backend: "
            + "; ".join(
                f"`{backend}` " + ", ".join(f"{found.count(k)} {k}" for k in VERDICTS if found.count(k))
                for backend, found in per_backend.items()
            )
            + "."
        )
    phrases = {
        SUPPORTED: f"matches softmax (interval inside {margin})",
        CONTRADICTED: f"a gap beyond {margin} remains (interval outside, Holm-significant)",
        INCONCLUSIVE: f"inconclusive (interval not inside {margin}, nor Holm-significantly outside)",
        UNDECIDED: "undecided",
    }
    for key, phrase in phrases.items():
        found = [r for r in question if r["verdict"] == key]
        if found:
            lines.append(f"- {phrase}: " + "; ".join(_finding(r) for r in found) + ".")
    without = [r for r in question if r["verdict"] == NO_DATA]
    if without and not tested:
        reasons = sorted({r.get("reason") or NO_DATA for r in question})
        lines.append(f"- none of the {len(question)} rows has data yet ({', '.join(reasons)}).")
    elif without:
        lines.append(
            "- no data: " + "; ".join(f"`{r['comparison']}` on {r['dataset']} ({r['reason']})" for r in without) + "."
        )
    return lines


def _missing_lines(rows: list[dict], missing: list[dict], planned_runs: int) -> list[str]:
    """answer_text's closing lines: the planned runs still missing (per dataset), or that all finished."""
    lines: list[str] = []
    still = sum(len(m["seeds"]) for m in missing)
    if still:
        per_dataset: dict[str, int] = {}
        for m in missing:
            per_dataset[m["dataset"]] = per_dataset.get(m["dataset"], 0) + len(m["seeds"])
        lines += [
            "",
            f"**Still missing:** {still} of {planned_runs} planned runs ("
            + ", ".join(f"{d}: {n}" for d, n in per_dataset.items())
            + "; the missing-runs table lists them). "
            "Rows without data and inconclusive rows may change when they finish.",
        ]
        unplanned = {r["comparison"] for r in rows if r["reason"] == NOT_PLANNED}
        if unplanned:
            lines[-1] += (
                f" {len(unplanned)} comparisons need variants this preset does not train (run the "
                "`cpu_claims` preset for them)."
            )
    else:
        lines += ["", f"All {planned_runs} planned runs have finished."]
    return lines


def baseline_text(seed_rows: list[dict], variant: str = "softmax+ape") -> str:
    """Markdown: the softmax baseline's mean test top-1 per dataset with its interval (from seed_table), so
    a reader sees the accuracy level every comparison sits at."""
    rows = [r for r in seed_rows if r["variant"] == variant]
    if not rows:
        return f"No finished run of the baseline `{variant}` yet."
    low, high = (next(k for k in rows[0] if k.endswith(f"t {side}")) for side in ("low", "high"))
    return "\n".join(
        f"The baseline `{variant}` reaches {r['top-1 %']:.2f} % test top-1 on {r['dataset']} (mean of {r['seeds']} "
        + (f"seeds, 95% t-interval [{r[low]:.2f}, {r[high]:.2f}])" if r["seeds"] > 1 else "seed)")
        + ": every effect above is a difference at this level of training, not at the seeds' own budgets."
        for r in rows
    )


def busy_text(records: list[dict], rows: list[dict], preset: str = "<preset>") -> str:
    """Markdown on timings taken while the machine was busy (metrics.busy): the runs' own timings (used
    by no verdict) and the speed benchmark the time claims read."""
    done = finished(results(records))
    flagged = [r for r in done if r.busy]
    time_rows = [r for r in rows if r["measure"] != TOP1]
    if not done:
        text = "No finished runs yet, so no per-run timings to judge."
    elif not flagged:
        text = (
            f"None of the {len(done)} finished runs was timed on a busy machine (1-minute load average above "
            "its cores, `rpevit.core.metrics.busy`)."
        )
    else:
        low, high = min(r.load_average for r in flagged), max(r.load_average for r in flagged)
        cores = ", ".join(map(str, sorted({r.cpu_count for r in flagged})))
        load = f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}–{high:.1f}"
        text = (
            f"{len(flagged)} of {len(done)} finished runs took their timings on a busy machine: a 1-minute "
            f"load average of {load} on {cores} core(s) (`rpevit.core.metrics.busy`). Their inference times and "
            "seconds per epoch measure the machine's load as much as the variant."
        )
    if not time_rows:
        return text
    text += (
        "\n\nNo verdict reads per-run timings: the time claims read the side-by-side speed benchmark "
        f"(`python -m rpevit bench speed --params {preset} --csv reports/bench/cpu_speed_{preset}.csv`)."
    )
    affected = [r for r in time_rows if r["reason"] == BUSY]
    if affected:
        text += (
            f" It was taken on a busy machine, so {len(affected)} of the {len(time_rows)} time-claim rows are "
            f"**{UNDECIDED}: {BUSY}** until it is measured again on a quiet one:\n\n"
            + "\n".join(f"- {r['claim']} · {r['dataset']}" for r in affected)
        )
    elif all(r["verdict"] == NO_DATA for r in time_rows):
        text += f" This preset has none yet: its {len(time_rows)} time-claim rows have no data."
    else:
        text += " It was taken on a quiet machine."
    return text


def speed_text(crossover: list[dict], where: str) -> str:
    """Markdown: seed 000's speed claim per Performer backend, from speed.crossover_rows, measured on `where`."""
    lines = [
        f"Seed 000's speed claim (Performers faster than softmax only from ~{CROSSOVER_TOKENS} tokens), "
        f"timed on {where}:"
    ]
    for row in crossover:
        start = row["measured from (tokens)"]
        since = f"faster from {start} tokens on" if start is not None else "never significantly faster"
        lines.append(
            f"- `{row['backend']}`: {since}; {row['effect']:.2f}× softmax's time at {CROSSOVER_TOKENS} tokens — "
            f"**{verdict_text(row)}**."
        )
    return "\n".join(lines)
