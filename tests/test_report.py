"""Report outputs: tables (CSV + Markdown), figures (PNG / interactive HTML) and the index."""
from __future__ import annotations

import json
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import plotly.graph_objects as go  # noqa: E402

from rpevit.report import markdown_table, save_figure, save_table, variant_style, write_index  # noqa: E402


def test_tables_figures_and_index(tmp_path):
    rows = [{"variant": "softmax+ape", "top-1 %": 91.234}, {"variant": "favor+krpe", "top-1 %": math.nan}]
    markdown = save_table(rows, "p", "40_results", "Per-variant results", "40_results", root=tmp_path)
    assert "| softmax+ape | 91.23 |" in markdown and "| favor+krpe | — |" in markdown
    assert (tmp_path / "p" / "40_results.csv").read_text().splitlines()[1] == "softmax+ape,91.234"
    fig, axis = plt.subplots()
    axis.plot([1, 2], [3, 4])
    assert save_figure(fig, "p", "10_curves", "curves", "10_train", root=tmp_path).read_bytes()[:4] == b"\x89PNG"
    page = save_figure(go.Figure(go.Scatter(x=[1], y=[2])), "p", "10_live", "live", "10_train", root=tmp_path)
    assert page.suffix == ".html" and (tmp_path / "p" / "plotly.min.js").stat().st_size > 100_000
    (tmp_path / "p" / "10_train.ipynb").write_text("{}")
    index = write_index("p", ["10_train.ipynb", "99_missing.ipynb"], root=tmp_path).read_text()
    assert "[10_train.ipynb]" in index and "99_missing" not in index
    assert "[10_curves.png](10_curves.png) — curves (10_train)" in index
    assert "[40_results.md](40_results.md) — Per-variant results (40_results)" in index
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert manifest["10_live.html"]["kind"] == "figure"


def test_markdown_table_and_styles():
    assert markdown_table([]) == "(no rows)\n"
    softmax, favor = variant_style("softmax+rope_mixed"), variant_style("favor+rope_mixed")
    assert softmax["color"] == favor["color"] and softmax["linestyle"] != favor["linestyle"]
    assert variant_style("softmax+ape")["color"] != softmax["color"]
