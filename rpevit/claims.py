"""The seeds' published claims and a study's pre-registered contrasts, each tested on our run records
with an interval and a verdict.

A claim is a contrast of variants on one dataset by one measure, computed per training seed — the
seed is the unit of replication (rpevit.stats.contrast_test):
- "top1" — test top-1 in points: a − b, or a difference of differences (a − b) − (c − d), optionally
  at another input resolution without fine-tuning (evaluate step; mode extrapolate or interpolate);
  the image-level standard error (test-set sampling alone) is shown beside the seed-level one;
- "ms_per_image_batched" — inference time per image: 100·(a/b − 1) in % per seed; timings taken on a
  busy machine make the row undecided.
Kinds: greater, less, equal (equivalence within a margin, TOST), at_least (non-inferiority). Margins
are fixed before any result: here for the published claims (±1 point of top-1, ±20 % of inference
time), in the preset's `design:` block for a study's own contrasts. One symmetric rule decides every
row: Holm's correction over all one-sided p-values of the table (stats.family_verdicts). A claim whose
source regime cannot be reproduced on this machine is "not testable here", with the reason.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from . import stats
from .metrics import busy

MARGIN_POINTS = 1.0
MARGIN_TIME_PCT = 20.0
ALPHA = 0.05
NOT_TESTABLE = "not testable here"


@dataclass(frozen=True)
class Claim:
    """One claim as a contrast of variants: a − b, or (a − b) − (c − d) when c and d are given."""

    source: str
    statement: str
    kind: str  # stats.CLAIM_KINDS
    a: str
    b: str
    measure: str = "top1"  # or "ms_per_image_batched"
    resolution: int | None = None  # test resolution (px) for a multi-resolution claim
    mode: str = "extrapolate"
    c: str | None = None
    d: str | None = None
    untestable: str = ""  # why the source's regime cannot be reproduced here ("" = testable)
    margin_value: float | None = None  # the margin, where it is not the default for the measure

    @property
    def margin(self) -> float | None:
        if self.kind not in ("equal", "at_least"):
            return None
        if self.margin_value is not None:
            return self.margin_value
        return MARGIN_POINTS if self.measure == "top1" else MARGIN_TIME_PCT

    @property
    def terms(self) -> dict[str, float]:
        """Variant → coefficient of the contrast."""
        terms: dict[str, float] = {}
        for variant, sign in ((self.a, 1.0), (self.b, -1.0), (self.c, -1.0), (self.d, 1.0)):
            if variant is not None:
                terms[variant] = terms.get(variant, 0.0) + sign
        return terms

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(v for v in (self.a, self.b, self.c, self.d) if v is not None)

    @property
    def comparison(self) -> str:
        """The contrast in words for tables: 'a vs b' or '(a − b) − (c − d)', with the resolution."""
        text = f"{self.a} vs {self.b}" if self.c is None else f"({self.a} − {self.b}) − ({self.c} − {self.d})"
        return text + (f" @ {self.resolution}px {self.mode}" if self.resolution else "")


S000, S001, S002 = "seed 000, Table 3", "seed 001, Tables 1–2", "seed 002, §Goal"
S003 = "seeds 003/004 (RoPE-ViT §4.1; 2D ALiBi)"
# seed 000 trained a ReLU-feature Performer on CIFAR-100 for 400 epochs and notes that RoPE improves
# fastest early: a few dozen Fashion-MNIST epochs cannot stand in for that regime
S000_REGIME = "seed 000's regime (CIFAR-100, 400 epochs) cannot be reproduced on this CPU"
# seed 001's names, as params/published_results.csv maps them: RoPE = fixed 2D RoPE (rope_axial),
# STRING = STRINGGate2D (gate_string), RPE = IRPE-Gate (gate_irpe); APE and CLS in every variant
CLAIMS = [
    Claim(S001, "plain FAVOR+ is below softmax", "less", "favor+ape", "softmax+ape"),
    Claim(S001, "adding RoPE to FAVOR+ narrows the gap to softmax", "greater", "favor+rope_axial+ape", "favor+ape"),
    Claim(S001, "adding STRING to FAVOR+ narrows the gap to softmax", "greater", "favor+gate_string+ape", "favor+ape"),
    Claim(S001, "adding RPE to FAVOR+ narrows the gap to softmax", "greater", "favor+gate_irpe+ape", "favor+ape"),
    Claim(S001, "plain Performer-ReLU matches softmax", "equal", "relu+ape", "softmax+ape"),
    Claim(S001, "ReLU + RoPE is at or above softmax", "at_least", "relu+rope_axial+ape", "softmax+ape"),
    Claim(
        S001,
        "inference time is about equal across variants (49–65 tokens): FAVOR+",
        "equal",
        "favor+ape",
        "softmax+ape",
        measure="ms_per_image_batched",
    ),
    Claim(
        S001,
        "inference time is about equal across variants (49–65 tokens): ReLU",
        "equal",
        "relu+ape",
        "softmax+ape",
        measure="ms_per_image_batched",
    ),
    *(
        Claim(S002, f"{method} closes the {backend}–softmax gap", "equal", f"{backend}+{method}", f"softmax+{method}")
        for method in ("krpe", "string_circulant", "rope_mixed")
        for backend in ("favor", "relu")
    ),
    Claim(S000, "APE beats RoPE-Axial on small images (ViT)", "greater", "softmax+ape", "softmax+rope_axial"),
    Claim(S000, "APE beats RoPE-Mixed on small images (ViT)", "greater", "softmax+ape", "softmax+rope_mixed"),
    Claim(S000, "APE beats RoPE-Axial on small images (Performer)", "greater", "relu+ape", "relu+rope_axial"),
    Claim(S000, "APE beats RoPE-Mixed on small images (Performer)", "greater", "relu+ape", "relu+rope_mixed"),
    Claim(S000, "RoPE + APE falls between them: below APE", "less", "softmax+rope_mixed+ape", "softmax+ape"),
    Claim(S000, "RoPE + APE falls between them: above RoPE", "greater", "softmax+rope_mixed+ape", "softmax+rope_mixed"),
    *(
        Claim(
            S003,
            f"at {size} px: RoPE-Mixed ≥ RoPE-Axial",
            "at_least",
            "softmax+rope_mixed",
            "softmax+rope_axial",
            resolution=size,
        )
        for size in (36, 44)
    ),
    *(
        Claim(S003, f"at {size} px: RoPE-Axial ≥ APE", "at_least", "softmax+rope_axial", "softmax+ape", resolution=size)
        for size in (36, 44)
    ),
    *(
        Claim(
            S003,
            f"at {size} px: 2D ALiBi extrapolates best (vs RoPE-Mixed)",
            "greater",
            "softmax+alibi2d",
            "softmax+rope_mixed",
            resolution=size,
        )
        for size in (36, 44)
    ),
]
CLAIMS = [dataclasses.replace(claim, untestable=S000_REGIME) if claim.source == S000 else claim for claim in CLAIMS]


def design_source(params) -> str:
    return f"pre-registered ({params.name})"


def design_claims(params) -> list[Claim]:
    """A preset's pre-registered contrasts (its `design:` block) as claims, with the design's margin."""
    claims = []
    for contrast in params.design.contrasts:
        plus = [v for v, c in contrast.terms.items() if c > 0]
        minus = [v for v, c in contrast.terms.items() if c < 0]
        if sorted(abs(c) for c in contrast.terms.values()) != [1.0] * len(contrast.terms) or len(plus) not in (1, 2):
            raise ValueError(f"contrast {contrast.name}: only a − b and (a − b) − (c − d) are supported")
        a, b = plus[0], minus[0]
        c, d = (minus[1], plus[1]) if len(plus) == 2 else (None, None)
        claims.append(
            Claim(
                design_source(params),
                contrast.name,
                contrast.kind,
                a,
                b,
                c=c,
                d=d,
                margin_value=params.design.margin_points if contrast.kind in ("equal", "at_least") else None,
            )
        )
    return claims


def claims_for(params) -> list[Claim]:
    """The claims a preset's report tests: its pre-registered contrasts first, then the published ones."""
    return [*design_claims(params), *CLAIMS]


def correctness(record: dict, resolution: int | None = None, mode: str = "extrapolate") -> np.ndarray | None:
    """Per-image test correctness (bool) of a run, at its trained resolution or an evaluated one."""
    text = record.get("test_correct")
    if resolution is not None:
        rows = [
            r
            for r in record.get("resolution_eval", [])
            if r["resolution"] == resolution and r["mode"] == mode and "correct" in r
        ]
        text = rows[0]["correct"] if rows else None
    return None if text is None else np.frombuffer(text.encode(), dtype=np.uint8) == ord("1")


def _by_seed(records: list[dict], dataset: str, variant: str) -> dict[int, dict]:
    return {
        r["seed"]: r
        for r in records
        if r["dataset"] == dataset and r["variant"] == variant and r.get("status") == "finished"
    }


def _accuracy_row(claim: Claim, runs: dict[str, dict[int, dict]], seeds: list[int]) -> dict:
    per_variant = {v: [correctness(runs[v][s], claim.resolution, claim.mode) for s in seeds] for v in claim.terms}
    if any(c is None for cs in per_variant.values() for c in cs):
        return {"note": "no per-image results at this resolution"}
    contrast = sum(coefficient * 100.0 * np.stack(per_variant[v]) for v, coefficient in claim.terms.items())
    tested = stats.contrast_test(contrast.mean(axis=1), claim.kind, claim.margin, ALPHA)
    return {
        "mean a": 100 * np.stack(per_variant[claim.a]).mean(),
        "mean b": 100 * np.stack(per_variant[claim.b]).mean(),
        **tested,
        "se (images)": stats.image_standard_error(contrast),
        "test": f"t over {len(seeds)} seeds; {100 * tested['confidence']:.0f}% interval",
    }


def _bench_time_row(claim: Claim, speed: list[dict]) -> dict | None:
    """A time claim read from a side-by-side speed benchmark (rpevit.bench.variant_speeds): per round,
    100·(a/b − 1) of inference ms/image, a Student-t over rounds. None if it lacks either variant."""
    times = {}
    for row in speed:
        times.setdefault(row["variant"], {})[int(row["round"])] = float(row[claim.measure])
    if claim.a not in times or claim.b not in times:
        return None
    rounds = sorted(times[claim.a].keys() & times[claim.b].keys())
    ta = np.array([times[claim.a][r] for r in rounds])
    tb = np.array([times[claim.b][r] for r in rounds])
    tested = stats.contrast_test(100 * (ta / tb - 1), claim.kind, claim.margin, ALPHA)
    busy_rounds = [r for r in speed if busy(r)]
    row = {
        "mean a": float(ta.mean()),
        "mean b": float(tb.mean()),
        **tested,
        "seeds": 0,
        "test": f"t over {len(rounds)} benchmark rounds; {100 * tested['confidence']:.0f}% interval",
        "note": "from the side-by-side speed benchmark",
    }
    if busy_rounds:
        row.update(p_support=math.nan, p_contradict=math.nan, note="busy machine: the speed benchmark")
    return row


def _time_row(claim: Claim, runs: dict[str, dict[int, dict]], seeds: list[int]) -> dict:
    a, b = runs[claim.a], runs[claim.b]
    ta = np.array([a[s][claim.measure] for s in seeds])
    tb = np.array([b[s][claim.measure] for s in seeds])
    tested = stats.contrast_test(100 * (ta / tb - 1), claim.kind, claim.margin, ALPHA)
    flagged = [s for s in seeds if busy(a[s]) or busy(b[s])]
    row = {
        "mean a": float(ta.mean()),
        "mean b": float(tb.mean()),
        **tested,
        "test": f"t over {len(seeds)} seeds; {100 * tested['confidence']:.0f}% interval",
    }
    if flagged:  # a timing taken beside other work measures the load: no verdict from it
        row.update(p_support=math.nan, p_contradict=math.nan, note=f"busy machine: timings of seeds {flagged}")
    return row


def evaluate_claims(records: list[dict], claims=CLAIMS, datasets=None, speed: list[dict] | None = None) -> list[dict]:
    """The claims table: one row per (claim, dataset) with the means of a and b, the per-seed effect
    with its interval and seed- and image-level standard errors, both one-sided p-values raw and
    Holm-adjusted over the whole table, and the verdict. Time claims read `speed` (the per-round rows
    of `python -m rpevit bench speed`) when given, else the runs' own timings."""
    datasets = datasets or sorted({r["dataset"] for r in records})
    rows = []
    for claim in claims:
        for dataset in datasets:
            runs = {v: _by_seed(records, dataset, v) for v in claim.terms}
            seeds = sorted(set.intersection(*(set(r) for r in runs.values())))
            row = {
                "source": claim.source,
                "claim": claim.statement,
                "dataset": dataset,
                "comparison": claim.comparison,
                "variants": claim.variants,
                "kind": claim.kind,
                "margin": claim.margin,
                "seeds": len(seeds),
                "unit": "points" if claim.measure == "top1" else "% time",
            }
            bench_row = _bench_time_row(claim, speed) if speed and claim.measure != "top1" else None
            if claim.untestable:
                row.update(note=claim.untestable, verdict=NOT_TESTABLE)
            elif bench_row is not None:
                row.update(bench_row)
            elif seeds:
                row.update((_accuracy_row if claim.measure == "top1" else _time_row)(claim, runs, seeds))
                if len(seeds) < 2:
                    row["note"] = (row.get("note", "") + "; " if row.get("note") else "") + "one seed: no verdict"
            else:
                row["note"] = "not run yet"
            rows.append(row)
    testable = [row for row in rows if math.isfinite(row.get("p_support", math.nan))]
    for row, decided in zip(testable, stats.family_verdicts(testable, ALPHA)):
        row.update(decided)
    for row in rows:
        row.setdefault("p_support_holm", math.nan)
        row.setdefault("p_contradict_holm", math.nan)
        if "verdict" not in row:
            row["verdict"] = _undecided(row)
    return rows


def read_speed(params, reports_root=None) -> list[dict] | None:
    """The per-round rows of the preset's speed benchmark (reports/bench/cpu_speed_<preset>.csv), if kept."""
    import csv
    from pathlib import Path

    from .report import reports_root as default_root

    path = Path(reports_root or default_root()) / "bench" / f"cpu_speed_{params.name}.csv"
    if not path.is_file():
        return None
    with path.open() as handle:
        return [{k: (v if k == "variant" else float(v)) for k, v in row.items()} for row in csv.DictReader(handle)]


def _undecided(row: dict) -> str:
    """The verdict of a row the family did not decide: why it has none."""
    note = row.get("note") or ""
    if "busy machine" in note:
        return stats.INCONCLUSIVE + " (busy machine)"
    if "effect" not in row:
        return stats.INCONCLUSIVE + " (no data)"
    return stats.INCONCLUSIVE + " (one seed)"


# --------------------------------------------------------------------------- seed 000's speed crossover
# "Performers are faster than softmax only from ~256 tokens" (seed 000 §5.3.3, patch sweep on 32×32
# images) is a claim about a timing sweep, not about trained runs: it is tested on inference timings
# measured when the notebook executes (rpevit.bench.patch_sweep, its `inference_batch_seconds`).

CROSSOVER_TOKENS = 256
S000_SPEED = "seed 000, §5.3.3"


def speedups(sweep: list[dict], baseline: str = "softmax", confidence: float = 1 - ALPHA) -> list[dict]:
    """Per Performer backend and token count: how many times faster than `baseline` its inference is
    (time ratio baseline / Performer, stats.time_ratio on the timed batches), with the interval, the
    Holm-adjusted p over the sweep and the reading: faster, slower or undecided."""
    times = {(r["backend"], r["tokens"]): r["inference_batch_seconds"] for r in sweep}
    rows = []
    for (backend, tokens), performer in times.items():
        if backend == baseline or (baseline, tokens) not in times:
            continue
        ratio = stats.time_ratio(times[(baseline, tokens)], performer, confidence)
        rows.append(
            {
                "backend": backend,
                "tokens": tokens,
                "speedup ×": ratio["ratio"],
                "low": ratio["low"],
                "high": ratio["high"],
                "p": ratio["p"],
                "timed batches": min(ratio["n_a"], ratio["n_b"]),
            }
        )
    for row, adjusted in zip(rows, stats.holm([r["p"] for r in rows])):
        significant = adjusted < ALPHA
        row["p (Holm)"] = adjusted
        row["reading"] = "faster" if significant and row["speedup ×"] > 1 else "slower" if significant else "undecided"
    return rows


def crossover_rows(speedup_rows: list[dict], tokens: int = CROSSOVER_TOKENS, busy_machine: bool = False) -> list[dict]:
    """Seed 000's claim per Performer backend: supported when the Performer is faster at every measured
    size ≥ `tokens` and at none below; contradicted when it is already faster below `tokens` or still
    slower at or above it; inconclusive otherwise. `measured from` is the smallest size from which it is
    faster at every larger size. A sweep timed on a busy machine gives no verdict (its timings measure
    the load as much as the backends)."""
    rows = []
    for backend in dict.fromkeys(r["backend"] for r in speedup_rows):
        mine = sorted((r for r in speedup_rows if r["backend"] == backend), key=lambda r: r["tokens"])
        below = [r for r in mine if r["tokens"] < tokens]
        above = [r for r in mine if r["tokens"] >= tokens]
        early = [r["tokens"] for r in below if r["reading"] == "faster"]
        late = [r["tokens"] for r in above if r["reading"] == "slower"]
        if not below or not above:
            verdict = stats.INCONCLUSIVE + f" (no measured size {'below' if not below else 'from'} {tokens})"
        elif early:
            verdict = stats.CONTRADICTED + f" (faster already at {', '.join(map(str, early))} tokens)"
        elif late:
            verdict = stats.CONTRADICTED + f" (still slower at {', '.join(map(str, late))} tokens)"
        elif all(r["reading"] == "faster" for r in above):
            verdict = stats.SUPPORTED
        else:
            verdict = stats.INCONCLUSIVE
        if busy_machine:
            verdict = stats.INCONCLUSIVE + " (busy machine)"
        measured = None
        for r in reversed(mine):
            if r["reading"] != "faster":
                break
            measured = r["tokens"]
        at = [r for r in mine if r["tokens"] == tokens]
        rows.append(
            {
                "source": S000_SPEED,
                "backend": backend,
                "claim": f"Performers are faster than softmax only from ~{tokens} tokens ({backend})",
                "dataset": "timing sweep",
                "comparison": f"softmax+ape / {backend}+ape inference, {mine[0]['tokens']}…{mine[-1]['tokens']} tokens",
                "measured from (tokens)": measured if measured is not None else "never in the sweep",
                "effect": at[0]["speedup ×"] if at else math.nan,
                "unit": f"speedup × at {tokens} tokens",
                "verdict": verdict,
            }
        )
    return rows


def speed_text(crossover: list[dict], where: str) -> str:
    """Markdown: seed 000's speed claim per Performer backend, from `crossover_rows`, measured on `where`."""
    lines = [
        f"Seed 000's speed claim (Performers faster than softmax only from ~{CROSSOVER_TOKENS} tokens), "
        f"timed on {where}:"
    ]
    for row in crossover:
        backend, start = row["backend"], row["measured from (tokens)"]
        since = f"faster from {start} tokens on" if isinstance(start, int) else "never significantly faster"
        lines.append(
            f"- `{backend}`: {since}; {row['effect']:.2f}× softmax's speed at {CROSSOVER_TOKENS} tokens — "
            f"**{row['verdict']}**."
        )
    return "\n".join(lines)


def speedup_figure(speedup_rows: list[dict], tokens: int = CROSSOVER_TOKENS, title: str = ""):
    """Speedup of each Performer over softmax vs tokens (log-log) with its interval, 1× and the claimed
    crossover marked. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    from .report import plain_log_ticks, variant_style

    fig, axis = plt.subplots(figsize=(7.5, 4.5), layout="constrained")
    for index, backend in enumerate(dict.fromkeys(r["backend"] for r in speedup_rows)):
        mine = sorted((r for r in speedup_rows if r["backend"] == backend), key=lambda r: r["tokens"])
        y = np.array([r["speedup ×"] for r in mine])
        errors = [y - [r["low"] for r in mine], [r["high"] for r in mine] - y]
        axis.errorbar(
            [r["tokens"] for r in mine],
            y,
            yerr=errors,
            capsize=3,
            label=backend,
            color=f"C{index}",  # the colour of notebook 60's patch sweep
            marker=variant_style(f"{backend}+ape")["marker"],
        )
    axis.axhline(1.0, color="black", lw=0.8)
    axis.axvline(tokens, color="grey", lw=0.8, ls="--", label=f"claimed crossover ({tokens} tokens)")
    axis.set_xscale("log")
    axis.set_yscale("log")
    ticks = sorted({r["tokens"] for r in speedup_rows})
    axis.set_xticks(ticks, [str(t) for t in ticks], minor=False)
    axis.set_xticks([], minor=True)
    plain_log_ticks(axis)
    axis.set_xlabel("tokens (patch 8 → 1 on 32×32 images)")
    axis.set_ylabel("softmax time / Performer time (>1: Performer faster)")
    axis.set_title(title or f"Inference speedup over softmax, {100 * (1 - ALPHA):.0f}% intervals")
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    return fig


# --------------------------------------------------------------------------- the claims notebook (45_claims)
# Tables, the forest plot and the generated text of notebooks/45_claims.ipynb, all from run records.

NO_DATA = "no data"
NOT_PLANNED = "not in this preset's grid"
VERDICT_STYLES = {  # verdict → (colour, marker) in the forest plot
    stats.SUPPORTED: ("tab:green", "o"),
    stats.CONTRADICTED: ("tab:red", "X"),
    stats.INCONCLUSIVE: ("tab:orange", "s"),
}


def _finished(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("status") == "finished"]


def source_tag(source: str) -> str:
    """The short name of a claim's source: 'seed 001, Tables 1–2' → 'seed 001'."""
    return source.split(",")[0].split(" (")[0].strip()


def verdict_key(row: dict) -> str:
    """supported | contradicted | inconclusive | not testable here for a row, 'no data' without an effect."""
    if row.get("verdict") == NOT_TESTABLE:
        return NOT_TESTABLE
    if "effect" not in row or not math.isfinite(row["effect"]):
        return NO_DATA
    return row["verdict"].split(" (")[0]


def train_images(record: dict) -> int:
    """Training images per epoch of a finished run, recovered from its record (the training rate is
    images × epochs / seconds and the seconds per epoch their mean)."""
    return round(record["train_images_per_second"] * record["train_seconds_per_epoch"])


def protocol_rows(params, records: list[dict]) -> list[dict]:
    """Per dataset of a preset: training and test images (from the finished runs' records), epochs,
    seeds, variants, how many of the planned runs have finished and their summed training time (wall
    seconds per epoch × epochs, on the devices that trained them)."""
    planned = len(params.variants) * len(params.seeds)
    rows = []
    for dataset in params.datasets:
        done = [r for r in _finished(records) if r["dataset"] == dataset]
        cap = "" if params.data.train_size is None else f"; cap {params.data.train_size}"
        trained = sorted({train_images(r) for r in done if r.get("train_images_per_second")})
        tested = sorted({r["n_test"] for r in done if r.get("n_test")})
        rows.append(
            {
                "dataset": dataset,
                "training images": ", ".join(map(str, trained)) or f"— (no finished run{cap})",
                "test images": ", ".join(map(str, tested)) or "—",
                "epochs": params.train.epochs,
                "batch size": params.train.batch_size,
                "seeds": ", ".join(map(str, params.seeds)),
                "variants": len(params.variants),
                "runs finished": f"{len(done)} of {planned}",
                "training hours (sum over runs)": sum(
                    r["train_seconds_per_epoch"] * r["epochs"] for r in done if r.get("train_seconds_per_epoch")
                )
                / 3600,
            }
        )
    return rows


def _points(value: float) -> str:
    return f"{value:g} point{'' if value == 1 else 's'}"


def protocol_text(params, claims=None) -> str:
    """The protocol in Markdown: preset, model, budget, margins, intervals and the correction."""
    claims = claims_for(params) if claims is None else claims
    model = params.model
    kinds = sorted({c.kind for c in claims})
    return "\n".join(
        [
            f"**Preset `{params.name}`** — {params.description or 'no description'}.",
            "",
            f"- Datasets: {', '.join(params.datasets)}; seeds {', '.join(map(str, params.seeds))} "
            f"({len(params.seeds)} training run{'s' if len(params.seeds) != 1 else ''} per variant and dataset); "
            f"{len(params.variants)} variants.",
            f"- Budget: {params.train.epochs} epochs of batch {params.train.batch_size}, training images "
            f"{'all' if params.data.train_size is None else f'capped at {params.data.train_size}'} "
            f"(table 45_protocol gives the count each run used); device `{params.train.device}`.",
            f"- Model: patch {model.patch_size}, dim {model.dim}, depth {model.depth}, heads {model.heads}, "
            f"MLP {model.mlp_dim}, pool `{model.pool}`.",
            f"- {len(claims)} claims ({', '.join(f'{sum(c.kind == k for c in claims)} {k}' for k in kinds)}), each "
            f"tested on every dataset. Margins fixed before any result: ±{_points(MARGIN_POINTS)} of top-1 and "
            f"±{MARGIN_TIME_PCT:g} % of inference time for `equal` (equivalence, TOST) and `at_least` "
            "(non-inferiority) claims.",
            f"- Intervals: {100 * (1 - ALPHA):.0f}% for `greater`/`less`, {100 * (1 - 2 * ALPHA):.0f}% for `equal`/"
            f"`at_least` (each bound a one-sided test at α = {ALPHA:g}), Student-t over per-seed contrasts (the seed "
            "is the unit of replication; time: 100·(a/b − 1) per seed). One Holm correction over every one-sided "
            f"p-value of the table (for and against each claim), verdicts at α = {ALPHA:g}.",
        ]
    )


def seed_table(records: list[dict], confidence: float = 0.95) -> list[dict]:
    """Per (dataset, variant): mean test top-1 (%) over seeds with its Student-t interval."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in _finished(records):
        groups.setdefault((r["dataset"], r["variant"]), []).append(100 * r["top1"])
    rows = []
    for row in stats.mean_ci_table(groups, confidence):
        dataset, variant = row["group"]
        rows.append(
            {
                "dataset": dataset,
                "variant": variant,
                "seeds": row["n"],
                "top-1 %": row["mean"],
                f"{100 * confidence:.0f}% t low": row["low"],
                f"{100 * confidence:.0f}% t high": row["high"],
                "std": row["std"],
            }
        )
    return rows


def run_table(records: list[dict], n_resamples: int = 2000, confidence: float = 0.95) -> list[dict]:
    """Per finished run: test top-1 (%) with its test-set bootstrap interval (stats.bootstrap_accuracy)."""
    rows = []
    for r in _finished(records):
        correct = correctness(r)
        row = {"dataset": r["dataset"], "variant": r["variant"], "seed": r["seed"], "top-1 %": 100 * r["top1"]}
        if correct is None:
            rows.append(
                {
                    **row,
                    "low": math.nan,
                    "high": math.nan,
                    "test images": r.get("n_test"),
                    "note": "no per-image results in the record",
                }
            )
            continue
        interval = stats.bootstrap_accuracy(correct, confidence, n_resamples, seed=r["seed"])
        rows.append(
            {
                **row,
                f"{100 * confidence:.0f}% bootstrap low": 100 * interval["low"],
                f"{100 * confidence:.0f}% bootstrap high": 100 * interval["high"],
                "test images": correct.size,
            }
        )
    return rows


def mark_unplanned(rows: list[dict], variants) -> list[dict]:
    """The claims rows with the note of rows without data saying whether the preset plans them at all."""
    from .variants import parse_variant

    planned = {parse_variant(v).name for v in variants}
    marked = []
    for row in rows:
        if not row["seeds"] and row["verdict"] != NOT_TESTABLE and not set(row["variants"]) <= planned:
            row = {**row, "note": NOT_PLANNED}
        marked.append(row)
    return marked


def claims_table(rows: list[dict]) -> list[dict]:
    """The claims rows with readable columns, in the order of the report."""
    columns = [
        ("source", "source"),
        ("claim", "claim"),
        ("dataset", "dataset"),
        ("comparison", "contrast (a vs b: a − b)"),
        ("kind", "kind"),
        ("margin", "margin"),
        ("unit", "effect unit"),
        ("seeds", "seeds"),
        ("mean a", "mean a"),
        ("mean b", "mean b"),
        ("effect", "effect"),
        ("low", "low"),
        ("high", "high"),
        ("se", "se (seeds)"),
        ("se (images)", "se (images)"),
        ("test", "test"),
        ("p_support", "p for"),
        ("p_contradict", "p against"),
        ("p_support_holm", "p for (Holm)"),
        ("p_contradict_holm", "p against (Holm)"),
        ("verdict", "verdict"),
        ("note", "note"),
    ]
    numeric = {"mean a", "mean b", "effect", "low", "high", "se", "se (images)", "p_support", "p_contradict"}
    return [{label: row.get(key, math.nan if key in numeric else "") for key, label in columns} for row in rows]


def verdict_counts(rows: list[dict]) -> list[dict]:
    """Per source (and over all): how many rows are supported, contradicted, inconclusive, without data."""
    keys = [stats.SUPPORTED, stats.CONTRADICTED, stats.INCONCLUSIVE, NOT_TESTABLE, NO_DATA]
    table = []
    for source in [*dict.fromkeys(r["source"] for r in rows), "all"]:
        mine = [r for r in rows if source in ("all", r["source"])]
        table.append({"source": source, **{k: sum(verdict_key(r) == k for r in mine) for k in keys}, "rows": len(mine)})
    return table


def missing_runs(records: list[dict], expected) -> list[dict]:
    """Per (dataset, variant) of the grid `expected` ((dataset, variant, seed) triples, e.g.
    study.grid(params)): the seeds without a finished run."""
    done = {(r["dataset"], r["variant"], r["seed"]) for r in _finished(records)}
    missing: dict[tuple[str, str], list[int]] = {}
    for dataset, variant, seed in expected:
        if (dataset, variant, seed) not in done:
            missing.setdefault((dataset, variant), []).append(seed)
    return [
        {"dataset": d, "variant": v, "missing seeds": ", ".join(map(str, seeds))} for (d, v), seeds in missing.items()
    ]


def _signed(value: float) -> str:
    return f"{value:+.2f}".replace("-", "−")


def _finding(row: dict) -> str:
    interval = (
        "" if not math.isfinite(row.get("low", math.nan)) else f" [{_signed(row['low'])}, {_signed(row['high'])}]"
    )
    seeds = f"{row['seeds']} seed{'s' if row['seeds'] != 1 else ''}"
    return f"`{row['comparison']}` on {row['dataset']}: {_signed(row['effect'])}{interval} ({seeds}; {_in_words(row)})"


def _in_words(row: dict) -> str:
    """The direction of a row's effect in words, from its interval: who is ahead, or that it is unclear."""
    a, b = row["variants"][:2]
    unit = "points" if row["unit"] == "points" else "% time"
    if len(row["variants"]) == 4:
        subject = f"the {a.split('+')[0]}−{b.split('+')[0]} difference with {'+'.join(a.split('+')[1:])}"
        other = f"with {'+'.join(row['variants'][2].split('+')[1:])}"
        low, high = row.get("low", math.nan), row.get("high", math.nan)
        if math.isfinite(low) and low > 0:
            return f"{subject} is higher than {other} by {row['effect']:.2f} {unit}"
        if math.isfinite(high) and high < 0:
            return f"{subject} is lower than {other} by {-row['effect']:.2f} {unit}"
        return f"no clear difference between {subject} and {other}"
    low, high = row.get("low", math.nan), row.get("high", math.nan)
    if math.isfinite(low) and low > 0:
        return f"`{a}` ahead by {row['effect']:.2f} {unit}" if unit == "points" else f"`{a}` slower"
    if math.isfinite(high) and high < 0:
        return f"`{b}` ahead by {-row['effect']:.2f} {unit}" if unit == "points" else f"`{a}` faster"
    return "direction unclear: the interval spans 0"


def answer_text(rows: list[dict], missing: list[dict], planned_runs: int) -> str:
    """The study's answer in Markdown, generated from the claims rows: verdicts per source, the research
    question (seed 002: does each RPE close the Performer–softmax gap?) and what is still missing."""
    lines = []
    for count in verdict_counts(rows):
        if count["source"] == "all":
            continue
        lines.append(
            f"- **{count['source']}**: {count[stats.SUPPORTED]} supported, {count[stats.CONTRADICTED]} "
            f"contradicted, {count[stats.INCONCLUSIVE]} inconclusive, {count[NOT_TESTABLE]} not testable here, "
            f"{count[NO_DATA]} without data (of {count['rows']} rows)."
        )
    question = [r for r in rows if r["source"] == S002]
    by_verdict = {
        k: [r for r in question if verdict_key(r) == k]
        for k in (stats.SUPPORTED, stats.CONTRADICTED, stats.INCONCLUSIVE, NO_DATA)
    }
    tested = len(question) - len(by_verdict[NO_DATA])
    if not question:
        short = "not asked by this table"
    elif not tested:
        short = "not answered yet"
    else:
        closed, open_ = len(by_verdict[stats.SUPPORTED]), len(by_verdict[stats.CONTRADICTED])
        undecided = len(question) - closed - open_
        rest = f"; undecided for the other {undecided}" if undecided else ""
        if closed and open_:
            short = f"partly: yes for {closed} of the {len(question)} rows, no for {open_}{rest}"
        elif closed:
            short = (
                f"yes for {closed} of the {len(question)} rows{rest}"
                if undecided
                else "yes, for every method and backend tested"
            )
        elif open_:
            short = (
                f"no for {open_} of the {len(question)} rows{rest}"
                if undecided
                else "no, for every method and backend tested"
            )
        else:
            short = "undecided by the data so far"
    margin = f"±{_points(MARGIN_POINTS)}"
    lines += [
        "",
        f"**Do relative positional encodings close the Performer–softmax gap here? — {short}.** "
        f"Seed 002's claim, per method and Performer backend, is that `backend+method` matches "
        f"`softmax+method` within {margin} of top-1 ({len(question)} rows, {tested} with data; effects "
        f"a − b in points with their {100 * (1 - 2 * ALPHA):.0f}% interval):",
    ]
    phrases = {
        stats.SUPPORTED: f"gap closed (interval inside {margin})",
        stats.CONTRADICTED: f"a gap beyond {margin} remains (interval outside, Holm-significant)",
        stats.INCONCLUSIVE: f"inconclusive (interval not inside {margin}, nor Holm-significantly outside)",
    }
    if tested:
        per_backend: dict[str, list[str]] = {}
        for r in question:
            per_backend.setdefault(r["variants"][0].split("+")[0], []).append(verdict_key(r))
        keys = (stats.SUPPORTED, stats.CONTRADICTED, stats.INCONCLUSIVE, NO_DATA)
        lines.append(
            "- per Performer backend: "
            + "; ".join(
                f"`{backend}` " + ", ".join(f"{found.count(k)} {k}" for k in keys if found.count(k))
                for backend, found in per_backend.items()
            )
            + "."
        )
    for key, phrase in phrases.items():
        if by_verdict[key]:
            lines.append(f"- {phrase}: " + "; ".join(_finding(r) for r in by_verdict[key]) + ".")
    if by_verdict[NO_DATA] and not tested:
        notes = sorted({r.get("note") or NO_DATA for r in question})
        lines.append(f"- none of the {len(question)} rows has data yet ({', '.join(notes)}).")
    elif by_verdict[NO_DATA]:
        lines.append(
            "- no data: "
            + "; ".join(f"`{r['comparison']}` on {r['dataset']} ({r.get('note', '')})" for r in by_verdict[NO_DATA])
            + "."
        )
    baseline = [r for r in rows if r["claim"] == CLAIMS[0].statement and verdict_key(r) != NO_DATA]
    if baseline:
        lines += [
            "",
            f"For scale, the gap without relative encodings (a − b: positive means the Performer is ahead; "
            f"{100 * (1 - ALPHA):.0f}% interval): " + "; ".join(_finding(r) for r in baseline) + ".",
        ]
    few = sorted({r["seeds"] for r in rows if verdict_key(r) not in (NO_DATA, NOT_TESTABLE) and r["seeds"] < 2})
    if few:
        lines += [
            "",
            "Rows with a single seed carry test-set uncertainty only (no training randomness): read "
            "their verdicts as preliminary.",
        ]
    still = sum(len(m["missing seeds"].split(", ")) for m in missing)
    if still:
        per_dataset = {}
        for m in missing:
            per_dataset[m["dataset"]] = per_dataset.get(m["dataset"], 0) + len(m["missing seeds"].split(", "))
        unplanned = sorted({r["comparison"] for r in rows if r.get("note") == NOT_PLANNED})
        lines += [
            "",
            f"**Still missing:** {still} of {planned_runs} planned runs ("
            + ", ".join(f"{d}: {n}" for d, n in per_dataset.items())
            + "; the missing-runs table lists them). "
            "Rows without data and inconclusive rows may change when they finish.",
        ]
        if unplanned:
            lines[-1] += (
                f" {len(unplanned)} comparisons need variants this preset does not train (run the "
                "`cpu_claims` preset for them)."
            )
    else:
        lines += ["", f"All {planned_runs} planned runs have finished."]
    return "\n".join(lines)


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


def busy_text(records: list[dict], rows: list[dict]) -> str:
    """Markdown on timings taken while the machine was busy (metrics.busy) and the time claims they affect."""
    done = _finished(records)
    flagged = [r for r in done if busy(r)]
    time_rows = [r for r in rows if r["unit"] != "points" and verdict_key(r) != NO_DATA]
    affected = [r for r in time_rows if "busy" in (r.get("note") or "")]
    if not done:
        return "No finished runs yet, so no timings to judge."
    if not flagged:
        text = (
            f"None of the {len(done)} finished runs was timed on a busy machine (1-minute load average above "
            "its cores, `rpevit.metrics.busy`)."
        )
    else:
        low, high = min(r["load_average"] for r in flagged), max(r["load_average"] for r in flagged)
        cores = ", ".join(map(str, sorted({r["cpu_count"] for r in flagged})))
        load = f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}–{high:.1f}"
        text = (
            f"{len(flagged)} of {len(done)} finished runs took their timings on a busy machine: a 1-minute "
            f"load average of {load} on {cores} core(s) (`rpevit.metrics.busy`). Other processes then share "
            "the cores, so their inference times and seconds per epoch measure the machine's load as much as "
            "the variant."
        )
    if affected:
        text += (
            f"\n\n{len(affected)} of the {len(time_rows)} time-claim rows use such timings; their verdicts are "
            "no evidence about speed until the runs are timed again on an idle machine "
            "(`python -m rpevit retime <preset>`):\n\n"
            + "\n".join(f"- {r['claim']} · {r['dataset']}: {r['note']}" for r in affected)
        )
    elif time_rows:
        text += f"\n\nNone of the {len(time_rows)} time-claim rows with data uses a flagged timing."
    elif any(r["unit"] != "points" for r in rows):
        text += "\n\nThe time claims have no data yet."
    return text


def forest_figure(rows: list[dict], title: str = ""):
    """A forest plot of the claims rows: per (claim, dataset) the effect and its interval, coloured and
    marked by verdict, with the margin band of equivalence (±margin) and non-inferiority (≥ −margin)
    claims and the zero line; accuracy rows (points) and time rows (%) in separate panels. Rows without
    data show their note. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    panels = [(unit, [r for r in rows if r["unit"] == unit]) for unit in ("points", "% time")]
    panels = [(unit, panel) for unit, panel in panels if panel]
    if not panels:
        panels = [("points", [])]
    heights = [len(panel) + 2 for _, panel in panels]
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(12, 0.25 * sum(heights) + 1.8),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
        layout="constrained",
    )
    band, region = "#cfe3f5", "#e8f2e1"
    for axis, (unit, panel) in zip(axes[:, 0], panels):
        values = [abs(r[k]) for r in panel for k in ("low", "high", "effect") if math.isfinite(r.get(k, math.nan))]
        values += [2 * r["margin"] for r in panel if r.get("margin")]
        limit = 1.12 * max(values, default=1.0)
        positions = list(range(len(panel)))[::-1]
        for y, row in zip(positions, panel):
            margin = row.get("margin")
            if row["kind"] == "equal" and margin:
                axis.fill_betweenx([y - 0.42, y + 0.42], -margin, margin, color=band, lw=0)
            elif row["kind"] == "at_least" and margin is not None:
                axis.fill_betweenx([y - 0.42, y + 0.42], -margin, limit, color=region, lw=0)
                axis.plot([-margin, -margin], [y - 0.42, y + 0.42], color="tab:green", lw=0.8)
            key = verdict_key(row)
            if key in (NO_DATA, NOT_TESTABLE):
                axis.text(
                    0,
                    y,
                    f"{NOT_TESTABLE}: {row.get('note')}" if key == NOT_TESTABLE else row.get("note") or row["verdict"],
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="0.4",
                    style="italic",
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
                )
                continue
            colour, marker = VERDICT_STYLES[key]
            if math.isfinite(row.get("low", math.nan)):
                axis.plot([row["low"], row["high"]], [y, y], color=colour, lw=2)
            else:
                axis.annotate(
                    "no interval (one seed)",
                    (row["effect"], y),
                    xytext=(8, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=7,
                    color="0.4",
                    style="italic",
                )
            axis.plot(
                row["effect"],
                y,
                marker=marker,
                color=colour,
                markersize=7,
                markeredgecolor="black",
                markeredgewidth=0.5,
            )
        for y, (above, below) in zip(positions[1:], zip(panel, panel[1:])):
            if above["source"] != below["source"]:
                axis.axhline(y + 0.5, color="0.6", lw=0.6)
        axis.axvline(0, color="black", lw=0.8)
        axis.set_xlim(-limit, limit)
        axis.set_ylim(-0.7, max(len(panel), 1) - 0.3)
        axis.set_yticks(
            positions, [f"{source_tag(r['source'])} · {r['claim']} · {r['dataset']}" for r in panel], fontsize=7
        )
        axis.tick_params(axis="x", labelsize=8)
        axis.grid(axis="x", alpha=0.3)
        axis.set_xlabel(
            "effect a − b (points of top-1)"
            if unit == "points"
            else "effect 100·(a/b − 1) (% of inference time per image; negative: a faster)",
            fontsize=8,
        )
        if not panel:
            axis.text(0, 0, "no claims", ha="center", va="center", fontsize=8, color="0.45")
    handles = [
        Line2D([], [], color=c, marker=m, lw=2, markeredgecolor="black", markeredgewidth=0.5, label=k)
        for k, (c, m) in VERDICT_STYLES.items()
    ]
    handles += [
        Patch(color=band, label="equivalence band (±margin): `equal` claims"),
        Patch(color=region, label="non-inferior region (≥ −margin): `at_least` claims"),
        Patch(facecolor="none", edgecolor="none", label="grey italics: no data or not testable here (why)"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=7, frameon=False)
    interval = f"{100 * (1 - ALPHA):.0f}% interval for greater/less, {100 * (1 - 2 * ALPHA):.0f}% for equal/at_least"
    fig.suptitle(f"{title}{' — ' if title else ''}claims: effect a − b with its interval ({interval})", fontsize=9)
    return fig
