"""The claims as tables for notebook 45 and the report: the short claims table and its details, the
verdict counts, the missing runs, seed 000's speed claim, and the seed-level descriptive tables (per
variant over seeds; per run with a bootstrap over test images). Effects keep the claims' sign
(analysis.claims.narration: a − b, Performer − softmax wherever a Performer meets softmax)."""

from __future__ import annotations

import math
from collections import Counter

from rpevit.core import stats
from rpevit.core.data import training_images
from rpevit.lab.result import results
from rpevit.lab.schema import finished

from .evaluation import correctness
from .narration import EFFECT_HEADER, SIGN, _unit, effect_words, verdict_text
from .speed import CROSSOVER_TOKENS


def claims_table(rows: list[dict]) -> list[dict]:
    """The short claims table of the report: claim, the bare verdict, its reading, effect in words; numbers
    in claims_details."""
    datasets = len({r["dataset"] for r in rows}) > 1
    return [
        {
            "claim": f"{r['source'].tag}: {r['claim']}" + (f" ({r['dataset']})" if datasets else ""),
            "verdict": r["verdict"],
            "reading": verdict_text(r),
            EFFECT_HEADER: effect_words(r) or "—",
        }
        for r in rows
    ]


def claims_details(rows: list[dict]) -> list[dict]:
    """Every number of the claims rows: comparison, means, effect a − b ({SIGN}), interval, standard
    errors, raw and Holm-adjusted one-sided p-values, seeds or benchmark rounds, verdict and reason."""
    numeric = ["mean a", "mean b", "effect", "low", "high", "se", "se (images)"]
    out = []
    for r in rows:
        out.append(
            {
                "source": str(r["source"]),
                "claim": r["claim"],
                "dataset": r["dataset"],
                f"comparison (effect a − b; {SIGN})": str(r["comparison"]),
                "kind": r["kind"],
                "margin": r["margin"],
                "unit": _unit(r["measure"]),
                "seeds": r["seeds"],
                "rounds": r.get("rounds", ""),
                **{k if k != "se" else "se (seeds)": r.get(k, math.nan) for k in numeric},
                "test": r.get("test", ""),
                "p for": r.get("p_support", math.nan),
                "p against": r.get("p_contradict", math.nan),
                "Holm family": r.get("family", ""),
                "p for (Holm)": r["p_support_holm"],
                "p against (Holm)": r["p_contradict_holm"],
                "verdict": r["verdict"],
                "verdict, one Holm over the whole table": r.get("verdict_whole_table", ""),
                "reason": r.get("reason", ""),
            }
        )
    return out


def missing_table(missing: list[dict]) -> list[dict]:
    """missing_runs for a report table: the seeds joined."""
    return [
        {"dataset": m["dataset"], "variant": m["variant"], "missing seeds": ", ".join(map(str, m["seeds"]))}
        for m in missing
    ]


def crossover_table(crossover: list[dict]) -> list[dict]:
    """crossover_rows for a report table."""
    return [
        {
            "claim": r["claim"],
            "sweep (tokens)": f"{r['tokens'][0]}…{r['tokens'][1]}",
            "faster from (tokens)": r["measured from (tokens)"] or "never in the sweep",
            f"time × softmax at {CROSSOVER_TOKENS} tokens (> 1: slower)": r["effect"],
            "verdict": verdict_text(r),
        }
        for r in crossover
    ]


def seed_table(records: list[dict], confidence: float = 0.95) -> list[dict]:
    """Per (dataset, variant): mean test top-1 (%) over seeds with its Student-t interval."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in finished(results(records)):
        groups.setdefault((r.dataset, r.variant), []).append(100 * r.top1)
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
    for r in finished(results(records)):
        correct = correctness(r)
        row = {"dataset": r.dataset, "variant": r.variant, "seed": r.seed, "top-1 %": 100 * r.top1}
        if correct is None:
            rows.append(
                {
                    **row,
                    "low": math.nan,
                    "high": math.nan,
                    "test images": r.n_test,
                    "note": "no per-image results in the record",
                }
            )
            continue
        interval = stats.bootstrap_accuracy(correct, confidence, n_resamples, seed=r.seed)
        rows.append(
            {
                **row,
                f"{100 * confidence:.0f}% bootstrap low": 100 * interval["low"],
                f"{100 * confidence:.0f}% bootstrap high": 100 * interval["high"],
                "test images": correct.size,
            }
        )
    return rows


# --------------------------------------------------------------------------- the answer


def protocol_rows(params, records: list[dict], planned: list[tuple] | None = None) -> list[dict]:
    """Per dataset of a preset: training images (from the preset's split, data.training_images), test
    images (from the finished runs' records), epochs, seeds, variants, how many of the planned runs
    (wanted.planned_runs: (dataset, variant, seed); default the whole grid) have finished, where and
    in which precision they trained, and their summed training time (wall seconds per epoch × epochs)."""
    rows = []
    for dataset in params.datasets:
        done = [r for r in finished(results(records)) if r.dataset == dataset]
        tested = sorted({r.n_test for r in done if r.n_test})
        wanted = len(params.variants) * len(params.seeds) if planned is None else sum(p[0] == dataset for p in planned)
        places = Counter(f"{r.device or '?'} {r.amp or '?'}" for r in done)
        rows.append(
            {
                "dataset": dataset,
                "training images": training_images(dataset, params.data.val_size, params.data.train_size),
                "test images": ", ".join(map(str, tested)) or "— (no finished run)",
                "epochs": params.train.epochs,
                "batch size": params.train.batch_size,
                "seeds": ", ".join(map(str, params.seeds)),
                "variants": len(params.variants),
                "runs finished": f"{len(done)} of {wanted}",
                "trained on": ", ".join(f"{place} ({n})" for place, n in sorted(places.items())) or "—",
                "training hours (sum over runs)": sum(
                    r.train_seconds_per_epoch * r.epochs for r in done if r.train_seconds_per_epoch
                )
                / 3600,
            }
        )
    return rows
