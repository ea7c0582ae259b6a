"""The pilot of a study's recipe: learning curves and a table of every pilot run, and which recipe
meets the bar. `python -m campaign recipe-pilot PRESET [PRESET …] --out reports/<name>`
writes README.md, pilot_runs.{csv,md} and pilot_curves.png from the presets' kept records."""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path

from analysis.convergence import PLATEAU_FRACTION, PLATEAU_TOLERANCE, plateau_gain
from rpevit.lab.params import load_params
from rpevit.lab.schema import is_finished
from rpevit.lab.store import records
from rpevit.lab.tables import markdown_table

BAR = 90.0  # points of mean test top-1 softmax+ape must reach
FALLBACK_BAR = 89.0


def recipe_text(params) -> str:
    """The recipe of a preset in one line: augmentation, regularisers, schedule, model."""
    model, train = params.model, params.train
    return (
        f"augment {params.data.augment}, label smoothing {train.label_smoothing:g}, stochastic depth "
        f"{model.drop_path:g}, dropout {model.dropout:g}; {train.epochs} epochs, batch {train.batch_size}, "
        f"AdamW lr {train.lr:g} (warmup {train.warmup_epochs:g}, cosine), weight decay {train.weight_decay:g}; "
        f"dim {model.dim}, depth {model.depth}, heads {model.heads}, MLP {model.mlp_dim}, patch {model.patch_size}"
    )


def pilot_runs(presets: list[str], runs_root=None, reports_root=None) -> list[dict]:
    """One row per finished (or still training) run of the pilot presets, with its learning curve."""
    from rpevit.lab.store.catalog import grid, run_history, study_records
    from rpevit.lab.store.run import Run

    rows = []
    for name in presets:
        params = load_params(name)
        done = {r.place: r for r in study_records(params, runs_root, reports_root)}
        for place in grid(params):
            run = Run(params, *place, runs_root=runs_root, reports_root=reports_root)
            record = done.get(run.place)
            history = run_history(run)
            if record is None:  # unfinished: its curve so far, from runs/
                history = records.read_history(run.dir)
            val = [float(h["val_acc"]) for h in history]
            rows.append(
                {
                    "preset": params.name,
                    "variant": run.variant,
                    "seed": run.seed,
                    "recipe": recipe_text(params),
                    "epochs": params.train.epochs,
                    "epochs done": len(history),
                    "status": record.status if record else "training",
                    "best epoch": record.best_epoch if record else None,
                    "best val %": 100 * max(val) if val else math.nan,
                    "test top-1 %": 100 * record.top1 if record and record.top1 is not None else math.nan,
                    "last train top-1 %": 100 * float(history[-1]["train_acc"]) if history else math.nan,
                    f"val gain over last {PLATEAU_FRACTION:.0%} (points)": plateau_gain(val)
                    if len(val) == params.train.epochs
                    else math.nan,
                    "median s/epoch": statistics.median(float(h["seconds"]) for h in history) if history else math.nan,
                    "history": history,
                }
            )
    return rows


def decision_text(rows: list[dict], baseline: str = "softmax+ape") -> str:
    """Which pilot recipes meet the bar, generated from the table: softmax+ape's test top-1 ≥ 90 %
    with a plateau (< 0.2 points of validation gain over the last 20 % of epochs), cheapest first."""
    gain_key = f"val gain over last {PLATEAU_FRACTION:.0%} (points)"
    finished = [r for r in rows if r["variant"] == baseline and is_finished(r)]
    if not finished:
        return f"No finished `{baseline}` pilot run yet."
    lines = []
    for r in sorted(finished, key=lambda r: r["epochs"] * r["median s/epoch"]):
        plateau = r[gain_key] < PLATEAU_TOLERANCE
        bar = r["test top-1 %"] >= BAR
        lines.append(
            f"- `{r['preset']}` ({r['recipe']}): test top-1 {r['test top-1 %']:.2f} % "
            f"({'≥' if bar else '<'} {BAR:g} %), best validation epoch {r['best epoch']} of {r['epochs']}, "
            f"validation gain over the last {PLATEAU_FRACTION:.0%} of epochs {r[gain_key]:.2f} points "
            f"({'plateau' if plateau else 'still rising'}); final augmented train top-1 "
            f"{r['last train top-1 %']:.1f} %."
        )
    meeting = [r for r in finished if r["test top-1 %"] >= BAR and r[gain_key] < PLATEAU_TOLERANCE]
    converged = [r for r in finished if r[gain_key] < PLATEAU_TOLERANCE and r["test top-1 %"] >= FALLBACK_BAR]
    if meeting:
        best = min(meeting, key=lambda r: r["epochs"] * r["median s/epoch"])
        verdict = f"**The cheapest recipe that meets the bar: `{best['preset']}`.**"
    elif converged:
        best = max(converged, key=lambda r: r["test top-1 %"])
        verdict = (
            f"**No pilot recipe reaches {BAR:g} % at a plateau; the best converged one is `{best['preset']}` at "
            f"{best['test top-1 %']:.2f} %, {BAR - best['test top-1 %']:.2f} points below the bar.**"
        )
    else:
        verdict = f"**No pilot recipe has reached the plateau rule at ≥ {FALLBACK_BAR:g} % yet.**"
    return "\n".join([verdict, "", *lines])


def _recipe_key(params) -> tuple:
    """The recipe without its length: what two presets must share to be one recipe at two lengths."""
    return (params.data.augment, params.model, dataclasses.replace(params.train, epochs=0, device="cpu"))


def choice_text(rows: list[dict], chosen: str, baseline: str = "softmax+ape") -> str:
    """Which pilot run a study preset's recipe is, and what the same recipe did at other lengths — from
    the table. Presets count as the same recipe when everything but the number of epochs matches."""
    study = load_params(chosen)
    same = [
        r
        for r in rows
        if r["variant"] == baseline and is_finished(r) and _recipe_key(load_params(r["preset"])) == _recipe_key(study)
    ]
    exact = [r for r in same if r["epochs"] == study.train.epochs]
    if not exact:
        return f"`{chosen}`'s recipe ({recipe_text(study)}) has no finished `{baseline}` pilot run."
    base = exact[0]
    lines = [
        f"`{chosen}` trains the recipe of `{base['preset']}` ({study.train.epochs} epochs): its pilot `{baseline}` "
        f"reached {base['test top-1 %']:.2f} % test top-1."
    ]
    for other in sorted((r for r in same if r["epochs"] != study.train.epochs), key=lambda r: r["epochs"]):
        lines.append(
            f"The same recipe over {other['epochs']} epochs (`{other['preset']}`) reached "
            f"{other['test top-1 %']:.2f} % "
            f"({other['test top-1 %'] - base['test top-1 %']:+.2f} points; one seed each), with a validation gain "
            f"of {other[f'val gain over last {PLATEAU_FRACTION:.0%} (points)']:.2f} points over its last "
            f"{PLATEAU_FRACTION:.0%} of epochs."
        )
    return " ".join(lines)


def curves_figure(rows: list[dict]):
    """Validation and (augmented) training top-1 per epoch of every pilot run, one colour per run."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained", sharey=True)
    for index, row in enumerate(rows):
        epochs = [int(h["epoch"]) for h in row["history"]]
        label = f"{row['preset'].removeprefix('fmnist_pilot_') or row['preset']}: {row['variant']}"
        for axis, key in zip(axes, ("val_acc", "train_acc")):
            axis.plot(epochs, [100 * float(h[key]) for h in row["history"]], color=f"C{index}", marker=".", label=label)
    for axis, title in zip(axes, ("validation top-1 (5,000 held-out images)", "training top-1 (augmented batches)")):
        axis.axhline(BAR, color="grey", lw=0.8, ls="--")
        axis.set_title(title)
        axis.set_xlabel("epoch")
        axis.grid(alpha=0.3)
        axis.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_ylabel("top-1 (%)")
    axes[0].set_ylim(80, 95)
    axes[0].legend(fontsize=8, loc="lower right")
    return fig


def write_pilot_report(
    presets: list[str], out: Path, runs_root=None, reports_root=None, chosen: str | None = None
) -> Path:
    """reports/<out>/: README.md (decision + table), pilot_runs.{csv,md}, pilot_curves.png."""
    from analysis.report import figure_png

    out = Path(out)
    rows = pilot_runs(presets, runs_root, reports_root)
    table = [{k: v for k, v in r.items() if k not in ("history", "recipe")} for r in rows]
    records.write_csv(out / "pilot_runs.csv", table)
    records.write_text(out / "pilot_runs.md", markdown_table(table, list(table[0]), digits=2) + "\n")
    import matplotlib.pyplot as plt

    fig = curves_figure(rows)
    records.write_bytes(out / "pilot_curves.png", figure_png(fig))
    plt.close(fig)
    recipes = "\n".join(f"- `{name}`: {recipe_text(load_params(name))}" for name in presets)
    readme = "\n".join(
        [
            "# Pilot of the converged Fashion-MNIST study",
            "",
            f"Generated by `python -m campaign recipe-pilot {' '.join(presets)} --out {out.as_posix()}` from the "
            "presets' "
            "kept records. Every pilot run trained at one thread beside other work on a 2-core CPU, so seconds "
            "per epoch are for ordering only, not speed claims (those come from `bench speed`).",
            "",
            "## Recipes",
            "",
            recipes,
            "",
            "## Decision (generated from the table)",
            "",
            decision_text(rows),
            *(["", "## The recipe chosen", "", choice_text(rows, chosen)] if chosen else []),
            "",
            "## Runs",
            "",
            markdown_table(table, list(table[0]), digits=2),
            "",
            "![learning curves](pilot_curves.png)",
            "",
        ]
    )
    records.write_text(out / "README.md", readme)
    return out


def add_parser(sub) -> None:
    """The `recipe-pilot` sub-command's arguments."""
    pilot = sub.add_parser("recipe-pilot", help="a recipe pilot's report from its presets' run records")
    pilot.add_argument("presets", nargs="+", help="the pilot presets (e.g. fmnist_pilot_flip fmnist_pilot_flip_erase)")
    pilot.add_argument("--out", required=True, help="the report folder (e.g. reports/fmnist_pilot)")
    pilot.add_argument("--chosen", help="the study preset whose recipe the pilot chose (e.g. fmnist_converged)")


def command(args) -> int:
    """Write a recipe pilot's report (learning curves, table, decision) from its presets' records."""
    out = write_pilot_report(args.presets, Path(args.out), chosen=args.chosen)
    print(f"pilot report: {out / 'README.md'}")
    return 0
