"""Has a study converged? Read as budget sensitivity: a design's longer-budget check
(design.plateau_check) trains the primary variants longer, and each contrast's change, paired by seed,
is tested against the spread of all the study's seeds (`change_test`: a twin trained longer behaves
like an independent run, so a change has variance 2σ²/n). The plateau rule of the converged study
(the best validation top-1 gaining less than `tolerance` points over the last `fraction` of the
epochs) is kept per run as a description only: under a cosine cool-down the last epochs gain by design."""

from __future__ import annotations

import math
import statistics

from scipy import stats as scipy_stats

from rpevit.core.data.info import DATASETS
from rpevit.lab.params import load_params
from rpevit.lab.result import Result, results
from rpevit.lab.schedule.policy import half_widths, per_seed_contrast
from rpevit.lab.schema import finished
from rpevit.lab.store.catalog import grid, run_history, study_records
from rpevit.lab.store.run import Run
from rpevit.lab.tables import signed

PLATEAU_FRACTION = 0.2
PLATEAU_TOLERANCE = 0.2  # points of validation top-1
# the rule in words, for every text that states it
PLATEAU_RULE = (
    f"best validation top-1 gaining < {PLATEAU_TOLERANCE:g} points over the last {PLATEAU_FRACTION:.0%} of epochs"
)


def plateau_gain(val_acc: list[float], fraction: float = PLATEAU_FRACTION) -> float:
    """Points the best validation top-1 gained over the last ⌈fraction · epochs⌉ epochs:
    100 · (best over all epochs − best before that window). nan with fewer than two epochs."""
    epochs = len(val_acc)
    if epochs < 2:
        return math.nan
    window = max(1, math.ceil(fraction * epochs))
    if window >= epochs:
        window = epochs - 1
    return 100 * (max(val_acc) - max(val_acc[:-window]))


def plateau_met(val_acc: list[float], tolerance: float = PLATEAU_TOLERANCE, fraction: float = PLATEAU_FRACTION) -> bool:
    """True when the best validation top-1 gained less than `tolerance` points over the last epochs."""
    gain = plateau_gain(val_acc, fraction)
    return math.isfinite(gain) and gain < tolerance


def collapsed(val_acc: list[float], chance: float) -> bool:
    """True when training collapsed: the last epoch's validation top-1 fell more than halfway from the
    run's best toward chance (1 / classes), e.g. from 84.5 % to below 47 % on 10 classes. Its loss
    stays finite, so it is no divergence (train.Diverged); its early best epoch would otherwise pass
    the plateau rule."""
    best = max(val_acc, default=math.nan)
    return best > chance and val_acc[-1] < (best + chance) / 2


def chance_level(dataset: str) -> float:
    """Top-1 of guessing: 1 / classes of a known dataset, else 0."""
    info = DATASETS.get(dataset)
    return 1 / info.num_classes if info else 0.0


def collapsed_runs(histories, dataset: str) -> set[tuple[str, int]]:
    """(variant, seed) of the (variant, seed, history rows) triples of `dataset` whose training collapsed."""
    chance = chance_level(dataset)
    return {(v, s) for v, s, rows in histories if rows and collapsed([float(r["val_acc"]) for r in rows], chance)}


def split_collapsed(params, records_: list[dict], reports_root=None) -> tuple[list[dict], list[dict]]:
    """(the records whose run did not collapse, those whose run did): one policy for every table, figure
    and family — a collapsed run (validation top-1 fell toward chance, `collapsed`) is reported apart,
    never analysed at its early best epoch as if it were healthy. Judged from each finished run's history."""
    found = results(records_)
    done = finished(found)
    fell = set()
    for dataset in dict.fromkeys(r.dataset for r in done):
        mine = [r for r in done if r.dataset == dataset]
        histories = [(r.variant, r.seed, run_history(Run.of(params, r, reports_root=reports_root))) for r in mine]
        fell |= {(dataset, variant, seed) for variant, seed in collapsed_runs(histories, dataset)}
    return [r for r in found if r.place not in fell], [r for r in found if r.place in fell]


CONVERGED_SHARE = 0.9  # a study is called converged when at least this share of its runs meet the plateau rule


def converged(rows: list[dict]) -> bool:
    """A study's runs (convergence_rows) count as converged when at least CONVERGED_SHARE of them meet
    the plateau rule; no runs: not converged."""
    return bool(rows) and sum(bool(r["plateau met"]) for r in rows) >= CONVERGED_SHARE * len(rows)


def convergence_rows(runs) -> list[dict]:
    """Per finished run, from (record, history rows) pairs: its best validation epoch, the points its
    best validation top-1 gained over the last `PLATEAU_FRACTION` of epochs, whether its training
    collapsed (`collapsed`: its last validation top-1) and whether it met the plateau rule (a collapsed
    run does not). Runs without a history are left out."""
    rows = []
    for record, history in runs:
        result = Result.of(record)
        if not result.finished or not history:
            continue
        val = [float(h["val_acc"]) for h in history]
        fell = collapsed(val, chance_level(result.dataset))
        rows.append(
            {
                "dataset": result.dataset,
                "variant": result.variant,
                "seed": result.seed,
                "epochs": len(val),
                "best epoch": 1 + val.index(max(val)),
                "val gain over last 20% (points)": plateau_gain(val),
                "last val top-1 %": 100 * val[-1],
                "collapsed": fell,
                "plateau met": plateau_met(val) and not fell,
            }
        )
    return rows


def finished_convergence(params, found: list[dict], reports_root=None) -> list[dict]:
    """convergence_rows of a preset's finished runs among `found` (its records), each read with the
    history beside its current record."""
    done = finished(results(found))
    return convergence_rows((r, run_history(Run.of(params, r, reports_root=reports_root))) for r in done)


def convergence_text(rows: list[dict], checked: bool = False) -> str:
    """Markdown: how many runs met the plateau rule, how much they still gained, and what that means
    for reading the comparisons (all computed from `convergence_rows`); `checked`: the preset's design
    names a longer-budget check (design.plateau_check), reported below the text."""
    if not rows:
        return "No finished run with a training history yet: convergence cannot be judged."
    fell = [r for r in rows if r["collapsed"]]
    # a collapsed run's early best leaves no gain to measure: the gains are the other runs'
    gains = sorted(r["val gain over last 20% (points)"] for r in rows if not r["collapsed"] or len(fell) == len(rows))
    met = sum(r["plateau met"] for r in rows)
    last = sum(r["best epoch"] == r["epochs"] for r in rows)
    epochs = sorted({r["epochs"] for r in rows})
    budget = f"{epochs[0]}" if len(epochs) == 1 else f"{epochs[0]}–{epochs[-1]}"
    whose = "of the runs that did not collapse " if 0 < len(fell) < len(rows) else ""
    text = (
        f"**Convergence.** The plateau rule ({PLATEAU_RULE}) was met by **{met} of {len(rows)} finished runs**; over "
        f"those epochs the best validation top-1 {whose}"
        f"still gained a median of {statistics.median(gains):.2f} points (range "
        f"{gains[0]:.2f} to {gains[-1]:.2f}), and {last} of {len(rows)} runs had their best validation epoch at "
        f"the last one ({budget} epochs). "
    )
    if fell:
        text += (
            f"**{len(fell)} of {len(rows)} runs collapsed** (their last validation top-1 fell more than halfway "
            "from their best toward chance: "
            + "; ".join(
                f"{r['variant']} seed {r['seed']}, best at epoch {r['best epoch']}, {r['last val top-1 %']:.1f} % "
                "at the last"
                for r in fell
            )
            + "): they count as not at a plateau, and like every run they are analysed at their best-validation "
            "epoch, so a contrast with their variant measures how it trains with this recipe, not what it can reach. "
        )
    if converged(rows):
        return (
            text + f"At least {CONVERGED_SHARE:.0%} of the runs are at a plateau: the comparisons are near convergence."
        )
    return text + (
        f"Fewer than {CONVERGED_SHARE:.0%} of the runs are at a plateau, so the study is **not converged** by its own "
        f"rule: every comparison below holds at this fixed {budget}-epoch budget, and longer training would still "
        "raise the accuracies; whether it would change the gaps between variants is not measured by these runs "
        + (
            "(the design's longer-budget check measures it: below)."
            if checked
            else "(a longer-budget check would measure it; this preset names none: `design.plateau_check`)."
        )
    )


CHANGE_ALPHA = 0.05  # two-sided, per contrast of the longer-budget check


def change_test(changes: list[float], spread: list[float], confidence: float = 1 - CHANGE_ALPHA) -> dict:
    """Did a contrast move with the longer budget? `changes`: per paired seed, long − short; `spread`: the
    contrast's per-seed values at the short budget over all the study's seeds. A twin trained longer
    behaves like an independent run (the fmnist_converged check: per-image agreement of same-seed twins
    0.68 vs 0.64 across seeds), so under no change the mean of n changes has SD σ·√(2/n), σ the SD of
    `spread` (df = its seeds − 1): a t-test of the mean change with its interval. {} when not computable."""
    if not changes or len(spread) < 2:
        return {}
    sigma, df = statistics.stdev(spread), len(spread) - 1
    mean = statistics.fmean(changes)
    se = sigma * math.sqrt(2 / len(changes))
    if se == 0:
        return {}
    t = mean / se
    half = scipy_stats.t.ppf(0.5 + confidence / 2, df) * se
    return {"mean": mean, "low": mean - half, "high": mean + half, "p": float(2 * scipy_stats.t.sf(abs(t), df))}


def budget_check_rows(design, short: list[dict], long: list[dict]) -> list[dict]:
    """The longer-budget check (a design's plateau_check), per dataset and pre-registered contrast:
    the contrast (points, policy.per_seed_contrast) on the seeds finished at both budgets, at the
    study's epochs (`short`: its analysed records) and at the check's (`long`), the per-seed changes
    long − short and their mean; the reading fixed in the check's preset (descriptive): "moved" when
    |mean change| exceeds the study's 95 % t half-width of that contrast (policy.half_widths, over all its
    analysed seeds), else "holds"; and, added after that preset was registered, the change tested against
    all the study's seeds' spread (`change_test`: its 95 % interval, p and "changed" when p < CHANGE_ALPHA,
    else "no change detected"). Both say "no paired seed yet" without one."""

    short, long = results(short), results(long)

    def accuracy(found, dataset):
        return {(r.variant, r.seed): r.top1 for r in finished(found) if r.dataset == dataset}

    rows = []
    for dataset in sorted({r.dataset for r in short} | {r.dataset for r in long}):
        at_short, at_long = accuracy(short, dataset), accuracy(long, dataset)
        widths = half_widths(design, at_short)
        for contrast in design.contrasts:
            before, after = per_seed_contrast(contrast, at_short), per_seed_contrast(contrast, at_long)
            seeds = sorted(set(before) & set(after))
            changes = [after[s] - before[s] for s in seeds]
            tested = change_test(changes, list(before.values()))
            mean = statistics.fmean(changes) if changes else math.nan
            width = widths[contrast.name]
            rows.append(
                {
                    "dataset": dataset,
                    "contrast": contrast.name,
                    "paired seeds": ", ".join(map(str, seeds)) or "—",
                    "short budget (points)": statistics.fmean(before[s] for s in seeds) if seeds else math.nan,
                    "long budget (points)": statistics.fmean(after[s] for s in seeds) if seeds else math.nan,
                    "per-seed change (points)": ", ".join(f"{c:+.2f}" for c in changes) or "—",
                    "mean change (points)": mean,
                    "95% interval of the change": (f"[{tested['low']:+.2f}, {tested['high']:+.2f}]" if tested else "—"),
                    "p (change)": tested.get("p", math.nan),
                    "short budget 95% half-width (points)": width,
                    "reading": "no paired seed yet" if not seeds else ("moved" if abs(mean) > width else "holds"),
                    "tested": (
                        "no paired seed yet"
                        if not seeds
                        else "changed"
                        if tested and tested["p"] < CHANGE_ALPHA
                        else "no change detected"
                    ),
                }
            )
    return rows


def budget_check_text(rows: list[dict], check_runs: list[dict], name: str, planned: int, epochs: tuple) -> str:
    """Markdown: how far the longer-budget check `name` (`planned` runs; `epochs`: (study, check)) has
    trained, whether its runs reach the plateau rule (`check_runs`: its convergence_rows), and which
    contrasts its reading rule calls moved or holding (`rows`: budget_check_rows)."""
    short, long = epochs
    head = f"**Longer-budget check** (`{name}`: the primary variants at {long} epochs, not {short}, paired by seed)"
    if not check_runs:
        return (
            f"{head}: none of its {planned} runs has finished yet, so every comparison here holds at {short} "
            "epochs only; whether a longer budget moves it is not measured yet."
        )
    met = sum(r["plateau met"] for r in check_runs)
    text = (
        f"{head}: {len(check_runs)} of {planned} runs finished; the plateau rule is met by {met} of them "
        f"({met / len(check_runs):.0%}: {'at least' if converged(check_runs) else 'fewer than'} the "
        f"{CONVERGED_SHARE:.0%} that calls runs converged). "
    )
    return text + check_reading(rows, long)


def check_reading(rows: list[dict], long: int) -> str:
    """Two sentences: the check's pre-registered reading (how many contrasts moved by more than the
    study's 95 % half-width when training ran `long` epochs, listing them, and how many held), then the
    test of the change against all the study's seeds' spread (`change_test`), added after the check was
    registered (`rows`: budget_check_rows)."""
    paired = [r for r in rows if r["reading"] != "no paired seed yet"]
    if not paired:
        return "No contrast has a seed finished at both budgets yet."
    moved = [r for r in paired if r["reading"] == "moved"]
    listed = "; ".join(f"{r['contrast']} {r['mean change (points)']:+.2f} points" for r in moved)
    counts = sorted({len(r["paired seeds"].split(", ")) for r in paired})
    seeds = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    text = (
        f"Of {len(paired)} contrast{'s' * (len(paired) != 1)} with paired seeds, {len(moved)} moved by more than "
        f"the study's 95 % half-width when training ran {long} epochs"
        + (f" ({listed})" if moved else "")
        + f", and {len(paired) - len(moved)} held. Descriptive: the check has {seeds} paired "
        f"seed{'s' * (counts[-1] != 1)}{' per contrast' * (len(counts) > 1)}, too few to test a change on its own."
    )
    tested = [r for r in paired if r.get("tested") in ("changed", "no change detected")]
    if not tested:
        return text
    changed = [r for r in tested if r["tested"] == "changed"]
    found = "; ".join(
        f"{r['contrast']} {r['mean change (points)']:+.2f} points {r['95% interval of the change']}" for r in changed
    )
    return text + (
        f" Tested against the spread of all the study's seeds (a twin trained longer behaves like a new run, so "
        f"a change has SD σ·√(2/n); two-sided, α = {CHANGE_ALPHA:g} each; added after the check was registered): "
        f"{len(changed)} of {len(tested)} changed" + (f" ({found})" if changed else "") + "."
    )


def variant_change_sentence(short: list[dict], long: list[dict], long_epochs: int) -> str:
    """Per variant finished at both budgets: its test top-1 change (points, paired by seed), tested like a
    contrast's (`change_test`, against the spread of that variant's seeds at the short budget)."""

    def top1(found):
        return {r.place: 100 * r.top1 for r in finished(results(found))}

    before, after = top1(short), top1(long)
    parts, changed = [], 0
    for dataset, variant in dict.fromkeys((d, v) for d, v, _ in after):
        seeds = sorted(s for d, v, s in after if (d, v) == (dataset, variant) and (d, v, s) in before)
        spread = [a for (d, v, _), a in before.items() if (d, v) == (dataset, variant)]
        tested = change_test([after[(dataset, variant, s)] - before[(dataset, variant, s)] for s in seeds], spread)
        if tested:
            changed += tested["p"] < CHANGE_ALPHA
            parts.append(f"{variant} {signed(tested['mean'])} [{signed(tested['low'])}, {signed(tested['high'])}]")
    if not parts:
        return ""
    return (
        f" Per variant, test top-1 at {long_epochs} epochs minus the study's, paired by seed (points, 95 % interval, "
        f"tested the same way): {'; '.join(parts)} — {changed} of {len(parts)} changed."
    )


def budget_check(params, analysed: list[dict], reports_root=None) -> tuple[str, list[dict]] | None:
    """The longer-budget check of a designed study (`params.design.plateau_check`), from the check's
    current records: (budget_check_text, budget_check_rows) against the study's `analysed` records;
    None when the design names no check."""
    name = params.design.plateau_check
    if not name:
        return None
    check = load_params(name)
    found = study_records(check, reports_root=reports_root)
    rows = budget_check_rows(params.design, analysed, found)
    epochs = (params.train.epochs, check.train.epochs)
    runs = finished_convergence(check, found, reports_root)
    text = budget_check_text(rows, runs, name, len(grid(check)), epochs)
    return text + variant_change_sentence(analysed, found, epochs[1]), rows


def budget_check_curves(params, reports_root=None) -> list[dict]:
    """Per finished run of the design's longer-budget check whose twin (same dataset, variant and seed)
    finished in the study: the validation top-1 (%) by epoch of both, for the figure of the two budgets
    (plots.budget_curves). [] when the design names no check or no pair has finished."""
    name = params.design.plateau_check
    if not name:
        return []
    check = load_params(name)
    study = {r.place: r for r in study_records(params, reports_root=reports_root)}
    pairs = []
    for result in study_records(check, reports_root=reports_root):
        place, twin = result.place, study.get(result.place)
        if not result.finished or twin is None or not twin.finished:
            continue
        curves = [run_history(Run(p, *place, reports_root=reports_root)) for p in (params, check)]
        if all(curves):
            short, long = ([100 * float(h["val_acc"]) for h in history] for history in curves)
            pairs.append({"dataset": place[0], "variant": place[1], "seed": place[2], "short": short, "long": long})
    return pairs
