"""A plain `jupyter lab` (no `make lab`, no JUPYTER_CONFIG_PATH) run on a checkout: a notebook saved
with outputs through the server's contents API lands exactly as committed, so `git status` stays
clean — the save hook `make install` registers for the virtual environment's Jupyter (rpevit/lab/lab_hook.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from helpers import skip_unless_ci

ROOT = Path(__file__).resolve().parents[1]
REGISTERED = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.json"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _call(url: str, method: str = "GET", body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.loads(response.read())


@pytest.mark.slow
def test_a_plain_jupyter_server_saves_notebooks_clean(tmp_path):
    if not REGISTERED.is_file():
        skip_unless_ci(f"{REGISTERED} is missing: run `make install`")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    port, token = _free_port(), "rpevit-test"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env |= {"JUPYTER_CONFIG_DIR": str(tmp_path / "user-config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "server",
            "--no-browser",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={clone}",
            "--allow-root",
        ],
        env=env,
        cwd=clone,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/api/contents/notebooks/00_derivation_checks.ipynb?token={token}"
    try:
        for _ in range(120):
            try:
                model = _call(base + "&content=1")
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("the Jupyter server did not answer")
        cells = model["content"]["cells"]
        plain = next(
            c for c in cells if c["cell_type"] == "code" and "nbval-check-output" not in c["metadata"].get("tags", [])
        )
        plain["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "a run's output\n"}]
        plain["execution_count"] = 7
        model["content"]["metadata"]["widgets"] = {"state": {}}
        _call(base, "PUT", {"type": "notebook", "format": "json", "content": model["content"]})
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert "a run's output" not in (clone / "notebooks" / "00_derivation_checks.ipynb").read_text()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True, check=True)
    assert status.stdout == "", status.stdout
