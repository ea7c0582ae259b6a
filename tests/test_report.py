"""Report outputs: where figures and tables go (and when they do not), the per-notebook manifest,
stale-output removal, the index with its headline, offline plotly, and styles per variant."""

from __future__ import annotations

import json
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import plotly.graph_objects as go  # noqa: E402
import pytest  # noqa: E402

from analysis import report  # noqa: E402
from analysis.report import (  # noqa: E402
    Report,
    begin_notebook,
    headline,
    markdown_table,
    plotly_bundle,
    prune,
    read_manifest,
    store,  # noqa: E402
    variant_style,
    variant_styles,
    write_index,
)
from rpevit.core.attention import BACKENDS, SoftmaxAttention  # noqa: E402
from rpevit.core.errors import UserError  # noqa: E402
from rpevit.core.position import POSITIONS  # noqa: E402
from rpevit.core.variants import list_variants  # noqa: E402
from rpevit.lab.params import PRESETS_DIR, PROJECT_ROOT, load_params  # noqa: E402
from rpevit.lab.result import results

SEED002_GRID = [
    f"{b}+{p}" for b in ("softmax", "favor", "relu") for p in ("ape", "rope_mixed", "string_circulant", "krpe")
]


def _line_figure():
    fig, axis = plt.subplots()
    axis.plot([1, 2], [3, 4])
    return fig


def test_report_writes_figures_tables_and_manifest(tmp_path):
    rows = [{"variant": "softmax+ape", "top-1 %": 91.234}, {"variant": "favor+krpe", "top-1 %": math.nan, "note": "x"}]
    rep = Report(tmp_path / "p", "40_results")
    rep.table(rows, "40_results", "Per-variant results")
    rep.figure(_line_figure(), "40_curves", "curves")
    rep.figure(go.Figure(go.Scatter(x=[1], y=[2])), "40_live", "live")
    rep.figure(_line_figure(), "40_results", "a figure named like a table")
    rep.table(rows, "40_results", "Per-variant results")  # written again: listed once
    folder = tmp_path / "p"
    markdown = (folder / "40_results.md").read_text()
    assert "| softmax+ape | 91.23 | — |" in markdown and "| favor+krpe | — | x |" in markdown  # union of columns
    assert (folder / "40_results.csv").read_text().splitlines()[:2] == ["variant,top-1 %,note", "softmax+ape,91.234,"]
    assert (folder / "40_curves.png").read_bytes()[:4] == b"\x89PNG"
    page = (folder / "40_live.html").read_text()
    assert 'src="plotly.min.js"' in page and "cdn" not in page.lower()
    assert (folder / "plotly.min.js").stat().st_size > 100_000
    outputs = read_manifest(folder)["notebooks"]["40_results"]["outputs"]
    assert [(o["name"], o["kind"], o["files"]) for o in outputs] == [
        ("40_curves", "figure", ["40_curves.png"]),
        ("40_live", "figure", ["40_live.html"]),
        ("40_results", "figure", ["40_results.png"]),
        ("40_results", "table", ["40_results.md", "40_results.csv"]),
    ]


def test_without_a_folder_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RPEVIT_REPORTS", str(tmp_path / "reports"))
    rep = Report(None, "40_results")
    rep.table([{"a": 1}], "40_results", "caption")
    rep.figure(_line_figure(), "40_curves", "curves")
    rep.figure(go.Figure(), "40_live", "live")
    assert not rep.writes and list(tmp_path.iterdir()) == []


def test_a_show_only_execution_clears_its_old_outputs_and_writes_none(tmp_path):
    Report(tmp_path, "35_gap_pilots").table([{"a": 1}], "35_gap_pilots", "written by an earlier execution")
    assert (tmp_path / "35_gap_pilots.csv").is_file()
    rep = Report(tmp_path, "35_gap_pilots", show_only=True)
    rep.table([{"a": 2}], "35_gap_pilots", "shown only")
    rep.figure(_line_figure(), "35_curves", "shown only")
    assert not rep.writes and sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]
    assert read_manifest(tmp_path)["notebooks"]["35_gap_pilots"]["outputs"] == []


def test_empty_table_is_not_written(tmp_path):
    rep = Report(tmp_path, "40_results")
    rep.table([], "40_results", "Per-variant results")
    assert not (tmp_path / "40_results.csv").exists() and not (tmp_path / "40_results.md").exists()
    assert read_manifest(tmp_path)["notebooks"]["40_results"]["outputs"] == []
    assert markdown_table([]) == "(no runs yet)\n" and markdown_table([], empty="nothing") == "(nothing)\n"


def test_a_new_execution_replaces_the_notebooks_previous_outputs_only(tmp_path):
    old = Report(tmp_path, "30_maps")
    old.figure(_line_figure(), "30_map_relu_ape", "a variant that is no longer in the grid")
    other = Report(tmp_path, "40_results")
    other.table([{"a": 1}], "40_results", "kept: another notebook's output")
    for name in ("summary.csv", "summary.md", "30_leftover.png", "40_untracked.md"):
        (tmp_path / name).write_text("x")
    removed = begin_notebook(tmp_path, "30_maps")
    assert sorted(removed) == ["30_leftover.png", "30_map_relu_ape.png"]
    assert (tmp_path / "40_results.csv").is_file() and (tmp_path / "summary.csv").is_file()
    assert (tmp_path / "40_untracked.md").is_file()  # another notebook's prefix: only a whole run prunes it
    assert read_manifest(tmp_path)["notebooks"]["30_maps"]["outputs"] == []
    (tmp_path / "30_maps.ipynb").write_text("{}")
    (tmp_path / "99_gone.ipynb").write_text("{}")
    assert sorted(prune(tmp_path, ["30_maps", "40_results"])) == ["40_untracked.md", "99_gone.ipynb"]
    assert {p.name for p in tmp_path.iterdir()} == {
        "30_maps.ipynb",
        "40_results.csv",
        "40_results.md",
        "manifest.json",
        "summary.csv",
        "summary.md",
    }


def test_legacy_flat_manifest_is_read_per_notebook(tmp_path):
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {
                "40_results.csv": {"caption": "c", "notebook": "40_results", "kind": "table"},
                "40_results.md": {"caption": "c", "notebook": "40_results", "kind": "table"},
                "10_curves.png": {"caption": "f", "notebook": "10_train", "kind": "figure"},
            }
        )
    )
    notebooks = read_manifest(tmp_path)["notebooks"]
    assert notebooks["40_results"]["outputs"] == [
        {"name": "40_results", "kind": "table", "caption": "c", "files": ["40_results.csv", "40_results.md"]}
    ]
    assert notebooks["10_train"]["outputs"][0]["files"] == ["10_curves.png"]


def _record(variant, seed, top1, dataset="mnist5k"):
    return {
        "dataset": dataset,
        "variant": variant,
        "seed": seed,
        "status": "finished",
        "top1": top1,
        "device": "cpu",
        "device_name": "x86_64",
        "finished_at": f"2025-01-0{seed + 1}T10:00:00+0000",
    }


def test_headline_best_per_backend_gap_interval_date_and_device():
    found = [
        _record("softmax+ape", 0, 0.90),
        _record("softmax+ape", 1, 0.92),
        _record("softmax+krpe", 0, 0.80),
        _record("softmax+krpe", 1, 0.82),
        _record("favor+krpe", 0, 0.85),
        _record("favor+krpe", 1, 0.86),
        _record("relu+ape", 0, 0.70),
        _record("relu+ape", 1, 0.75),
        {"dataset": "mnist5k", "variant": "relu+krpe", "seed": 0, "status": "diverged"},
    ]
    text = "\n".join(headline(found))
    assert "softmax: `softmax+ape` 91.0% (mean of 2 seeds)" in text
    assert "favor: `favor+krpe` 85.5%" in text and "relu: `relu+ape` 72.5%" in text
    assert "best Performer `favor+krpe` − best softmax `softmax+ape`: −5.5 points (the Performer behind)" in text
    assert "95% t-interval over 2 paired seeds" in text or "2 paired seeds" in text
    assert "8 finished runs, trained 2025-01-01 … 2025-01-02 on x86_64" in text
    one_seed = "\n".join(headline([_record("softmax+ape", 0, 0.9), _record("favor+ape", 0, 0.8)]))
    assert "one seed, so no interval" in one_seed
    assert "No finished runs yet" in headline([])[0]
    designed = "\n".join(headline(found, designed=True))  # a pre-registered study picks no best variant
    assert "best test top-1 per backend" not in designed and "best Performer" not in designed
    assert "its pre-registered contrasts" in designed and "8 finished runs" in designed


def test_index_opens_with_headline_and_lists_each_output_once_by_notebook(tmp_path):
    folder = tmp_path / "p"
    rep = Report(folder, "40_results")
    rep.table([{"a": 1.0}], "40_results", "Per-variant results")
    rep.figure(_line_figure(), "40_curves", "Accuracy vs cost")
    Report(folder, "00_checks").table([{"b": 2}], "00_summary", "Every check")
    for notebook, title in (("00_checks", "00 · Checks"), ("40_results", "40 · Results")):
        (folder / f"{notebook}.ipynb").write_text(
            json.dumps({"cells": [{"cell_type": "markdown", "source": [f"# {title}\n", "text"]}]})
        )
    (folder / "summary.md").write_text("x")
    index = write_index(
        "p",
        ["00_checks.ipynb", "40_results.ipynb", "99_missing.ipynb"],
        root=tmp_path,
        found=[_record("softmax+ape", 0, 0.9), _record("favor+ape", 0, 0.8)],
    ).read_text()
    headline_at, guide_at = index.index("## Headline"), index.index("## Guide")
    checks_at, results_at = index.index("## [00 · Checks](00_checks.ipynb)"), index.index("## [40 · Results]")
    assert headline_at < guide_at < checks_at < results_at and "99_missing" not in index
    assert "45_variants" not in index  # no per-variant table written: no link to it
    (folder / "45_variants.md").write_text("x")
    linked = write_index("p", ["00_checks.ipynb"], root=tmp_path, found=[_record("softmax+ape", 0, 0.9)]).read_text()
    headline_part = linked[linked.index("## Headline") : linked.index("## Guide")]
    assert "with its 95 % interval over seeds: [45_variants](45_variants.md)." in headline_part
    assert index.count("40_results.md") == 1 and index.count("40_results.csv") == 1
    assert "- table **40_results** ([md](40_results.md) · [csv](40_results.csv)) — Per-variant results" in index
    assert "- figure **40_curves** ([png](40_curves.png)) — Accuracy vs cost" in index
    assert checks_at < index.index("00_summary") < results_at
    assert "[summary.md](summary.md)" in index and "−10.0 points (the Performer behind)" in index


def test_plotly_bundle_is_offline():
    bundle = plotly_bundle(go.Figure(go.Scatter(x=[1, 2], y=[3, 4]), layout={"height": 300}))
    assert set(bundle) == {"application/vnd.plotly.v1+json", "text/html"}
    assert bundle["application/vnd.plotly.v1+json"]["data"][0]["x"] == [1, 2]
    html = bundle["text/html"]
    assert 'script.src = "plotly.min.js"' in html and "height:300px" in html
    assert "cdn" not in html.lower() and "https://" not in html


def test_styles_distinct_for_the_seed002_grid_and_every_preset():
    styles = variant_styles(SEED002_GRID)
    assert len({tuple(s.values()) for s in styles.values()}) == 12
    assert len({s["color"] for s in styles.values()}) == 4  # colour = positions
    assert len({(s["marker"], s["linestyle"]) for s in styles.values()}) == 3  # marker, line = backend
    assert styles["softmax+krpe"]["color"] == styles["relu+krpe"]["color"]
    assert styles["softmax+krpe"]["marker"] == styles["softmax+ape"]["marker"]
    for preset in sorted(PRESETS_DIR.rglob("*.yaml")):
        variants = load_params(preset).variants
        looks = [tuple(map(str, variant_style(v).values())) for v in variants]
        assert len(set(looks)) == len(variants), f"{preset.name}: two variants look alike"


def test_a_variant_looks_the_same_in_every_figure():
    """Issue 22: alibi2d was green in one notebook and orange in another, because colours were handed
    out among the variants of each figure. A variant's look depends on the variant alone."""
    alone = variant_style("softmax+alibi2d")
    assert variant_styles(["softmax+alibi2d", "favor+ape"])["softmax+alibi2d"] == alone
    assert variant_styles(list_variants())["softmax+alibi2d"] == alone
    assert variant_style("favor+rope_axial")["color"] == variant_style("softmax+rope_axial")["color"]
    # colour from the fixed list ("none", *POSITIONS); marker and line from BACKENDS
    for index, method in enumerate(["none", *POSITIONS]):
        assert report.method_colour(method) == report.METHOD_COLOURS[index]
    assert len(set(report.METHOD_COLOURS)) == len(report.METHOD_COLOURS) == len(POSITIONS) + 1
    assert [variant_style(f"{b}+ape")["marker"] for b in BACKENDS] == ["o", "s", "^", "D"]
    # an added method keeps the leading method's colour and marker, hollow
    added, plain = variant_style("favor+rope_mixed+ape"), variant_style("favor+rope_mixed")
    assert added["color"] == plain["color"] and added["marker"] == plain["marker"]
    assert added["markerfacecolor"] == "white" != plain["markerfacecolor"]
    assert report.plotly_style(added)["marker"]["symbol"] == "square-open"
    assert report.plotly_style(plain)["marker"] == {"color": plain["color"], "symbol": "square"}


def test_styles_follow_the_backend_registry(monkeypatch):
    monkeypatch.setitem(BACKENDS, "toy", SoftmaxAttention)
    styles = variant_styles(SEED002_GRID + ["toy+ape"])
    assert styles["toy+ape"]["marker"] not in {styles[v]["marker"] for v in SEED002_GRID}
    assert styles["toy+ape"]["color"] == styles["softmax+ape"]["color"]


def test_plotly_style_and_encoding_legend():
    style = report.plotly_style(variant_styles(SEED002_GRID)["favor+krpe"])
    assert style["marker"]["symbol"] == "square" and style["line"]["dash"] == "dash"
    assert style["marker"]["color"].startswith("#")
    fig, axis = plt.subplots()
    legend = report.encoding_legend(axis, SEED002_GRID + ["favor+rope_mixed+ape"])
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == ["ape", "krpe", "rope_mixed", "string_circulant", "softmax", "favor", "relu", "hollow: + ape"]
    assert "colour" in legend.get_title().get_text()
    every = report.variant_legend(axis, ["softmax+ape", "favor+ape", "relu+ape"])
    assert [t.get_text() for t in every.get_texts()] == ["softmax+ape", "favor+ape", "relu+ape"]
    assert [h.get_marker() for h in every.legend_handles] == ["o", "s", "^"]
    plt.close(fig)


def test_report_directory_relative_to_the_project(monkeypatch, tmp_path):
    monkeypatch.setattr(store, "PROJECT_ROOT", tmp_path)
    rep = Report("reports/p", "10_train")
    assert rep.directory == tmp_path / "reports" / "p" and (tmp_path / "reports" / "p" / "manifest.json").is_file()


def test_methods_registered_later_get_distinct_colours(monkeypatch):
    from analysis.styles import _colour

    colours = [_colour(i) for i in range(40)]
    assert len(set(colours)) == 40 and all(c.startswith("#") for c in colours)


def test_plain_log_ticks():
    fig, axis = plt.subplots()
    axis.loglog([1, 300], [2, 300])
    report.plain_log_ticks(axis)
    fig.canvas.draw()
    labels = {t.get_text() for t in axis.get_yticklabels(minor=False) + axis.get_yticklabels(minor=True)}
    assert {"10", "100", "20", "50"} <= labels and not any("times" in label or "^" in label for label in labels)
    plt.close(fig)


def test_generated_texts_head_the_index_and_fill_the_readme_findings(tmp_path):
    folder = tmp_path / "p"
    Report(folder, "45_claims").text("- **seed 001**: 1 supported.", "45_answer", "The answer")
    (folder / "45_claims.ipynb").write_text(json.dumps({"cells": []}))
    index = write_index("p", ["45_claims.ipynb"], root=tmp_path).read_text()
    assert index.index("### The answer") < index.index("## Guide") and "- **seed 001**: 1 supported." in index
    assert "- text **45_answer** ([md](45_answer.md))" in index

    from campaign import findings

    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Findings\n\n<!-- findings: old -->\nstale\n<!-- /findings -->\n\n## Next\n")
    assert findings.sync_findings(readme, "p", root=tmp_path)
    text = readme.read_text()
    assert "stale" not in text and "- **seed 001**: 1 supported." in text and text.endswith("## Next\n")
    assert "[45_answer.md](reports/p/45_answer.md)" in text
    assert not findings.sync_findings(readme, "p", root=tmp_path)  # idempotent
    readme.write_text("# no block\n")
    with pytest.raises(UserError, match="no Findings block"):
        findings.sync_findings(readme, "p", root=tmp_path)
    with pytest.raises(UserError, match="no generated texts"):
        findings.findings_markdown("empty", root=tmp_path)


def test_results_page_findings_are_the_committed_claims_report():
    """docs/results.md's Findings say what the converged study's report (or, while it trains, its kept
    records) computed, word for word (refresh with `python -m campaign findings`)."""
    from campaign.findings import findings_markdown, relinked

    page = (PROJECT_ROOT / "docs" / "results.md").read_text()
    assert relinked(findings_markdown(), "../") in page


def test_study_status_counts_complete_primary_seeds_and_each_budget(monkeypatch):
    from analysis import convergence
    from campaign import findings
    from rpevit.lab.store import catalog

    params = load_params("fmnist_converged")

    def run(variant, seed, hours):
        return {
            "dataset": "fashion_mnist",
            "variant": variant,
            "seed": seed,
            "status": "finished",
            "top1": 0.9,
            "train_seconds_per_epoch": 3600 * hours / 26,
            "epochs": 26,
        }

    runs = [run(v, s, 1.0) for s in (1, 2) for v in params.design.primary] + [run("softmax+ape", 3, 0.5)]
    runs.append(run("softmax+krpe", 1, 2.0))
    runs[7]["top1"] = 0.905  # favor+ape seed 2: the FAVOR+ gap with APE is 0 and +0.5 points at 26 epochs
    checked = [{**r, "epochs": 52} for r in (runs[0], runs[6])]  # the longer-budget check's: seeds 1 and 2
    checked.append({**runs[1], "epochs": 52, "top1": 0.91})  # favor+ape seed 1: that gap moves +1 point
    monkeypatch.setattr(
        catalog,
        "study_records",
        lambda params, reports_root=None: results(runs if params.name == "fmnist_converged" else checked),
    )
    flat, rising = [0.90] * 10, [0.80 + 0.01 * e for e in range(10)]  # a plateau; still gaining
    monkeypatch.setattr(
        convergence, "run_history", lambda run: [{"val_acc": v} for v in (flat if run.seed == 1 else rising)]
    )
    text = findings.study_status("fmnist_converged")
    assert "So far 7 of 14 finished runs meet the plateau rule" in text  # the seed-1 runs have a flat history
    assert "the Performer–softmax gap at the study's 26-epoch budget" in text
    assert "13 primary runs finished, 2 complete primary seeds (6 variants × 3–10 seeds" in text
    assert "1 secondary run, of at most 102 runs" in text
    assert (
        "Secondary variants so far, in the order they train: softmax+krpe 1 of 3 seeds, mean test top-1 90.00 %."
        in (text)
    )
    assert "Published claims on them" not in text  # one seed: nothing paired to compute
    assert "12.5 of the primary budget's 40 training hours and 2.0 of the secondary budget's 45 spent" in text
    assert (
        "Its longer-budget check `fmnist_plateau_check` (the primary variants at 52 epochs, trained before the "
        "secondary ones): 3 of 12 runs finished, 2 of them meeting the plateau rule. By its pre-registered "
        "reading: Of 1 contrast with paired seeds, 0 moved by more than the study's 95 % half-width when training "
        "ran 52 epochs, and 1 held. Descriptive: the check has 1 paired seed, too few to test a change on its own."
        in text
    )  # +1 point is inside the study's half-width over seeds 1-2 (12.7 · 0.35 / √2 = 3.2 points)
    runs[7]["top1"] = 0.9  # now both seeds' gap is 0 at 26 epochs: its half-width is 0, and +1 point moved it
    assert "0 moved" not in findings.study_status("fmnist_converged")
    assert "1 moved by more than the study's 95 % half-width when training ran 52 epochs (FAVOR+ gap with APE " in (
        findings.study_status("fmnist_converged")
    )
    assert "collapsed" not in findings.study_status("fmnist_converged")
    collapsing = [0.85, 0.50, 0.10]  # to chance with a finite loss, as favor+gate_string+ape seed 1 did
    monkeypatch.setattr(
        convergence,
        "run_history",
        lambda run: [{"val_acc": v} for v in (collapsing if run.variant == "softmax+krpe" else flat)],
    )
    text = findings.study_status("fmnist_converged")
    assert "So far 13 of 14 finished runs meet the plateau rule" in text  # the collapsed run does not
    assert " 1 run collapsed (validation top-1 falling from the run's best toward chance" in text
    assert "softmax+krpe seed 1 (best epoch 1)." in text


def test_secondary_claims_show_once_two_seeds_pair_them():
    from campaign import findings

    params = load_params("fmnist_converged")

    def run(variant, seed, correct):
        return {"dataset": "fashion_mnist", "variant": variant, "seed": seed, "status": "finished",
                "top1": correct.count("1") / len(correct), "test_correct": correct}  # fmt: skip

    found = [run("softmax+krpe", 1, "1111111100"), run("softmax+krpe", 2, "1111111100")]
    found += [run("favor+krpe", 1, "1111111110"), run("favor+krpe", 2, "1111111111")]
    text = findings.secondary_so_far(params, found)
    assert text.startswith(
        " Secondary variants so far, in the order they train: softmax+krpe 2 of 3 seeds, mean test top-1 80.00 %; "
        "favor+krpe 2 of 3 seeds, mean test top-1 95.00 %."
    )
    # per seed +10 and +20 points: mean +15, 90 % t-interval (the equivalence test's) ± 6.314 · 7.07 / √2
    assert (
        "seed 002, favor matches softmax with krpe (favor+krpe − softmax+krpe) +15.00 [−16.57, +46.57] over 2 seeds "
        "(90 % interval)." in text
    )
    assert "relu" not in text  # relu+krpe has no run: its claim is not computed
    assert findings.secondary_so_far(params, found[:0]) == ""


def test_the_speed_figure_draws_each_backend_in_its_variants_look():
    """As every other figure: colour by leading method (APE), marker and line style by backend."""
    from matplotlib.colors import to_hex

    from analysis.claims import TIME_X, time_ratio_figure
    from analysis.report import variant_style

    rows = [
        {"backend": b, "tokens": t, TIME_X: 1.5, "low": 1.2, "high": 1.8} for b in ("relu", "favor") for t in (16, 64)
    ]
    fig = time_ratio_figure(rows)  # relu drawn first: its look is still relu+ape's, not the first in a cycle
    drawn = {bars.get_label(): bars.lines[0] for bars in fig.axes[0].containers}
    assert set(drawn) == {"favor+ape", "relu+ape"}
    for label, line in drawn.items():
        style = variant_style(label)
        assert to_hex(line.get_color()) == to_hex(style["color"]) and line.get_marker() == style["marker"]
        assert line.get_linestyle() == style["linestyle"] or style["linestyle"] not in ("-", "--", ":", "-.")
    plt.close(fig)
