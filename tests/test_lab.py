"""JupyterLab, headless: `make lab` in a fresh git copy of the notebooks, driven in Chromium (playwright).

Notebooks 45 (claims) and 90 (explorer) run all their cells on the kept records of cpu_claims (no
run of this machine: $RPEVIT_RUNS is empty) without an error output; saving keeps the user's
parameter edit and drops what running produced, and with the edit undone `git status` is clean
(the save hook of .jupyter/, scripts/nbclean.py; no git filter is set up in the copy). A screenshot
of the executed explorer is left in the test's tmp_path.

Needs Debian's chromium (/usr/bin/chromium) and playwright (the `test` extra); .ci/run installs
chromium, so in CI (`CI` set) a missing browser fails the test, elsewhere it is skipped.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rpevit.lab.params import PROJECT_ROOT

from helpers import skip_unless_ci

CHROMIUM = Path("/usr/bin/chromium")
COPIED = ["Makefile", ".jupyter/jupyter_server_config.py", "scripts/nbclean.py", "notebooks"]
PRESET = "cpu_claims"  # a preset with kept records under reports/
RUN_LIMIT = 900  # seconds for one notebook's cells


@pytest.fixture
def sync_playwright():
    """playwright's sync API, or a skip (locally) / failure (CI) naming what is missing."""
    try:
        from playwright.sync_api import sync_playwright as api
    except ImportError:
        api = None
    missing = [
        what
        for what, absent in (
            ("playwright (pip install -e '.[test]')", api is None),
            (f"{CHROMIUM} (apt-get install -y chromium chromium-driver)", not CHROMIUM.is_file()),
        )
        if absent
    ]
    if missing:
        skip_unless_ci(f"the headless JupyterLab test needs {' and '.join(missing)}")
    return api


def _git(folder: Path, *args: str) -> str:
    identity = ["-c", "user.name=rpevit test", "-c", "user.email=test@rpevit.invalid"]
    return subprocess.run(["git", *identity, *args], cwd=folder, check=True, capture_output=True, text=True).stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path, sync_playwright):
    """`make lab` serving a fresh git copy of the notebooks: (copy, base URL, token)."""
    copy = tmp_path / "clone"
    for name in COPIED:
        source = PROJECT_ROOT / name
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        else:
            shutil.copy2(source, copy / name)
    (copy / ".gitignore").write_text(".ipynb_checkpoints/\n")
    _git(copy, "init", "-q")
    _git(copy, "add", "-A")
    _git(copy, "commit", "-q", "-m", "fresh copy")
    settings = tmp_path / "lab-settings"
    for plugin, values in {
        # every cell in the page; the notebook's own kernel (rpevit) started without asking
        "notebook-extension/tracker": {"windowingMode": "none", "autoStartDefaultKernel": True},
        "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    }.items():
        path = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token, venv = _free_port(), secrets.token_hex(16), Path(sys.executable).parent.parent
    env = {
        **os.environ,
        "JUPYTER_TOKEN": token,
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),  # no user config in the way
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"),
        "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data"),  # the kernels and Lab come from the environment
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "lab-workspaces"),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
        "RPEVIT_RUNS": str(tmp_path / "runs"),  # no runs here: the kept records only
        "OMP_NUM_THREADS": "1",
    }
    command = ["make", "-C", str(copy), "lab", f"VENV={venv}", f"LAB_PORT={port}", "-o", f"{venv}/.installed"]
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"`make lab` did not serve: {(tmp_path / 'lab.log').read_text()[-3000:]}")
                time.sleep(1)
        yield copy, url, token
    finally:
        try:  # shut the kernels down first, then the server (and make)
            with urllib.request.urlopen(f"{url}/api/kernels?token={token}", timeout=5) as answer:
                for kernel in json.load(answer):
                    request = urllib.request.Request(f"{url}/api/kernels/{kernel['id']}?token={token}", method="DELETE")
                    urllib.request.urlopen(request, timeout=30)
        except OSError:
            pass
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


def _replace_first_line(page, cell, text: str) -> None:
    """Type `text` over the first line of a cell's editor, as a user would."""
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+Home")
    page.keyboard.press("Shift+End")
    page.keyboard.insert_text(text)
    page.keyboard.press("Escape")


def _run_all(page) -> list[str]:
    """Run > Run All Cells, wait until no cell is queued or running; return the error outputs' text.
    Lab may swap the kernel it starts on opening: a Run All that starts no cell is given again."""
    errors = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]')
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-prompt")
    for _ in range(5):
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
        started = time.monotonic()
        while time.monotonic() - started < 20 and all(t.strip() == "[ ]:" for t in prompts.all_inner_texts()):
            time.sleep(1)
        if not all(t.strip() == "[ ]:" for t in prompts.all_inner_texts()):
            break
    deadline = time.monotonic() + RUN_LIMIT
    while True:
        texts = [t.strip() for t in prompts.all_inner_texts()]
        if errors.count() or (texts and all(re.fullmatch(r"\[\d+\]:", t) for t in texts)):
            break
        assert time.monotonic() < deadline, f"cells not run after {RUN_LIMIT} s: {texts}"
        time.sleep(2)
    widget_errors = page.get_by_text("Error displaying widget")
    return errors.all_inner_texts() + widget_errors.all_inner_texts()


def _save(page) -> None:
    """Ctrl+S on the notebook (edited or run, so its tab shows unsaved changes) until the tab is clean."""
    dirty = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-current.jp-mod-dirty")
    dirty.wait_for(timeout=10_000)
    page.keyboard.press("Control+s")
    dirty.wait_for(state="detached", timeout=30_000)


def test_lab_runs_45_and_90_on_kept_records_and_saving_leaves_git_clean(sync_playwright, lab, tmp_path):
    copy, url, token = lab
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        for stem in ("45_claims", "90_explorer"):
            page = browser.new_page(viewport={"width": 1600, "height": 1100})
            page.goto(f"{url}/lab/workspaces/{stem}/tree/notebooks/{stem}.ipynb?token={token}")  # this notebook only
            code_cells = sum(
                c["cell_type"] == "code" for c in json.loads((copy / f"notebooks/{stem}.ipynb").read_text())["cells"]
            )
            page.wait_for_function(
                f"document.querySelectorAll('.jp-Notebook .jp-CodeCell').length === {code_cells}", timeout=120_000
            )
            page.get_by_text(re.compile(r"\| Idle$")).first.wait_for(timeout=120_000)  # the status bar's kernel
            parameters = page.locator(".jp-Notebook .jp-Cell").nth(1)
            first = parameters.locator(".cm-line").first.inner_text()
            assert first.startswith(("name = None", 'name = "smoke"')), first  # 40 and 45: None, the answer
            value = first.split()[2]
            _replace_first_line(page, parameters, first.replace(value, f'"{PRESET}"', 1))

            errors = _run_all(page)
            assert not errors, f"{stem}: error output in Lab: {errors[0][-2000:]}"
            if stem == "90_explorer":
                page.locator(".jupyter-widgets").first.scroll_into_view_if_needed()
                time.sleep(3)  # the explorer's figure is drawn after its widgets
                page.screenshot(path=str(tmp_path / "90_explorer.png"))

            _save(page)  # the parameter edit is the user's: saved, but nothing that running produced
            changed = _git(copy, "diff", "--numstat").split()
            assert changed == ["1", "1", f"notebooks/{stem}.ipynb"], _git(copy, "diff")[:3000]
            _replace_first_line(page, parameters, first)
            _save(page)
            assert _git(copy, "status", "--porcelain") == "", _git(copy, "diff")[:3000]
            page.close()
        browser.close()
