"""Notebooks stored clean (scripts/nbclean.py): what is stripped (every output, the marked cells' too: their
references live in tests/nbval_references/) and what stays, the text a reference keeps, the Lab save hook's
folder rule, the git clean filter in a scratch repository, and the wiring (`make lab`, `make install`,
.gitattributes). The headless Lab run itself is tests/test_lab.py; nbval's comparison with the
references, tests/test_nbval_compare.py."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "nbclean.py"
_spec = importlib.util.spec_from_file_location("nbclean", SCRIPT)
nbclean = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nbclean)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


PNG = {"image/png": "iVBORw0KGgo=", "text/plain": ["<IPython.core.display.Image object>"]}
WIDGET = "application/vnd.jupyter.widget-view+json"


def _ran(nb: dict) -> dict:
    """`nb` as JupyterLab saves it after running every cell (outputs, counts, timings, widget state; a cell
    tagged `nbval-check-output` shows a table, an image and a widget view too)."""
    nb = copy.deepcopy(nb)
    widget = {"output_type": "display_data", "metadata": {}, "data": {WIDGET: {"model_id": "f00", "version_major": 2}}}
    table = {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": ["| a |\n"]}}
    for count, cell in enumerate((c for c in nb["cells"] if c["cell_type"] == "code"), start=1):
        cell["execution_count"] = count
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran\n"]}]
        if nbclean.is_checked(cell):
            cell["outputs"] += [table, {"output_type": "display_data", "data": PNG, "metadata": {}}, widget]
        cell["metadata"].update(
            execution={"iopub.status.busy": "2026-01-01T00:00:00Z"}, scrolled=True, jupyter={"outputs_hidden": True}
        )
    nb["metadata"]["language_info"] = {"name": "python", "version": "3.11.2", "mimetype": "text/x-python"}
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return nb


def _checked(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if nbclean.is_checked(c)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_notebooks_are_clean_and_come_back_byte_for_byte(path):
    text = path.read_text(encoding="utf-8")
    assert nbclean.clean_text(text) == text
    assert nbclean.clean_text(nbclean.dumps(_ran(json.loads(text)))) == text
    code = [c for c in json.loads(text)["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)  # the marked cells' too


def test_a_reference_keeps_the_text_outputs_only_and_the_stored_cell_none():
    ran = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": 7,
                "id": "table",
                "metadata": {"tags": ["nbval-check-output"], "execution": {"iopub.status.busy": "2026"}},
                "outputs": [
                    {"output_type": "stream", "name": "stdout", "text": ["3 checks passed\n"]},
                    {"output_type": "display_data", "data": PNG, "metadata": {"image/png": {"width": 600}}},
                    {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo="}, "metadata": {}},
                    {
                        "output_type": "execute_result",
                        "execution_count": 7,
                        "metadata": {},
                        "data": {"text/plain": ["2"]},
                    },
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {"text/markdown": ["| a |\n"], "text/plain": ["<Markdown>"], "application/json": {}},
                    },
                    {"output_type": "error", "ename": "E", "evalue": "", "traceback": ["/home/me/x.py"]},
                ],
                "source": ["print(3)"],
            },
            {"cell_type": "code", "execution_count": None, "id": "new", "metadata": {"tags": ["nbval-check-output"]}},
            {"cell_type": "code", "execution_count": 8, "id": "plain", "metadata": {}, "outputs": [PNG], "source": []},
        ],
        "metadata": {},
    }
    outputs = copy.deepcopy(ran["cells"][0]["outputs"])
    table, new, plain = nbclean.strip(ran)["cells"]
    assert table["execution_count"] is None and table["metadata"] == {"tags": ["nbval-check-output"]}
    assert table["outputs"] == [] and new["outputs"] == [] and plain["outputs"] == []
    assert nbclean.text_outputs(outputs) == [
        {"output_type": "stream", "name": "stdout", "text": ["3 checks passed\n"]},
        {
            "output_type": "display_data",
            "data": {"text/plain": ["<IPython.core.display.Image object>"]},
            "metadata": {},
        },
        {"output_type": "execute_result", "execution_count": 1, "metadata": {}, "data": {"text/plain": ["2"]}},
        {
            "output_type": "display_data",
            "metadata": {},
            "data": {"text/markdown": ["| a |\n"], "text/plain": ["<Markdown>"]},
        },
    ]
    assert new["execution_count"] is None and plain["execution_count"] is None


def test_strip_keeps_sources_tags_and_the_users_metadata():
    nb = json.loads(NOTEBOOKS[0].read_text(encoding="utf-8"))
    ran = _ran(nb)
    ran["cells"][1]["source"] = ['name = "cpu_claims"\n']  # a parameter edit: the user's, kept
    ran["cells"][1]["metadata"]["jupyter"]["source_hidden"] = True  # a view choice of the user's, kept
    ran["metadata"]["authors"] = ["me"]
    cleaned = nbclean.strip(ran)
    assert cleaned["cells"][1]["source"] == ['name = "cpu_claims"\n']
    assert cleaned["cells"][1]["metadata"] == {"tags": ["parameters"], "jupyter": {"source_hidden": True}}
    code = [c for c in cleaned["cells"] if c["cell_type"] == "code"]
    assert all(c.get("outputs", []) == [] and c.get("execution_count") is None for c in code)
    assert _checked(cleaned) == _checked(nb)  # the marked cells, tags and all, as stored
    assert cleaned["metadata"]["language_info"] == {"name": "python"} and cleaned["metadata"]["authors"] == ["me"]
    assert "widgets" not in cleaned["metadata"]
    assert nbclean.clean_text("not json") == "not json" and nbclean.clean_text("[1]") == "[1]"


@pytest.mark.parametrize(
    "path, stripped", [("notebooks/45_claims.ipynb", True), ("reports/smoke/45_claims.ipynb", False)]
)
def test_the_save_hook_cleans_notebooks_under_notebooks_only(tmp_path, path, stripped):
    """Saved from Lab after a run: under notebooks/ the file comes back as stored; elsewhere as it was run."""
    text = NOTEBOOKS[0].read_text(encoding="utf-8")
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text(text, encoding="utf-8")
    nb = _ran(json.loads(text))
    model = {"type": "notebook", "content": copy.deepcopy(nb)}
    manager = type("Manager", (), {"root_dir": str(tmp_path)})()
    nbclean.pre_save_hook(model=model, path=path, contents_manager=manager)
    assert (nbclean.dumps(model["content"]) == text) is stripped
    assert (model["content"] == nb) is not stripped
    text_file = {"type": "file", "content": "x", "format": "text"}
    nbclean.pre_save_hook(model=text_file, path="notebooks/notes.txt", contents_manager=manager)
    assert text_file["content"] == "x"


def _git(folder: Path, *args: str) -> str:
    identity = ["-c", "user.name=rpevit test", "-c", "user.email=test@rpevit.invalid"]
    return subprocess.run(["git", *identity, *args], cwd=folder, check=True, capture_output=True, text=True).stdout


def test_the_git_filter_stores_a_run_notebook_clean(tmp_path):
    """With the filter `make install` sets, a notebook saved with outputs elsewhere shows no diff and
    `git add` stores it clean; a parameter edit stays a change."""
    notebook = tmp_path / "notebooks" / NOTEBOOKS[0].name
    notebook.parent.mkdir()
    text = NOTEBOOKS[0].read_text(encoding="utf-8")
    notebook.write_text(text, encoding="utf-8")
    (tmp_path / ".gitattributes").write_text((ROOT / ".gitattributes").read_text())
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "filter.nbclean.clean", f"{sys.executable} {SCRIPT}")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "clean")
    notebook.write_text(json.dumps(_ran(json.loads(text)), indent=2), encoding="utf-8")
    assert _git(tmp_path, "diff") == ""
    _git(tmp_path, "add", "-A")
    assert _git(tmp_path, "status", "--porcelain") == ""
    notebook.write_text(text.replace('name = \\"smoke\\"', 'name = \\"cpu_claims\\"', 1), encoding="utf-8")
    assert _git(tmp_path, "diff", "--numstat").split() == ["1", "1", f"notebooks/{notebook.name}"]


def test_make_lab_and_make_install_use_the_hook_and_the_filter():
    makefile = (ROOT / "Makefile").read_text()
    assert "JUPYTER_CONFIG_PATH=$(CURDIR)/.jupyter" in makefile.split("\nlab:")[1].split("\n\n")[0]
    setup = (ROOT / "scripts" / "setup_lab.sh").read_text()
    assert (
        "bash scripts/setup_lab.sh $(PY)" in makefile
        and "bash scripts/setup_lab.sh" in (ROOT / "environment.yml").read_text()
    )
    assert 'git config filter.nbclean.clean "$python_path scripts/nbclean.py"' in setup
    assert "rpevit.lab.lab_hook.pre_save_hook" in setup
    assert "notebooks/*.ipynb filter=nbclean" in (ROOT / ".gitattributes").read_text().splitlines()
    config = (ROOT / ".jupyter" / "jupyter_server_config.py").read_text()
    assert "scripts" in config and "nbclean.py" in config and "FileContentsManager.pre_save_hook" in config
