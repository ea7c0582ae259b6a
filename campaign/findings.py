"""The Findings block of docs/results.md: the texts a preset's report generated (copied word for word by
`python -m campaign findings`), or, while a designed study trains, how far it is."""

from __future__ import annotations

from pathlib import Path

from rpevit.core.errors import UserError
from rpevit.lab.result import results
from rpevit.lab.schema import finished
from rpevit.lab.store import records
from rpevit.report.index import report_texts
from rpevit.report.store import report_dir

FINDINGS_PRESET = "fmnist_converged"
FINDINGS_END = "<!-- /findings -->"


def findings_begin(preset: str) -> str:
    by = f"`python -m campaign findings {preset}`"
    return f"<!-- findings: copied from reports/{preset}/ by {by}; do not edit by hand -->"


def designed(preset: str) -> bool:
    """True for a preset with a pre-registered design (False for one that does not load)."""
    from rpevit.lab.params import load_params

    try:
        return load_params(preset).design.active
    except UserError:
        return False


def findings_markdown(preset: str = FINDINGS_PRESET, root=None) -> str:
    """The Findings block of docs/results.md: the texts a preset's report generated from its tables (notebook 45's
    answer and speed claim), each with a link to its report and the claims table."""
    directory = report_dir(preset, root)
    texts = report_texts(directory)
    if not texts and designed(preset):
        return "\n".join([findings_begin(preset), study_status(preset, root), FINDINGS_END])
    if not texts:
        raise UserError(
            f"reports/{preset}/ has no generated texts yet; run `make study PRESET={preset}` "
            f"(or `python -m rpevit notebooks {preset}`) first."
        )
    link = f"reports/{preset}"
    lines = [
        findings_begin(preset),
        f"From [{link}/]({link}/README.md) — the [claims table]({link}/45_claims.md) (effects, intervals, "
        f"Holm-adjusted p, verdicts) and its [forest plot]({link}/45_forest.png).",
    ]
    for output, body in texts:
        lines += ["", f"**{output['caption']}** ([{output['files'][0]}]({link}/{output['files'][0]})):", "", body]
    return "\n".join([*lines, FINDINGS_END])


def study_status(preset: str, root=None) -> str:
    """Markdown: how far a designed study is (finished runs of its primary and secondary variants,
    complete primary seeds, hours against its budgets, from the kept records) while its report has not
    been generated yet."""
    from analysis.convergence import PLATEAU_RULE, budget_check_rows, check_reading, finished_convergence
    from rpevit.core.variants import parse_variant
    from rpevit.lab.params import load_params
    from rpevit.lab.schedule.policy import complete_seed_records, primary_progress, training_hours
    from rpevit.lab.store.catalog import grid, study_records

    params = load_params(preset)
    design = params.design
    current = study_records(params, reports_root=root)
    found = finished(current)
    primary = {parse_variant(v).name for v in design.primary}
    done = {
        "primary": [r for r in found if r.variant in primary],
        "secondary": [r for r in found if r.variant not in primary],
    }
    hours = {part: training_hours(rs) for part, rs in done.items()}
    complete = min(primary_progress(params, [r for r in current if r.dataset == d]).complete for d in params.datasets)
    if design.secondary_budget_hours is not None:
        budget = (
            f"{hours['primary']:.1f} of the primary budget's {design.budget_hours:g} training hours and "
            f"{hours['secondary']:.1f} of the secondary budget's {design.secondary_budget_hours:g} spent"
        )
    else:
        cap = "" if design.budget_hours is None else f" of a {design.budget_hours:g}-hour budget"
        budget = f"{hours['primary'] + hours['secondary']:.1f} training hours{cap} spent"
    rule, secondary = design.stopping, len(done["secondary"])
    converged = finished_convergence(params, found, root)
    plateau = (
        f" So far {sum(r['plateau met'] for r in converged)} of {len(converged)} finished runs meet the plateau "
        f"rule ({PLATEAU_RULE})."
        if converged
        else ""
    )
    fell = [r for r in converged if r["collapsed"]]
    if fell:
        plateau += (
            f" {len(fell)} run{'s' * (len(fell) != 1)} collapsed (validation top-1 falling from the run's best toward "
            "chance, the loss finite; analysed at the best-validation epoch like every run): "
            + ", ".join(f"{r['variant']} seed {r['seed']} (best epoch {r['best epoch']})" for r in fell)
            + "."
        )
    check = ""
    if design.plateau_check:
        other = load_params(design.plateau_check)
        kept = finished(study_records(other, reports_root=root))
        met = sum(r["plateau met"] for r in finished_convergence(other, kept, root))
        rows = budget_check_rows(design, complete_seed_records(params, found), kept)
        check = (
            f" Its longer-budget check `{other.name}` (the primary variants at {other.train.epochs} epochs, "
            f"trained before the secondary ones): {len(kept)} of {len(grid(other))} runs finished"
            + (
                f", {met} of them meeting the plateau rule. By its pre-registered reading: "
                + check_reading(rows, other.train.epochs)
                if kept
                else "."
            )
        )
    return (
        f"**The pre-registered study `{preset}` is in progress** ([params/{preset}.yaml](params/{preset}.yaml): "
        f"design, recipe and stopping rule fixed before its first run; amendments declared there before the runs they "
        f"concern): {len(done['primary'])} primary runs finished, {complete} complete primary seed"
        f"{'s' * (complete != 1)} ({len(primary)} variants × {rule.min_seeds}–{rule.max_seeds} seeds by the stopping "
        f"rule), {secondary} secondary run{'s' * (secondary != 1)}, of at most {len(grid(params))} runs; {budget}."
        f"{plateau}{check}{settled_primary(params, current)}{secondary_so_far(params, found)}"
        f" Its answer — the Performer–softmax gap at the study's {params.train.epochs}-epoch budget "
        f"and whether RoPE closes it, with intervals — appears here when the study has finished and `python -m rpevit "
        f"notebooks {preset}` regenerates its report (an interim report of what has finished, trained nothing: "
        f"`python -m rpevit notebooks {preset} --no-train`). The "
        f"recipe's pilot: [reports/fmnist_pilot/](reports/fmnist_pilot/README.md)." + _early_study_note(root)
    )


def settled_primary(params, current: list[dict]) -> str:
    """Sentences for each dataset whose primary grid is settled (wanted.primary_settled): why it stands
    there, and each pre-registered contrast's effect with the unadjusted interval its report shows
    (stats.contrast_test over the complete seeds); the verdicts wait for the report's multiplicity rule
    over all its claims. '' while no primary grid is settled."""
    from rpevit.core.stats import contrast_test
    from rpevit.lab.schedule.policy import complete_seed_records, per_seed_contrast, seeds_text
    from rpevit.lab.schedule.wanted import primary_settled
    from rpevit.lab.tables import signed

    design, sentences = params.design, []
    for dataset in params.datasets:
        mine = [r for r in results(current) if r.dataset == dataset]
        if not mine or not primary_settled(params, mine):
            continue
        accuracy = {(r.variant, r.seed): r.top1 for r in finished(complete_seed_records(params, mine))}
        parts = []
        for contrast in design.contrasts:
            values = list(per_seed_contrast(contrast, accuracy).values())
            tested = contrast_test(values, contrast.kind, design.margin_points, design.alpha)
            parts.append(
                f"{contrast.name} {signed(tested['effect'])} [{signed(tested['low'])}, {signed(tested['high'])}]"
                f" ({100 * tested['confidence']:.0f} % interval)"
            )
        where = f" on {dataset}" if len(params.datasets) > 1 else ""
        sentences.append(
            f" Its primary grid{where} is settled: {seeds_text(params, mine)}. Its pre-registered contrasts, test "
            "top-1 in points (positive: the Performer ahead of softmax, or the relative encoding moving it up), "
            "with the unadjusted intervals its report shows — no verdict yet: the report decides every claim with "
            "one Holm correction over all of them, those on the secondary variants included: " + "; ".join(parts) + "."
        )
    return "".join(sentences)


def secondary_so_far(params, found: list[dict]) -> str:
    """Sentences on the secondary variants with a finished run: seeds done and mean test top-1 each,
    then the published claims on them that ≥ 2 paired seeds let compute, with their unadjusted
    intervals (claims.evaluate_claims) and no verdict: the report decides every claim with one Holm
    correction. '' while no secondary run has finished."""
    from analysis.claims.evaluation import (
        evaluate_claims,
    )  # the modules, not the package: claims.figures draws with report
    from analysis.claims.registry import CLAIMS, TOP1
    from rpevit.core.variants import parse_variant
    from rpevit.lab.tables import signed

    design = params.design
    secondary = [parse_variant(v).name for v in design.secondary]
    mine = [r for r in results(found) if r.variant in secondary]
    if not mine:
        return ""
    many = len(params.datasets) > 1
    parts = []
    for dataset in params.datasets:
        for variant in secondary:
            top1 = [r.top1 for r in mine if r.variant == variant and r.dataset == dataset]
            if top1:
                where = f" on {dataset}" if many else ""
                parts.append(
                    f"{variant}{where} {len(top1)} of {design.secondary_seeds} seeds, mean test top-1 "
                    f"{100 * sum(top1) / len(top1):.2f} %"
                )
    text = f" Secondary variants so far, in the order they train: {'; '.join(parts)}."
    claims = [
        c
        for c in CLAIMS
        if c.measure == TOP1
        and not c.untestable
        and {parse_variant(v).name for v in c.comparison.variants} & set(secondary)
    ]
    rows = [row for row in evaluate_claims(found, claims, params.datasets) if row["seeds"] >= 2 and "effect" in row]
    if rows:
        said = []
        for row in rows:
            where = f", {row['dataset']}" if many else ""
            said.append(
                f"{row['source'].tag}, {row['claim']} ({row['comparison']}{where}) {signed(row['effect'])} "
                f"[{signed(row['low'])}, {signed(row['high'])}] over {row['seeds']} seeds "
                f"({100 * row['confidence']:.0f} % interval)"
            )
        text += (
            " Published claims on them that paired seeds let compute, test top-1 in points with unadjusted intervals "
            "and no verdict yet: " + "; ".join(said) + "."
        )
    return text


def _early_study_note(root=None, preset: str = "cpu_claims") -> str:
    """One sentence on the early-training claims study, computed from its kept records."""
    from rpevit.lab.params import load_params
    from rpevit.lab.store.catalog import study_records

    try:
        found = finished(study_records(load_params(preset), reports_root=root))
    except UserError:
        return ""
    if not found:
        return ""
    last = sum(r.best_epoch == r.epochs for r in found)
    return (
        f" The earlier claims study ([reports/{preset}/](reports/{preset}/README.md), "
        f"{found[0]['epochs']} epochs) is an early-training study: {last} of its {len(found)} runs had their best "
        "validation epoch at the last one, so it measures how fast variants start, not the converged gap."
    )


def relinked(block: str, link_prefix: str) -> str:
    """`block` with its links into reports/ made relative to a page `link_prefix` away from the root
    (docs/results.md: "../")."""
    return block.replace("](reports/", f"]({link_prefix}reports/")


def sync_findings(readme: Path, preset: str = FINDINGS_PRESET, root=None, link_prefix: str = "") -> bool:
    """Replace the Findings block of `readme` (the project's: docs/results.md, `link_prefix` "../") by
    findings_markdown(preset); True if it changed."""
    text = readme.read_text()
    start, end = text.find("<!-- findings:"), text.find(FINDINGS_END)
    if start < 0 or end < start:
        raise UserError(f"{readme} has no Findings block (<!-- findings: … --> … {FINDINGS_END}) to fill.")
    new = text[:start] + relinked(findings_markdown(preset, root), link_prefix) + text[end + len(FINDINGS_END) :]
    if new != text:
        records.write_text(readme, new)
    return new != text


def add_parser(sub) -> None:
    """The `findings` sub-command's arguments."""
    findings = sub.add_parser("findings", help="copy a report's generated answer into docs/results.md's Findings")
    findings.add_argument("params", nargs="?", default=FINDINGS_PRESET, help=f"preset whose report ({FINDINGS_PRESET})")


def command(args) -> int:
    """`python -m campaign findings`: copy a report's generated answer into the Findings of docs/results.md."""
    from rpevit.lab.params import PROJECT_ROOT

    changed = sync_findings(PROJECT_ROOT / "docs" / "results.md", args.params, link_prefix="../")
    print(f"docs/results.md Findings {'updated from' if changed else 'already match'} reports/{args.params}/")
    return 0
