"""The committed smoke reports are current: regenerated from their kept records by the current code, they
come out as committed, and their executed notebooks run the notebooks' current code. A change that moves
a number, a label or a notebook without regenerating reports/smoke*/ fails here (CI runs it on a clean
clone). Regenerate with `OMP_NUM_THREADS=1 python -m rpevit notebooks smoke` (then smoke_bias)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMOKES = ["smoke", "smoke_bias"]
FROM_RECORDS = ("summary.", "40_", "45_")  # outputs of the records alone (no model, no timing), but for:
TIMED_HERE = ("45_time_vs_softmax", "45_speed_")  # notebook 45 times a token sweep on the machine it runs on


def _code_cells(path: Path) -> list[str]:
    """The source of every code cell but the injected parameters (papermill's `injected-parameters` tag)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [
        "".join(cell["source"])
        for cell in cells
        if cell["cell_type"] == "code" and "injected-parameters" not in cell.get("metadata", {}).get("tags", [])
    ]


@pytest.mark.parametrize("preset", SMOKES)
def test_each_executed_notebook_of_a_smoke_report_runs_the_current_notebook(preset):
    executed = sorted((ROOT / "reports" / preset).glob("*.ipynb"))
    assert executed, f"reports/{preset}/ holds no executed notebook"
    for copy in executed:
        source = ROOT / "notebooks" / copy.name
        assert source.is_file(), f"reports/{preset}/{copy.name} has no notebook in notebooks/"
        assert _code_cells(copy) == _code_cells(source), (
            f"reports/{preset}/{copy.name} ran older code than notebooks/{copy.name}: "
            f"regenerate it (`python -m rpevit notebooks {preset}`)"
        )


@pytest.mark.slow
@pytest.mark.parametrize("preset", SMOKES)
def test_a_smoke_report_regenerated_from_its_kept_records_is_the_committed_one(preset, tmp_path):
    """As a fresh clone: the kept records only (no runs/), the study trains nothing and writes its summary,
    notebooks 40 and 45 write their tables; each equals its committed copy byte for byte."""
    committed = ROOT / "reports" / preset
    shutil.copytree(committed / "records", tmp_path / "reports" / preset / "records")
    env = {
        **os.environ,
        "RPEVIT_RUNS": str(tmp_path / "runs"),
        "RPEVIT_REPORTS": str(tmp_path / "reports"),
        "OMP_NUM_THREADS": "1",
    }

    def rpevit(*args):
        done = subprocess.run(
            [sys.executable, "-m", "rpevit", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return done.stdout

    assert " 0 to run" in rpevit("study", preset, "--no-progress")
    rpevit("notebooks", preset, "--no-train", "--only", "40,45", "--reports", str(tmp_path / "reports"))
    made = tmp_path / "reports" / preset
    tables = sorted(
        path.name
        for path in committed.iterdir()
        if path.name.startswith(FROM_RECORDS)
        and not path.name.startswith(TIMED_HERE)
        and path.suffix in (".md", ".csv")
    )
    assert tables and {"summary.csv", "40_results.md"} <= set(tables)
    stale = [
        name
        for name in tables
        if not (made / name).is_file() or (made / name).read_bytes() != (committed / name).read_bytes()
    ]
    assert not stale, f"reports/{preset}/ is stale against its kept records: {stale}; regenerate it"
