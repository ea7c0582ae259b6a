"""The report of a pre-registered recall pilot (params/recall_pilot.yaml): on the 2D associative-recall
task (rpevit/core/data/recall.py), at which number of pairs K does softmax solve the task while a
Performer falls behind — by the go/no-go rule fixed in the preset before its first run.

Per run the record holds test top-1 at the end of its budget (best-validation weights). Gap = Performer −
softmax at the same K and seed, in points (negative: softmax ahead), with a 95 % t-interval over the seeds
(scipy). GO at the smallest K where softmax's mean test top-1 is ≥ 95 % and some Performer's mean gap is
≤ −5 points. `python -m campaign recall-pilot <preset>` writes reports/<preset>/README.md, recall_pilot.csv
and .md, and the figures recall_pilot.png (top-1 against K) and recall_curves.png (validation top-1 per
epoch) from the kept records.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from rpevit.core.data import dataset_info
from rpevit.core.errors import UserError
from rpevit.core.stats import t_interval
from rpevit.lab.result import results
from rpevit.lab.revision import provenance_line
from rpevit.lab.schema import finished
from rpevit.lab.store import records
from rpevit.lab.tables import markdown_table, signed

from . import readme_blocks
from .orders import RECALL_ORDER, next_in_order
from .readme_blocks import ONE_LINE

ORDER = RECALL_ORDER  # fixed in the first pilot's header
SOLVED = 95.0  # softmax's mean test top-1 (%) at a K for the task to count as solvable there
GO_GAP = 5.0  # a Performer this many points behind softmax at such a K: GO
CHANCE = 10.0  # ten value classes
TABLE, FIGURE, CURVES = "recall_pilot", "recall_pilot.png", "recall_curves.png"


def check_is_recall_pilot(params) -> None:
    """One UserError unless every dataset of the preset is a recall task and softmax+ape is among its variants
    or read from its reference."""
    if not all(dataset_info(d).recall is not None for d in params.datasets) or "softmax+ape" not in _variants(params):
        raise UserError(
            f"recall-pilot reports a recall pilot (recall tasks only, softmax+ape among the variants or read from "
            f"its reference); {params.name!r} is not one. A study's own report: python -m rpevit notebooks "
            f"{params.name} --no-train."
        )


def _variants(params) -> list[str]:
    """The preset's variants and those it reads from its reference."""
    from rpevit.lab.params import load_params

    return [*params.variants, *(load_params(params.reference).variants if params.reference else ())]


def compared(params) -> list[str]:
    """The variants the report compares: softmax+ape (trained here or read from the reference), then the
    Performers in the preset's order."""
    return ["softmax+ape", *performers(params)]


def run_of(params, dataset: str, variant: str, seed: int):
    """The run of `variant` the report reads: this preset's, or its reference's for a variant it reads."""
    from rpevit.lab.params import load_params
    from rpevit.lab.store.run import Run

    return Run(params if variant in params.variants else load_params(params.reference), dataset, variant, seed)


def next_pilot(params) -> str:
    """What the pre-registered order trains after a NO-GO of this pilot."""
    from rpevit.lab.params import load_params

    following = next_in_order(params.name)
    if following is None:
        return "The pre-registered order of recall pilots ends here."
    return f"By the pre-registration `{following}` trains next ({load_params(following).description})."


def pairs_of(params) -> list[int]:
    """K, the key–value pairs, of each of the preset's recall datasets, in its order."""
    return [dataset_info(d).recall.pairs for d in params.datasets]


def top1_by_run(found) -> dict[tuple[str, str, int], float]:
    """(dataset, variant, seed) → test top-1 in points, of the finished runs."""
    return {(r.dataset, r.variant, r.seed): 100 * r.top1 for r in finished(results(found))}


def performers(params) -> list[str]:
    """The preset's variants other than softmax+ape, in its order."""
    return [v for v in params.variants if v != "softmax+ape"]


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def interval_text(gaps: list[float]) -> str:
    """A mean gap with its 95 % t-interval (one seed: no interval)."""
    if not gaps:
        return "—"
    found = t_interval(gaps)
    if len(gaps) == 1:
        return f"{signed(found['mean'])} (1 seed, no interval)"
    return f"{signed(found['mean'])} [{signed(found['low'])}, {signed(found['high'])}]"


def pilot_rows(params, top1: dict) -> list[dict]:
    """Per dataset (K) and Performer: softmax's and the Performer's mean top-1, the per-seed gaps, their
    mean with its interval, and how many seeds have both runs."""
    rows = []
    for dataset in params.datasets:
        task = dataset_info(dataset).recall
        soft = [top1[(dataset, "softmax+ape", s)] for s in params.seeds if (dataset, "softmax+ape", s) in top1]
        for variant in performers(params):
            seeds = [s for s in params.seeds if all((dataset, v, s) in top1 for v in (variant, "softmax+ape"))]
            gaps = [top1[(dataset, variant, s)] - top1[(dataset, "softmax+ape", s)] for s in seeds]
            mine = [top1[(dataset, variant, s)] for s in params.seeds if (dataset, variant, s) in top1]
            rows.append(
                {
                    "dataset": dataset,
                    "K": task.pairs,
                    "variant": variant,
                    "softmax top-1": _mean(soft),
                    "top-1": _mean(mine),
                    "seeds": len(gaps),
                    "gaps (per seed)": ", ".join(signed(g) for g in gaps) or "—",
                    "mean gap": _mean(gaps),
                    "gap, 95 % interval": interval_text(gaps),
                    "complete": len(soft) == len(params.seeds) and len(mine) == len(params.seeds),
                }
            )
    return rows


def verdict(rows: list[dict], params) -> tuple[str, dict | None]:
    """The pre-registered go/no-go: ("GO", the row of the Performer furthest behind) at the smallest K where
    softmax is ≥ SOLVED and a Performer's mean gap ≤ −GO_GAP; ("", the first row of a K not yet complete)
    while one stops the reading there (the rule takes the smallest K); ("NO-GO", None) otherwise."""
    for dataset in params.datasets:
        at = [r for r in rows if r["dataset"] == dataset]
        if not all(r["complete"] for r in at):
            return "", at[0]
        behind = [r for r in at if r["softmax top-1"] >= SOLVED and r["mean gap"] <= -GO_GAP]
        if behind:
            return "GO", min(behind, key=lambda r: r["mean gap"])
    return "NO-GO", None


def decision(rows: list[dict], params) -> str:
    """The go/no-go (verdict) in words, with the numbers it read."""
    word, row = verdict(rows, params)
    if word == "":
        return f"**Not decided yet**: the runs at {row['dataset']} (K = {row['K']}) have not all finished."
    if word == "GO":
        return (
            f"**GO at K = {row['K']}** (`{row['dataset']}`): softmax solves it "
            f"({row['softmax top-1']:.1f} % test top-1, ≥ {SOLVED:g}) and {row['variant']} is "
            f"{row['gap, 95 % interval']} points behind (≤ −{GO_GAP:g} needed, mean over seeds, 95 % "
            "t-interval). The factorial on this K is pre-registered next."
        )
    solved = sorted({r["K"] for r in rows if r["softmax top-1"] >= SOLVED})
    ks = ", ".join(map(str, pairs_of(params)))
    return (
        f"**NO-GO**: at no K of {ks} did softmax reach ≥ {SOLVED:g} % with a Performer ≥ {GO_GAP:g} points behind "
        + (f"(softmax solved K = {', '.join(map(str, solved))})." if solved else "(softmax solved none of them).")
        + f" {next_pilot(params)}"
    )


def readme_line(params, rows: list[dict], word: str, done: int, runs: int) -> str:
    """The pilot in one line for the README's recall block: layout, K, runs, verdict, softmax's mean top-1
    per K (chance is CHANCE, said once above the block) and the range of the Performers' mean gaps."""
    tasks = [dataset_info(d).recall for d in params.datasets]
    soft = {r["K"]: r["softmax top-1"] for r in rows}
    paired = [r for r in rows if not math.isnan(r["mean gap"])]
    gaps, names = [r["mean gap"] for r in paired], dict.fromkeys(r["variant"].removesuffix("+ape") for r in paired)
    between = signed(min(gaps)) + ("" if min(gaps) == max(gaps) else f" to {signed(max(gaps))}") if gaps else ""
    spread = f"{', '.join(names)} − softmax {between} points" if gaps else "no pairs"
    return (
        f"`{params.name}` ({tasks[0].layout}, K = {'/'.join(str(t.pairs) for t in tasks)}; {done} of {runs} runs): "
        f"**{word or 'open'}** — softmax "
        f"{' / '.join('—' if math.isnan(soft[t.pairs]) else f'{soft[t.pairs]:.1f}' for t in tasks)} %; {spread}."
    )


def sync_readme(readme: Path, reports_root: Path) -> bool:
    """Put each recall pilot's line (the `**In one line**` of its report, for those with a report), then the
    order's answer (the `**The recall answer**` line of reports/recall_pilots.md, once there is one), into the
    README's recall block (<!-- recall: … --> … <!-- /recall -->); True if it changed."""
    from .recall_overview import ANSWER, OVERVIEW

    lines = [
        f"- {line.removeprefix(ONE_LINE)}\n"
        for name in ORDER
        if (report := reports_root / name / "README.md").is_file()
        for line in report.read_text().splitlines()
        if line.startswith(ONE_LINE)
    ]
    overview = reports_root / OVERVIEW
    said = [line for line in overview.read_text().splitlines() if line.startswith(ANSWER)] if overview.is_file() else []
    return readme_blocks.fill(readme, "recall", "".join(lines) + "".join(f"\n{line}\n" for line in said))


def trains_next(preset: str, reports_root=None) -> str:
    """The recall pilot the order trains once `preset` has ended NO-GO ('' while it is open, on GO, or at the
    end of the order): what a GPU sitting goes on with in the minutes left."""
    found = summary(preset, reports_root)
    params = found["params"]
    following = next_in_order(params.name)
    return following if following and found["verdict"] == "NO-GO" else ""


def accuracy_figure(params, top1: dict):
    """Test top-1 against K, one line per variant (the mean over seeds; each seed a dot), chance and the 95 %
    line marked."""
    from analysis.plots import _mpl
    from analysis.styles import figure_styles

    plt = _mpl()
    fig, axis = plt.subplots(figsize=(6.4, 4.2))
    ks = pairs_of(params)
    styles = figure_styles(compared(params))
    for variant in compared(params):
        style = styles[variant]
        means = []
        for k, dataset in zip(ks, params.datasets, strict=True):
            values = [top1[(dataset, variant, s)] for s in params.seeds if (dataset, variant, s) in top1]
            axis.plot(
                [k] * len(values), values, linestyle="none", marker=style["marker"], color=style["color"], alpha=0.5
            )
            means.append(_mean(values))
        axis.plot(ks, means, label=variant, **style)
    axis.axhline(SOLVED, color="grey", linewidth=0.8, linestyle="--")
    axis.axhline(CHANCE, color="grey", linewidth=0.8, linestyle=":")
    axis.set(xlabel="K (key–value pairs in the image)", ylabel="test top-1 (%)", xticks=ks, ylim=(0, 102))
    axis.set_title(f"{params.name}: recall accuracy against K (dots: seeds; dashed: 95 %, dotted: chance)", fontsize=9)
    axis.legend(fontsize=8, loc="lower left")
    return fig


def curves_figure(params, found):
    """Validation top-1 per epoch of every finished run, one panel per K."""
    from analysis.plots import _mpl
    from analysis.styles import figure_styles
    from rpevit.lab.store.catalog import run_history

    plt = _mpl()
    styles = figure_styles(compared(params))
    fig, axes = plt.subplots(1, len(params.datasets), figsize=(4.2 * len(params.datasets), 3.4), squeeze=False)
    for axis, dataset in zip(axes[0], params.datasets, strict=True):
        for r in finished(results(found)):
            if r.dataset == dataset and r.run is not None and (rows := run_history(r.run)):
                style = styles[r.variant]
                label = r.variant if r.seed == params.seeds[0] else None
                epochs, accuracy = [row["epoch"] for row in rows], [100 * row["val_acc"] for row in rows]
                axis.plot(epochs, accuracy, label=label, markevery=5, **style)
        axis.set(title=f"K = {dataset_info(dataset).recall.pairs}", xlabel="epoch", ylim=(0, 102))
        if not axis.lines:
            axis.text(0.5, 0.5, "no finished run yet", ha="center", transform=axis.transAxes)
    axes[0][0].set_ylabel("validation top-1 (%)")
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def summary(preset: str, reports_root=None) -> dict:
    """What a recall pilot's report shows, computed from its records and written nowhere (write_report writes
    it; notebook 35 shows it): `params`, `found`, `top1`, `rows` (pilot_rows), `decision` and its `verdict`
    word, `line` (readme_line), `table` (Markdown), `intro`, `provenance` (the code revisions and machines
    its runs came from), `done` (its own finished runs)."""
    from rpevit.lab.params import load_params
    from rpevit.lab.store.catalog import grid, reference_records, study_records

    params = load_params(preset)
    check_is_recall_pilot(params)
    own = study_records(params, reports_root=reports_root)
    read = [r for r in reference_records(params, reports_root=reports_root) if r.variant == "softmax+ape"]
    found = [*own, *read]
    top1 = top1_by_run(found)
    rows = pilot_rows(params, top1)
    shown = [{k: round(v, 2) if isinstance(v, float) else v for k, v in r.items() if k != "complete"} for r in rows]
    table = markdown_table(
        [{**r, "mean gap": "—" if math.isnan(r["mean gap"]) else signed(r["mean gap"])} for r in shown], digits=2
    )
    kept = finished(results(own))
    done = len(kept)
    borrowed = (
        f" softmax+ape is read from `{params.reference}`'s kept records ({len(read)} runs, the same run keys)."
        if params.reference
        else ""
    )
    intro = (
        f"{params.description}. Pre-registered in `params/{params.name}.yaml` before its first run: the task, "
        f"the variants, seeds, recipe, budget and the go/no-go rule. {done} of {len(grid(params))} runs "
        f"finished.{borrowed}"
    )
    word = verdict(rows, params)[0]
    return {
        "params": params,
        "found": found,
        "top1": top1,
        "rows": shown,
        "decision": decision(rows, params),
        "verdict": word,
        "line": readme_line(params, rows, word, done, len(grid(params))),
        "table": table,
        "intro": intro,
        "provenance": provenance_line(kept),
        "done": done,
    }


def write_report(preset: str, reports_root=None) -> list[str]:
    """reports/<preset>/README.md, recall_pilot.{csv,md}, its two figures and where the query looks
    (recall_maps.report_section); returns the README's lines."""
    from analysis.plots import save_png

    from .recall_maps import report_section

    found = summary(preset, reports_root)
    params = found["params"]
    folder = Path(reports_root or records.reports_root()) / params.name
    folder.mkdir(parents=True, exist_ok=True)
    records.write_csv(folder / f"{TABLE}.csv", found["rows"])
    records.write_text(folder / f"{TABLE}.md", found["table"])
    save_png(accuracy_figure(params, found["top1"]), folder / FIGURE)
    save_png(curves_figure(params, found["found"]), folder / CURVES)
    lines = [
        f"# {params.name}: the recall pilot",
        "",
        found["intro"],
        "",
        found["provenance"],
        "",
        found["decision"],
        "",
        ONE_LINE + found["line"],
        "",
        "## Test top-1 and the gap per K (Performer − softmax, points; negative: softmax ahead; 95 % t-intervals "
        "over seeds)",
        "",
        found["table"].rstrip("\n"),
        "",
        f"![Test top-1 against K per variant]({FIGURE})",
        "",
        "## Validation top-1 per epoch",
        "",
        f"![Validation top-1 per epoch, one panel per K]({CURVES})",
        *report_section(params, folder),
    ]
    records.write_text(folder / "README.md", "\n".join(lines) + "\n")
    return lines


def add_parser(sub) -> None:
    """The `recall-pilot` sub-command's arguments."""
    pilot = sub.add_parser("recall-pilot", help="a recall pilot's report: accuracy against K, gaps, go/no-go")
    pilot.add_argument("params", nargs="?", default=ORDER[0], help="the pilot's preset")
    pilot.add_argument("--next", action="store_true", help="print only the pilot its finished NO-GO hands on to")
    pilot.add_argument(
        "--overview", action="store_true", help="every pilot of the order and its answer: reports/recall_pilots.md"
    )


def command(args) -> int:
    """`python -m campaign recall-pilot <preset>`: its report, reports/<preset>/README.md; with --overview every
    pilot of the order (reports/recall_pilots.md, recall_overview); with --next only the next pilot's name (or
    nothing). In the project's reports either also fills the README's recall block."""
    if args.next:
        print(trains_next(args.params))
        return 0
    from rpevit.lab.params import PROJECT_ROOT

    from .recall_overview import write_overview

    lines = write_overview() if args.overview else write_report(args.params)
    print("\n".join(lines))
    if records.reports_root() == PROJECT_ROOT / "reports":  # the project's reports: its README quotes them
        changed = sync_readme(PROJECT_ROOT / "README.md", PROJECT_ROOT / "reports")
        print(f"README.md's recall block {'updated' if changed else 'already matches'}")
    if not args.overview:
        print(f"wrote reports/{Path(str(args.params)).stem}/: README.md, {TABLE}.csv, {TABLE}.md, {FIGURE}, {CURVES}")
    return 0
