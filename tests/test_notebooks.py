"""The study notebooks and their execution into reports/<preset>/ (rpevit.report.notebooks).

Static checks of every notebook (stored without outputs, nbval's references kept apart; the declared kernel,
report_dir, no CDN, no leftovers of concurrent development, its parameters checked right after its
parameters cell), then the execution machinery on small synthetic notebooks: only declared parameters
are passed, one line per notebook, outputs tracked per notebook, stale outputs removed, paths relative to the
project, a per-cell time limit — and ad-hoc papermill runs of a real notebook: one that must write
nothing, and a misspelled parameter or an unknown preset that must stop it with one line.
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

from analysis.report import read_manifest
from rpevit.core.errors import UserError
from rpevit.lab.params import PROJECT_ROOT
from rpevit.report import notebooks
from rpevit.report.notebooks import (
    DEVICES,
    KERNEL_NAME,
    NotebookFailed,
    assignments,
    check_passed,
    execute_notebooks,
    list_notebooks,
    notebook_parameters,
    parameter_defaults,
    project_relative,
    run_parameters,
    validate_parameters,
)

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
        "rpevit.lab.training.evaluate import trained_model",
        "load_dataset",
        "warnings.filterwarnings",
        "save_figure(",
        "save_table(",
    ):
        assert leftover not in text, leftover
    assert re.search(rf'"{path.stem}"[,)]', text), "the notebook names itself in its Report"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_checks_its_parameters_before_any_work(path):
    cells = nbformat.read(str(path), as_version=4).cells
    index = next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
    defaults = assignments(cells[index].source)
    assert defaults and set(defaults) == notebooks.declared_parameters(path)
    assert all(value is not notebooks._NOT_LITERAL for value in defaults.values()), "a default that is no literal"
    assert parameter_defaults(path) == defaults
    check = cells[index + 1]
    assert check.cell_type == "code" and "check_parameters(globals()" in check.source
    choices = re.search(r"check_parameters\(globals\(\)(.*)\)", check.source).group(1)
    assert "device=DEVICES" in choices or "device" not in defaults  # every device parameter has its choices


@pytest.mark.parametrize(
    "strict,verdicts,raises",
    [(None, ["PASS", "FAIL"], True), (None, ["PASS", "PASS"], False), (False, ["PASS", "FAIL"], False)],
    ids=["default-fails", "default-passes", "strict-off"],
)
def test_derivation_checks_raise_on_a_failed_check_by_default(strict, verdicts, raises, capsys):
    """00_derivation_checks' final cell, run on its parameters cell's defaults and a planted summary: a failed
    check raises (strict defaults to True, so nbval and report runs fail), strict = False only reports it."""
    import types

    path = next(p for p in NOTEBOOKS if p.stem == "00_derivation_checks")
    cells = [c for c in nbformat.read(str(path), as_version=4).cells if c.cell_type == "code"]
    scope = {}
    exec(next(c.source for c in cells if "parameters" in c.metadata.get("tags", [])), scope)
    assert scope["strict"] is True
    if strict is not None:
        scope["strict"] = strict
    summary = [
        {"check": "(d) FFT path == dense", "case": f"case {i}", "worst": 1.0, "verdict": v}
        for i, v in enumerate(verdicts)
    ]
    scope.update(summary=summary, rep=types.SimpleNamespace(table=lambda *a: None), started=0.0)
    exec("import time", scope)
    if raises:
        with pytest.raises(AssertionError, match="^1 derivation checks failed$"):
            exec(cells[-1].source, scope)
    else:
        exec(cells[-1].source, scope)
    assert ("Failed: (d) FFT path == dense [case 1]" in capsys.readouterr().out) == ("FAIL" in verdicts)


def test_run_parameters_reads_the_input_history():
    params, check = 'name = "smoke"\nreport_dir = None\nsteps = 2', "check_parameters(globals())"
    injected = '# Parameters\npreset = "cpu_claims"\nname = "x"\n'
    defaults = {"name": "smoke", "report_dir": None, "steps": 2}
    assert run_parameters(["", params, injected, check]) == (defaults, {"preset", "name"})  # papermill
    assert run_parameters(["", params, check]) == (defaults, set())  # Lab, in order
    assert run_parameters(["", params, "import os\nprint(os.getcwd())", check]) == (defaults, set())  # re-run
    assert run_parameters(["", check]) == ({}, set()) and run_parameters([]) == ({}, set())
    assert assignments("x = 1\nprint(x)") is None and assignments("x = (") is None
    assert assignments("a = [1, 2]\nb: float = -0.5\nc = f(1)")["c"] is notebooks._NOT_LITERAL


DEFAULTS = {"name": "smoke", "report_dir": None, "steps": 2, "scale": 0.5, "strict": False, "sides": [8, 16]}


@pytest.mark.parametrize(
    "values, given, message",
    [
        (
            {"preset": "cpu_claims"},
            ["preset"],
            r"unknown notebook parameter 'preset'; this notebook's parameters: "
            r"name, report_dir, steps, scale, strict, sides \(the preset is `name`\)\.$",
        ),
        ({"step": 3}, ["step"], r"unknown notebook parameter 'step' \(did you mean 'steps'\?\)"),
        ({"steps": "many"}, ["steps"], r"steps = 'many' is not valid; expected an integer like the default 2\.$"),
        ({"steps": True}, [], r"steps = True is not valid; expected an integer"),
        ({"strict": 1}, [], r"strict = 1 is not valid; expected True or False"),
        ({"sides": "[4, 8]"}, [], r"sides = '\[4, 8\]' is not valid; expected a list like \[8, 16\] \(papermill: -y"),
        ({"sides": [4.5]}, [], r"sides = \[4.5\] is not valid"),
        ({"device": "gpu"}, [], r"device = 'gpu' is not valid; choose from 'auto', 'cpu', 'cuda'\.$"),
        (
            {"name": "cpu_claimz"},
            [],
            r"name = 'cpu_claimz': no preset file 'cpu_claimz'; available presets: .*cpu_claims",
        ),
    ],
)
def test_validate_parameters_names_what_is_wrong_and_what_is_allowed(values, given, message):
    with pytest.raises(UserError, match=message):
        validate_parameters(DEFAULTS, values, given, {"device": DEVICES})


def test_validate_parameters_accepts_what_the_defaults_allow():
    good = {"name": "cpu_claims", "report_dir": "reports/x", "steps": 3, "scale": 1, "strict": True, "sides": [4]}
    validate_parameters(DEFAULTS, {**good, "device": "cpu"}, list(good), {"device": DEVICES})
    validate_parameters({}, {"whatever": 1}, ["whatever"])  # no parameters cell found: nothing to compare with


def test_kernel_named_by_readme_makefile_and_environment():
    display = "Python (rpevit)"
    assert display in (PROJECT_ROOT / "README.md").read_text()
    install = f'ipykernel install --sys-prefix --name {KERNEL_NAME} --display-name "{display}"'
    assert install in (PROJECT_ROOT / "scripts" / "setup_lab.sh").read_text()
    # both install routes run the one setup script: kernel, save hook and git filter agree
    assert "bash scripts/setup_lab.sh $(PY)" in (PROJECT_ROOT / "Makefile").read_text()
    assert "bash scripts/setup_lab.sh python" in (PROJECT_ROOT / "environment.yml").read_text()


def test_only_declared_parameters_are_passed():
    path = next(p for p in NOTEBOOKS if p.stem.startswith("40"))
    passed = notebook_parameters("smoke", path, PROJECT_ROOT / "reports" / "smoke")
    assert passed == {"name": "smoke", "report_dir": "reports/smoke"}
    everything = notebook_parameters("smoke")
    assert {"name", "datasets", "variants"} <= set(everything) and "report_dir" not in everything
    assert notebook_parameters(str(PROJECT_ROOT / "params" / "smoke.yaml"), path)["name"] == "smoke"


def test_no_train_reaches_only_the_training_notebook():
    training = next(p for p in NOTEBOOKS if p.stem.startswith("10"))
    results = next(p for p in NOTEBOOKS if p.stem.startswith("40"))
    assert "train_missing" not in notebook_parameters("smoke", training)  # its default (True) trains
    assert notebook_parameters("smoke", training, train=False)["train_missing"] is False
    assert "train_missing" not in notebook_parameters("smoke", results, train=False)
    check_passed(training, notebook_parameters("smoke", training, train=False))  # a value its cell accepts
    with pytest.raises(UserError, match="train_missing"):
        check_passed(training, {"name": "smoke", "train_missing": "no"})


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
from analysis import report
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
                ("code", "from rpevit.report.notebooks import check_parameters\ncheck_parameters(globals())", []),
                ("code", WRITER.format(stem=stem, prefix=prefix), []),
            ],
        )
    return folder


def test_execute_notebooks_tracks_replaces_and_indexes_outputs(synthetic, tmp_path, capsys, caplog, monkeypatch):
    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))  # no smoke runs, whatever this machine trained
    reports = tmp_path / "reports"
    monkeypatch.setenv("RPEVIT_REPORTS", str(reports))  # nor the smoke records the repository keeps
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


def test_a_gap_pilot_s_readme_stays_its_report(synthetic, tmp_path, monkeypatch):
    """`notebooks <gap pilot>` (also `make study PRESET=<pilot>`) ends with the pilot's pre-registered
    report as its README, naming the executed notebooks, not with the generic index."""
    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))
    reports = tmp_path / "reports"
    execute_notebooks("canvas_gap_pilot", only=["00"], reports_root=reports, notebooks_dir=synthetic)
    readme = (reports / "canvas_gap_pilot" / "README.md").read_text()
    assert readme.startswith("# canvas_gap_pilot: the gap pilot") and "Go/no-go" in readme
    assert "Executed notebooks in this folder (`python -m rpevit notebooks canvas_gap_pilot`): " in readme
    assert "[00_alpha](00_alpha.ipynb)" in readme


def test_a_cell_past_the_time_limit_is_a_clear_error(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(
        folder / "00_hang.ipynb",
        [("code", 'name = "smoke"\nreport_dir = None', ["parameters"]), ("code", "import time\ntime.sleep(60)", [])],
    )
    with pytest.raises(NotebookFailed, match=r"00_hang.ipynb: a cell ran longer than the per-cell limit of 2 s"):
        execute_notebooks("smoke", reports_root=tmp_path / "reports", notebooks_dir=folder, cell_timeout=2)


def _papermill(notebook: Path, output: Path, *parameters: str) -> subprocess.CompletedProcess:
    """papermill by hand, as a user runs it (reports and runs redirected into output's folder)."""
    folder = output.parent
    env = {
        **os.environ,
        "RPEVIT_REPORTS": str(folder / "reports"),
        "RPEVIT_RUNS": str(folder / "runs"),
        "OMP_NUM_THREADS": "1",
    }
    command = [sys.executable, "-m", "papermill", "-k", "python3", "--no-progress-bar", str(notebook), str(output)]
    return subprocess.run([*command, *parameters], cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def test_an_ad_hoc_papermill_run_writes_no_report(tmp_path):
    """papermill on a real notebook (no report_dir) writes nothing: neither to $RPEVIT_REPORTS nor to reports/."""
    reports = PROJECT_ROOT / "reports"
    before = {p: p.stat().st_mtime_ns for p in reports.rglob("*")} if reports.is_dir() else {}
    notebook = next(p for p in NOTEBOOKS if p.stem.startswith("40"))
    output = tmp_path / "out.ipynb"
    result = _papermill(notebook, output, "-p", "name", "smoke")
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (tmp_path / "reports").exists()
    after = {p: p.stat().st_mtime_ns for p in reports.rglob("*")} if reports.is_dir() else {}
    assert after == before
    assert not CDN.search(output.read_text())


@pytest.mark.parametrize(
    "parameters, line",
    [
        (
            ["-p", "preset", "cpu_claims"],
            "UserError: unknown notebook parameter 'preset'; this notebook's parameters: name, report_dir, "
            "n_resamples, speed_batches, speed_batch_size, device (the preset is `name`).",
        ),
        (
            ["-p", "name", "cpu_claimz"],
            "UserError: notebook parameter name = 'cpu_claimz': no preset file 'cpu_claimz'",
        ),
        (["-p", "device", "gpu"], "UserError: notebook parameter device = 'gpu' is not valid; choose from"),
    ],
    ids=["unknown-name", "unknown-preset", "bad-choice"],
)
def test_papermill_with_a_wrong_parameter_stops_before_any_work(tmp_path, parameters, line):
    """The issue's case (`-p preset cpu_claims` used to warn and run smoke): one UserError line in
    papermill's report, exit status 1, nothing run after the check cell, nothing written."""
    notebook = next(p for p in NOTEBOOKS if p.stem.startswith("45"))
    output = tmp_path / "out.ipynb"
    result = _papermill(notebook, output, *parameters)
    assert result.returncode == 1
    errors = [text for text in result.stderr.splitlines() if text.startswith("UserError")]
    assert len(errors) == 1 and errors[0].startswith(line), result.stderr[-3000:]
    assert "Traceback" not in result.stderr.split("PapermillExecutionError")[-1]  # no kernel traceback
    executed = nbformat.read(str(output), as_version=4)
    counts = [c.execution_count for c in executed.cells if c.cell_type == "code"]
    assert counts[-1] is None and counts.count(None) == len(counts) - 3  # parameters, injected, the check
    assert not (tmp_path / "reports").exists() and not (tmp_path / "runs").exists()


def test_the_runner_checks_what_it_passes_before_starting_papermill(tmp_path, monkeypatch):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    # the smoke preset's `seeds: [0]` goes to a notebook that declares a number
    _notebook(folder / "00_seeds.ipynb", [("code", 'name = "smoke"\nreport_dir = None\nseeds = 3', ["parameters"])])
    started = []
    monkeypatch.setattr(notebooks, "execute_notebook", lambda *a, **k: started.append(a))
    with pytest.raises(
        UserError, match=r"^00_seeds.ipynb: notebook parameter seeds = \[0\] is not valid; expected an integer"
    ):
        execute_notebooks("smoke", reports_root=tmp_path / "reports", notebooks_dir=folder)
    assert not started and not (tmp_path / "reports").exists()


def test_the_runner_reports_an_unknown_preset_in_one_line(tmp_path):
    env = {**os.environ, "RPEVIT_REPORTS": str(tmp_path / "reports"), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "rpevit", "notebooks", "cpu_claimz", "--only", "45"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and not result.stdout
    assert re.fullmatch(r"error: no preset file 'cpu_claimz'; available presets: .*cpu_claims.*\n", result.stderr)
    assert not (tmp_path / "reports").exists()


def test_the_notebooks_that_need_images_are_those_that_inspect_runs():
    """NEEDS_IMAGES lists exactly the notebooks whose code reads test images (`inspection`)."""
    reading = {p.stem for p in list_notebooks() if "inspection." in p.read_text()}
    assert reading == set(notebooks.NEEDS_IMAGES)


def test_a_dataset_without_files_keeps_the_image_notebooks_outputs_and_says_so(monkeypatch, capsys):
    """`notebooks fmnist_converged --no-train` without Fashion-MNIST once deleted 24 committed files: now the
    notebooks that need its images are not re-run, with one warning line naming the install command."""
    from rpevit.core import data
    from rpevit.lab.params import load_params

    params, chosen = load_params("fmnist_converged"), list_notebooks()
    assert notebooks.held_back_without_images(params, chosen) == chosen or not data.files_found("fashion_mnist")
    capsys.readouterr()
    monkeypatch.setattr(data, "files_found", lambda name, root=None: name == "mnist5k")
    kept = notebooks.held_back_without_images(params, chosen)
    assert [p.stem for p in chosen if p not in kept] == ["30_attention_maps", "90_explorer"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: fashion_mnist is not on this machine")
    assert "apt-get install dataset-fashion-mnist" in err[0]
    assert notebooks.held_back_without_images(load_params("smoke"), chosen) == chosen  # mnist5k: no files needed


def test_results_notebooks_open_on_a_study_with_numbers(monkeypatch):
    """40 and 45 store `name = None`: opened as stored they show smoke once its runs are here, else the study
    that holds the answer (fmnist_converged, from its kept records); papermill's name still chooses."""
    from rpevit.lab.result import Result
    from rpevit.lab.store import catalog

    for stem in ("40_results", "45_claims"):
        assert parameter_defaults(next(p for p in NOTEBOOKS if p.stem == stem))["name"] is None
    monkeypatch.setattr(catalog, "study_records", lambda params, **kw: [])
    assert notebooks.opened_study() == "fmnist_converged"
    space = {"name": None, "report_dir": None, "In": ["", "name = None\nreport_dir = None", "check"]}
    notebooks.check_parameters(space)
    assert space["name"] == "fmnist_converged"
    done = Result.of({"dataset": "mnist5k", "variant": "softmax+ape", "seed": 0, "status": "finished", "top1": 0.5})
    monkeypatch.setattr(catalog, "study_records", lambda params, **kw: [done])
    assert notebooks.opened_study() == "smoke"
    chosen = {"name": "cpu_claims", "report_dir": None, "In": ["", "name = None\nreport_dir = None", "check"]}
    notebooks.check_parameters(chosen)
    assert chosen["name"] == "cpu_claims"
