"""How much a trained FAVOR+ model depends on its random features ω: test top-1 with the ω it was tested with,
and with fresh draws of ω in every layer; and how well FAVOR+ estimates a trained softmax model's attention:
softmax's weights in the FAVOR+ model, under the same fresh draws.

FAVOR+ (Choromanski et al. 2021, Lemma 1: positive random features) estimates softmax attention for any ω drawn
from the orthogonal Gaussian ensemble: a model whose attention is that estimate should keep its accuracy under a
fresh draw, up to the estimator's noise at m features. A model trained with one fixed ω (`favor`, redraw_steps 0)
may instead adapt to that draw — a fixed random-feature attention, not a softmax estimate — and lose accuracy when
ω changes; `favor_redraw` draws ω anew every 1,000 training steps. Measured per finished run with tested weights
(kept in the repository or here), on the test split, with `draws` fresh ω per layer from generators seeded apart
from every training draw (FRESH). `python -m campaign feature-draws PRESET` writes
reports/<preset>/feature_draws.{csv,md}; one seed per variant has kept weights, so the table is descriptive.
"""

from __future__ import annotations

import statistics

import torch

from rpevit.core.attention.features import orthogonal_gaussian_matrix
from rpevit.core.attention.linear import FavorAttention, feature_seed

FRESH = 1_000_000  # fresh draw k of layer i: feature_seed(FRESH + k, i, 0); training draws use run seeds 0…
DRAWS = 8
TABLE = "feature_draws"


def favor_layers(model) -> list[FavorAttention]:
    """The model's FAVOR+ attention modules, in order (none for softmax or ReLU)."""
    return [m for m in model.modules() if isinstance(m, FavorAttention)]


def draw_fresh(layers: list[FavorAttention], draw: int) -> None:
    """Give every layer its fresh draw number `draw` of ω (shape, device and dtype of the one it holds)."""
    for index, layer in enumerate(layers):
        generator = torch.Generator().manual_seed(feature_seed(FRESH + draw, index, 0))
        layer.omega = orthogonal_gaussian_matrix(layer.num_features, layer.head_dim, generator).to(layer.omega)


def top1(model, split, info, batch_size: int) -> float:
    """Test top-1 of `model` on `split`, in points."""
    from rpevit.core.loop import predict

    logits, labels = predict(model, split, info, batch_size)
    return 100 * (logits.argmax(dim=1) == labels).double().mean().item()


def top1_under_draws(model, split, info, batch_size: int, draws: int = DRAWS) -> dict:
    """{"as trained": test top-1 with the model's own ω, "fresh": [top-1 under each fresh draw]}, in points; the
    model's own ω is back in place afterwards."""
    layers = favor_layers(model)
    own = [layer.omega for layer in layers]
    fresh = []
    try:
        tested = top1(model, split, info, batch_size)
        for draw in range(draws):
            draw_fresh(layers, draw)
            fresh.append(top1(model, split, info, batch_size))
    finally:
        for layer, omega in zip(layers, own, strict=True):
            layer.omega = omega
    return {"as trained": tested, "fresh": fresh}


def favor_twin(params, run, model):
    """The trained softmax `model`'s weights in the preset's FAVOR+ model of the same positional methods (its
    attention then FAVOR+'s estimate of the softmax attention it learned); None where the preset trains no such
    FAVOR+ variant or the weights differ in more than the random features."""
    from rpevit.core.model import build_model
    from rpevit.core.variants import parse_variant
    from rpevit.lab.store.run import Run

    parsed = parse_variant(run.variant)
    twin = parse_variant("+".join(["favor", *parsed.positions])).name
    if parsed.backend != "softmax" or twin not in params.variants:
        return None
    config = Run(params, run.dataset, twin, run.seed).model_config  # this preset's FAVOR+ (a dial: its m)
    favor = build_model(twin, config, seed=run.seed).eval()
    missing, unexpected = favor.load_state_dict(model.state_dict(), strict=False)
    if unexpected or any(not key.endswith((".omega", ".redraw_counter")) for key in missing):
        return None
    return favor


def row(variant: str, seed: int, record: dict, found: dict) -> dict:
    """One run's line: its recorded top-1, top-1 as trained again (its own ω; exact attention for softmax's
    weights), and over the fresh draws."""
    fresh = found["fresh"]
    return {
        "variant": variant,
        "seed": seed,
        "epochs": record.get("epochs"),
        "recorded top-1": 100 * record["top1"],
        "as trained": found["as trained"],
        "fresh ω: mean": statistics.fmean(fresh),
        "SD": statistics.stdev(fresh) if len(fresh) > 1 else float("nan"),
        "min": min(fresh),
        "max": max(fresh),
        "draws": len(fresh),
        "fresh − as trained": statistics.fmean(fresh) - found["as trained"],
    }


def measure(params, draws: int = DRAWS, done=frozenset()) -> list[dict]:
    """Every finished run with tested weights here or kept of the preset's FAVOR+ variants, and of its softmax
    variants — its own or those its reference preset trains for it (a feature dial's) — that have a FAVOR+ twin
    (favor_twin), but those whose (label, seed) is in `done`."""
    from rpevit.core.errors import UserError
    from rpevit.lab.store.catalog import grid_runs, reference_runs
    from rpevit.lab.store.run import train_config_for
    from rpevit.lab.training.runs import dataset_for, inspected_model

    rows, datasets = [], {}
    for run in [*grid_runs(params), *reference_runs(params)]:
        try:
            model, record = inspected_model(run, torch.device("cpu"))
        except (UserError, FileNotFoundError):
            continue
        if record is None or record.get("status") != "finished":
            continue
        own = bool(favor_layers(model))
        label = run.variant if own else f"{run.variant} → FAVOR+"  # a softmax run: its weights, FAVOR+'s attention
        subject = model if own else favor_twin(params, run, model)
        if subject is None or (label, run.seed) in done:
            continue
        dataset = datasets.setdefault(run.dataset, dataset_for(params, run.dataset, torch.device("cpu")))
        batch = train_config_for(params, record["epochs"]).eval_batch_size
        print(f"[{run.label}] test top-1 as trained and under {draws} fresh draws of FAVOR+'s ω", flush=True)
        found = top1_under_draws(subject, dataset.test, dataset.info, batch, draws)
        if not own:  # softmax's weights: as trained is its exact attention
            found["as trained"] = top1(model, dataset.test, dataset.info, batch)
        rows.append(row(label, run.seed, record, found))
    return rows


def write(params, rows: list[dict], reports_root=None) -> list[str]:
    """reports/<preset>/feature_draws.{csv,md}; returns the markdown's lines."""
    from rpevit.lab.store import records
    from rpevit.lab.tables import markdown_table

    folder = (reports_root or records.reports_root()) / params.name
    records.write_csv(folder / f"{TABLE}.csv", rows)
    draws = rows[0]["draws"]
    lines = [
        f"# {params.name}: FAVOR+ under fresh random features",
        "",
        f"`python -m campaign feature-draws {params.name} --draws {draws}` (campaign/feature_draws.py). Test top-1 "
        "(%) of each finished run with tested weights: as recorded; as trained, evaluated again (a FAVOR+ run with "
        f"its own ω, a softmax run with its exact attention); and with {draws} fresh draws of ω in every layer "
        "(the same draws for every run); `softmax+… → FAVOR+` is a softmax run's weights"
        + (f" (trained by `{params.reference}`, this preset's reference)" if params.reference else "")
        + " in the preset's FAVOR+ model of the same positional methods (FAVOR+'s estimate of the attention it "
        "learned). FAVOR+ estimates softmax attention for any draw: a model whose attention is that estimate "
        "keeps its accuracy under a fresh one, a model adapted to its ω loses it, and a softmax model keeps what "
        "m features estimate well. One run per variant and seed: descriptive.",
        "",
        markdown_table([_shown(r) for r in rows], list(rows[0]), digits=2),
    ]
    records.write_text(folder / f"{TABLE}.md", "\n".join(lines))  # the table ends the file with its newline
    return lines


def _shown(row: dict) -> dict:
    """A row as the table prints it: accuracies with two decimals, the change signed."""
    from rpevit.lab.tables import signed

    points = {k: f"{v:.2f}" for k, v in row.items() if isinstance(v, float) and k != "fresh − as trained"}
    return {**row, **points, "fresh − as trained": signed(row["fresh − as trained"])}


def measured(folder) -> list[dict]:
    """The rows of reports/<preset>/feature_draws.csv, typed as `row` makes them ([] when not measured there)."""
    import csv

    path = folder / f"{TABLE}.csv"
    if not path.is_file():
        return []
    with path.open() as handle:
        found = list(csv.DictReader(handle))
    whole = ("seed", "epochs", "draws")
    return [{k: v if k == "variant" else int(v) if k in whole else float(v) for k, v in r.items()} for r in found]


def short_clause(folder) -> str:
    """'under fresh FAVOR+ features (seed 1): favor+ape 91.1 → 18.5 %, softmax+ape → FAVOR+ …' for a one-line
    summary (each run's seed named where they differ; '' if not measured)."""
    rows = measured(folder)
    one_seed = len({r["seed"] for r in rows}) == 1

    def run(r: dict) -> str:
        seed = "" if one_seed else f" seed {r['seed']}"
        return f"{r['variant']}{seed} {r['as trained']:.1f} → {r['fresh ω: mean']:.1f} %"

    where = f" (seed {rows[0]['seed']})" if rows and one_seed else ""
    return f"under fresh FAVOR+ features{where}: {', '.join(map(run, rows))}" if rows else ""


PILOTS_LEAD = "FAVOR+ under fresh draws of ω"  # how the overview's paragraph of them starts (pilots_sentence)


def pilots_sentence(presets: list[str], reports_root, chance: float | None) -> str:
    """One paragraph for the pilots' overview: per pilot whose feature draws were measured, its FAVOR+ runs and
    softmax's weights under FAVOR+ attention, as trained → on average under fresh draws, and the highest mean
    any FAVOR+ run kept, beside `chance` (points; None: the pilots' chance levels differ); '' where no pilot was
    measured."""
    own, borrowed, draws = [], [], set()
    for preset in presets:
        for r in measured(reports_root / preset):
            clause = f"{r['as trained']:.1f} → {r['fresh ω: mean']:.1f} % (`{preset}`, seed {r['seed']})"
            (borrowed if r["variant"].endswith("→ FAVOR+") else own).append((r["fresh ω: mean"], clause))
            draws.add(r["draws"])
    if not own:
        return ""
    kept = max(mean for mean, _ in own)
    sentence = (
        f"{PILOTS_LEAD} ({' or '.join(map(str, sorted(draws)))} per run, measured after the fact; "
        f"reports/<pilot>/{TABLE}.md): every FAVOR+ run measured averaged {kept:.1f} % or less under them"
        + (f" (chance {chance:g} %)" if chance is not None else "")
        + f", as trained → fresh: {'; '.join(c for _, c in own)}"
    )
    if borrowed:
        sentence += f". Softmax's weights with FAVOR+ attention: {'; '.join(c for _, c in borrowed)}"
    return sentence + "."


def report_lines(folder) -> list[str]:
    """A study report's section on its measured feature draws (reports/<preset>/feature_draws.csv), one clause
    per run from the table; [] when they were not measured there."""
    rows = measured(folder)
    if not rows:
        return []
    clauses = [
        f"{r['variant']} seed {r['seed']} ({r['epochs']} epochs): {r['as trained']:.2f} % as trained, "
        f"{r['fresh ω: mean']:.2f} % on average over {r['draws']} fresh draws ({r['min']:.2f} to {r['max']:.2f})"
        for r in rows
    ]
    return [
        "",
        "## FAVOR+ under fresh random features",
        "",
        f"Test top-1 as trained (a FAVOR+ model with its own ω, a softmax model with exact attention) and with "
        f"fresh draws of FAVOR+'s ω in every layer ([{TABLE}.md]({TABLE}.md), `python -m campaign feature-draws "
        f"{folder.name}`): " + "; ".join(clauses) + ". FAVOR+ estimates softmax attention for any draw; a model "
        "that keeps its accuracy only with its own ω computes a fixed random-feature attention instead. One seed "
        "per variant: descriptive.",
    ]


def add_parser(sub) -> None:
    """The `feature-draws` sub-command's arguments."""
    parser = sub.add_parser("feature-draws", help="FAVOR+ runs' test top-1 under fresh random features")
    parser.add_argument("params", help="the preset whose finished FAVOR+ runs to measure")
    parser.add_argument("--draws", type=int, default=DRAWS, help=f"fresh draws of ω per run (default {DRAWS})")
    parser.add_argument(
        "--again", action="store_true", help="measure every run again (default: only those the table lacks)"
    )


def command(args) -> int:
    """`python -m campaign feature-draws PRESET`: measure the runs its table lacks (every run with --again), then
    write reports/<preset>/feature_draws.{csv,md} with the rows it kept."""
    from rpevit.core.attention import BACKENDS
    from rpevit.core.errors import UserError
    from rpevit.core.variants import parse_variant
    from rpevit.lab.params import load_params

    if args.draws < 2:
        raise UserError(f"--draws {args.draws}: at least 2 fresh draws, so their spread can be measured.")
    params = load_params(args.params)
    if not any(issubclass(BACKENDS[parse_variant(v).backend], FavorAttention) for v in params.variants):
        raise UserError(f"{params.name} trains no FAVOR+ variant: nothing depends on random features there.")
    from rpevit.lab.store import records

    kept = [] if args.again else [r for r in measured(records.reports_root() / params.name) if r["draws"] == args.draws]
    rows = kept + measure(params, args.draws, done={(r["variant"], r["seed"]) for r in kept})
    if len(rows) == len(kept):
        print(f"{params.name}: no finished run to measure that the table lacks; nothing written.")
        return 0
    print("\n".join(write(params, rows)))
    return 0
