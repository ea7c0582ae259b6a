"""The study notebooks and their execution into reports/<preset>/ (rpevit.notebooks).

Static checks of every notebook (stored without outputs, the declared kernel, report_dir, no CDN,
no leftovers of concurrent development), then the execution machinery on small synthetic
notebooks: only declared parameters are passed, one line per notebook, outputs tracked per
notebook, stale outputs removed, paths relative to the project, a per-cell time limit — and an
ad-hoc papermill run of a real notebook that must write nothing.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from rpevit import notebooks, records
from rpevit.notebooks import (
    KERNEL_NAME,
    NotebookFailed,
    execute_notebooks,
    list_notebooks,
    notebook_parameters,
    project_relative,
)
from rpevit.params import PROJECT_ROOT
from rpevit.report import read_manifest

NOTEBOOKS = list_notebooks()
CDN = re.compile(r"cdn\.plot\.ly|cdn\.jsdelivr|unpkg\.com|cdnjs|notebook_connected", re.IGNORECASE)


def _sources(path):
    return [(cell.cell_type, cell.source, cell.metadata) for cell in nbformat.read(str(path), as_version=4).cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_clean_and_declares_the_rpevit_kernel(path, caplog):
    nb = nbformat.read(str(path), as_version=4)
    assert nb.metadata["kernelspec"]["name"] == KERNEL_NAME
    assert nb.metadata["kernelspec"]["display_name"] == "Python (rpevit)"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "stored with outputs"
    parameters = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1
    with caplog.at_level(logging.WARNING):
        declared = notebooks.declared_parameters(path)
    assert {"name", "report_dir"} <= declared and not caplog.text  # e.g. papermill's 'Unable to parse line'
    assert re.search(r"^report_dir = None\b", parameters[0].source, re.MULTILINE)
    text = "\n".join(c.source for c in code)
    assert not CDN.search(text)
    for leftover in (
        "except Exception",
        "getattr(report",
        "run_settings",
        "rpevit.evaluate import trained_model",
        "load_dataset",
        "warnings.filterwarnings",
        "save_figure(",
        "save_table(",
    ):
        assert leftover not in text, leftover
    assert f'"{path.stem}")' in text, "the notebook names itself in its Report"


def test_kernel_named_by_readme_makefile_and_environment():
    display = "Python (rpevit)"
    assert display in (PROJECT_ROOT / "README.md").read_text()
    install = f'ipykernel install --sys-prefix --name {KERNEL_NAME} --display-name "{display}"'
    assert install in (PROJECT_ROOT / "Makefile").read_text()
    assert install in (PROJECT_ROOT / "environment.yml").read_text()


def test_only_declared_parameters_are_passed():
    path = next(p for p in NOTEBOOKS if p.stem.startswith("40"))
    passed = notebook_parameters("smoke", path, PROJECT_ROOT / "reports" / "smoke")
    assert passed == {"name": "smoke", "report_dir": "reports/smoke"}
    everything = notebook_parameters("smoke")
    assert {"name", "datasets", "variants"} <= set(everything) and "report_dir" not in everything
    assert notebook_parameters(str(PROJECT_ROOT / "params" / "smoke.yaml"), path)["name"] == "smoke"


def test_project_relative():
    assert project_relative(PROJECT_ROOT / "reports" / "smoke" / "x.ipynb") == "reports/smoke/x.ipynb"
    assert project_relative("/elsewhere/x") == "/elsewhere/x"


def _notebook(path: Path, cells: list[tuple[str, str, list[str]]]) -> None:
    nb = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": KERNEL_NAME, "display_name": "Python (rpevit)", "language": "python"}}
    )
    for kind, source, tags in cells:
        cell = nbformat.v4.new_markdown_cell(source) if kind == "md" else nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    nbformat.write(nb, str(path))


WRITER = """
import os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import plotly.graph_objects as go
from rpevit import report
rep = report.Report(report_dir, "{stem}")
rep.table([{{"a": 1.5}}], "{prefix}_table", "a table")
rep.table([], "{prefix}_empty", "an empty table")
fig, ax = plt.subplots()
ax.plot([0, 1])
rep.figure(fig, "{prefix}_figure", "a figure")
rep.figure(go.Figure(go.Scatter(x=[1], y=[1])), "{prefix}_page", "a page")
print("cwd", os.getcwd())
"""


@pytest.fixture
def synthetic(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    for stem, title in (("00_alpha", "00 · Alpha"), ("10_beta", "10 · Beta")):
        prefix = stem[:2]
        _notebook(
            folder / f"{stem}.ipynb",
            [
                ("md", f"# {title}\n\nWhat it shows.", []),
                ("code", 'name = "smoke"\nreport_dir = None\nunused = 1', ["parameters"]),
                ("code", WRITER.format(stem=stem, prefix=prefix), []),
            ],
        )
    return folder


def test_execute_notebooks_tracks_replaces_and_indexes_outputs(synthetic, tmp_path, capsys, caplog, monkeypatch):
    monkeypatch.setattr(records, "RUNS_ROOT", tmp_path / "runs")  # no smoke runs, whatever this machine trained
    reports = tmp_path / "reports"
    folder = reports / "smoke"
    folder.mkdir(parents=True)
    for name in ("summary.csv", "summary.md", "10_leftover.csv", "55_unrelated.png"):
        (folder / name).write_text("x")
    (folder / "manifest.json").write_text(
        json.dumps(
            {
                "notebooks": {
                    "00_alpha": {
                        "executed": None,
                        "outputs": [{"name": "00_old", "kind": "figure", "caption": "stale", "files": ["00_old.png"]}],
                    }
                }
            }
        )
    )
    (folder / "00_old.png").write_text("x")
    with caplog.at_level(logging.INFO):
        done = execute_notebooks("smoke", reports_root=reports, notebooks_dir=synthetic)
    printed = capsys.readouterr().out
    assert [p.name for p in done] == ["00_alpha.ipynb", "10_beta.ipynb"]
    assert re.search(r"^\[1/2\] 00_alpha → .* \d+ s$", printed, re.MULTILINE)
    assert re.search(r"^\[2/2\] 10_beta → .* \d+ s$", printed, re.MULTILINE)
    assert "Passed unknown parameter" not in caplog.text and "Unable to parse" not in caplog.text
    files = {p.name for p in folder.iterdir()}
    assert {"00_old.png", "10_leftover.csv", "55_unrelated.png", "00_empty.csv", "00_empty.md"}.isdisjoint(files)
    assert {
        "summary.csv",
        "summary.md",
        "README.md",
        "manifest.json",
        "plotly.min.js",
        "00_table.csv",
        "00_figure.png",
        "00_page.html",
        "10_table.md",
    } <= files
    manifest = read_manifest(folder)["notebooks"]
    assert sorted(manifest) == ["00_alpha", "10_beta"]
    assert [o["name"] for o in manifest["10_beta"]["outputs"]] == ["10_table", "10_figure", "10_page"]
    index = (folder / "README.md").read_text()
    assert "## [00 · Alpha](00_alpha.ipynb)" in index and index.count("00_table.csv") == 1
    assert "No finished runs yet" in index
    for executed in done:
        text = executed.read_text()
        assert str(PROJECT_ROOT) not in text and not CDN.search(text)
        nb = nbformat.reads(text, as_version=4)
        assert nb.metadata["kernelspec"]["name"] == KERNEL_NAME
        assert "unused" not in nb.metadata["papermill"]["parameters"]
        assert "cwd .\n" in "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert not CDN.search((folder / "00_page.html").read_text())

    (folder / "10_table.md").write_text("edited")
    again = execute_notebooks("smoke", only=["00"], reports_root=reports, notebooks_dir=synthetic)
    assert [p.name for p in again] == ["00_alpha.ipynb"]
    assert (folder / "10_table.md").read_text() == "edited"  # --only leaves other notebooks' outputs alone
    assert sorted(read_manifest(folder)["notebooks"]) == ["00_alpha", "10_beta"]


def test_a_cell_past_the_time_limit_is_a_clear_error(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(
        folder / "00_hang.ipynb",
        [("code", 'name = "smoke"\nreport_dir = None', ["parameters"]), ("code", "import time\ntime.sleep(60)", [])],
    )
    with pytest.raises(NotebookFailed, match=r"00_hang.ipynb: a cell ran longer than the per-cell limit of 2 s"):
        execute_notebooks("smoke", reports_root=tmp_path / "reports", notebooks_dir=folder, cell_timeout=2)


def test_an_ad_hoc_papermill_run_writes_no_report(tmp_path):
    """papermill on a real notebook (no report_dir) writes nothing: neither to $RPEVIT_REPORTS nor to reports/."""
    reports = PROJECT_ROOT / "reports"
    before = {p: p.stat().st_mtime_ns for p in reports.rglob("*")} if reports.is_dir() else {}
    notebook = next(p for p in NOTEBOOKS if p.stem.startswith("40"))
    output = tmp_path / "out.ipynb"
    env = {**os.environ, "RPEVIT_REPORTS": str(tmp_path / "reports"), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "papermill",
            "-k",
            "python3",
            "--no-progress-bar",
            str(notebook),
            str(output),
            "-p",
            "name",
            "smoke",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (tmp_path / "reports").exists()
    after = {p: p.stat().st_mtime_ns for p in reports.rglob("*")} if reports.is_dir() else {}
    assert after == before
    assert not CDN.search(output.read_text())
