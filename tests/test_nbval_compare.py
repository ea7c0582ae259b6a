"""`make test` compares what the notebooks compute: nbval (`--nbval-lax`) checks every cell tagged
`nbval-check-output` against its reference (tests/nbval_references/, written by scripts/nbval_references.py,
which also writes the copies nbval runs: notebooks/ itself stays output-free), after
notebooks/nbval_sanitize.cfg has removed what varies between machines and runs (timings, dates, paths,
addresses, floating noise). Every marked cell has a reference and every reference a marked cell; the
sanitizer on sample lines: it removes that and keeps every number a check reads; then nbval itself, in a
subprocess with `make test`'s flags, on copies of the cheapest notebook (00_derivation_checks, seconds):
the copy with its references passes, and a copy with one number of a reference changed and one
computation planted fails exactly at those two cells.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
from nbval.plugin import get_sanitize_patterns

from rpevit.lab.params import PROJECT_ROOT

_spec = importlib.util.spec_from_file_location("nbval_references", PROJECT_ROOT / "scripts" / "nbval_references.py")
nbval_references = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nbval_references)
SANITIZE = PROJECT_ROOT / "notebooks" / "nbval_sanitize.cfg"
NBVAL = ["--nbval-lax", "--nbval-current-env", "--nbval-sanitize-with", str(SANITIZE)]
CHECKED = "nbval-check-output"


def _sanitized(text: str) -> str:
    """`text` as nbval sees it before comparing (its own parser and order of the patterns)."""
    for regex, replace in get_sanitize_patterns(SANITIZE.read_text(encoding="utf-8")):
        text = re.sub(regex, replace, text)
    return text


def test_make_test_compares_the_notebooks_with_the_sanitizer():
    script = "scripts/test_side_by_side.sh"  # `make test` runs the notebooks through it, beside the suite
    assert f"bash {script} $(PY)" in (PROJECT_ROOT / "Makefile").read_text()
    lines = (PROJECT_ROOT / script).read_text().splitlines()
    line = next(line for line in lines if "--nbval-lax" in line)
    assert line == f"nbval=({' '.join(NBVAL).replace(str(PROJECT_ROOT) + '/', '')} .nbval)"
    assert '"$py" scripts/nbval_references.py --into .nbval || exit 1' in lines[: lines.index(line)]
    assert "/.nbval/" in (PROJECT_ROOT / ".gitignore").read_text().splitlines()
    assert len(get_sanitize_patterns(SANITIZE.read_text(encoding="utf-8"))) == 7  # every section parsed


def test_every_marked_cell_has_a_reference_and_every_reference_a_marked_cell():
    notebooks = sorted((PROJECT_ROOT / "notebooks").glob("*.ipynb"))
    kept = {path.stem for path in nbval_references.REFERENCES.glob("*.json")}
    assert kept <= {path.stem for path in notebooks}, "references of a notebook that is gone"
    marked_anywhere = 0
    for path in notebooks:
        marked = {
            c["id"]
            for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if CHECKED in c["metadata"].get("tags", [])
        }
        assert set(nbval_references.references(path)) == marked, path.name
        marked_anywhere += len(marked)
    assert marked_anywhere >= 15  # 00's derivation tables, 35's pilot tables, 40's and 45's counts


def test_the_copies_nbval_runs_carry_the_references_and_a_missing_one_stops_them(tmp_path, monkeypatch):
    (tmp_path / "nbval" / "stale.ipynb").parent.mkdir()
    (tmp_path / "nbval" / "stale.ipynb").write_text("{}")  # a notebook removed from notebooks/ since
    (tmp_path / "nbval" / "notes.txt").write_text("mine")  # not a notebook: left alone
    written = nbval_references.write_checked_copies(tmp_path / "nbval")
    assert sorted(p.name for p in written) == sorted(p.name for p in (PROJECT_ROOT / "notebooks").glob("*.ipynb"))
    assert not (tmp_path / "nbval" / "stale.ipynb").exists() and (tmp_path / "nbval" / "notes.txt").is_file()
    copy = json.loads((tmp_path / "nbval" / "00_derivation_checks.ipynb").read_text(encoding="utf-8"))
    kept = nbval_references.references(PROJECT_ROOT / "notebooks" / "00_derivation_checks.ipynb")
    assert sum(bool(outputs) for outputs in kept.values()) >= 6  # its derivation tables
    for cell in (c for c in copy["cells"] if c["cell_type"] == "code"):
        if CHECKED in cell["metadata"].get("tags", []):
            assert cell["execution_count"] == 1 and cell["outputs"] == kept[cell["id"]]
        else:
            assert cell["execution_count"] is None and cell["outputs"] == []
    with pytest.raises(SystemExit, match="^error: the copies with references go beside notebooks/, never into it"):
        nbval_references.write_checked_copies(PROJECT_ROOT / "notebooks")
    monkeypatch.setattr(nbval_references, "REFERENCES", tmp_path / "none")
    with pytest.raises(
        SystemExit,
        match=r"^error: notebooks/00_derivation_checks.ipynb: cell \S+ is tagged nbval-check-output but has no ref",
    ):
        nbval_references.write_checked_copies(tmp_path / "nbval")


@pytest.mark.parametrize(
    "one, other",
    [
        ("45 checks passed, 0 failed (2.8 s).", "45 checks passed, 0 failed (13 s)."),
        (
            "| rope_axial | 0 | 2.7e-16 | 5.5e-16 | 1e-10 | PASS |",
            "| rope_axial | 0 | 2.5e-16 | 0.0e+00 | 1e-10 | PASS |",
        ),
        (
            "| ψ = φ | float32 | 3.1e-07 | 2.0e-07 | 1e-05 | PASS |",
            "| ψ = φ | float32 | 2.8e-07 | 2.4e-07 | 1e-05 | PASS |",
        ),
        ("a violation of -1.2e-13", "a violation of 4.48e-16"),
        ("trained 2026-11-26 on cpu", "trained 2027-01-02 on cpu"),
        ("written 2026-11-26T07:37:46.123Z", "written 2026-11-27 10:00:01"),
        ("at 07:37:46, 12 ms per image, 1.5 min", "at 23:01:02, 9.75 ms per image, 3 min"),
        ("read /work/main/runs/smoke/record.json", "read /home/ci/rpevit/lab/runs/smoke/record.json"),
        ("<Figure at 0x7f3a2b1c9d00>", "<Figure at 0x55d0c0ffee00>"),
        ("ratio 0.30000000000000004", "ratio 0.30000000000000002"),
    ],
)
def test_the_sanitizer_removes_what_varies_between_runs(one, other):
    assert one != other and _sanitized(one) == _sanitized(other)


@pytest.mark.parametrize(
    "one, other",
    [
        (
            "| orthogonal | 16 | 1 | 0.3845 | +3.21e-02 | 3.7e-02 |",
            "| orthogonal | 16 | 1 | 0.3854 | +3.21e-02 | 3.7e-02 |",
        ),
        (
            "| orthogonal | 16 | 1 | 0.3845 | +3.21e-02 | 3.7e-02 |",
            "| orthogonal | 16 | 1 | 0.3845 | -3.21e-02 | 3.7e-02 |",
        ),
        ("| softmax+krpe | 2.61e-16 | < 1e-09 | PASS |", "| softmax+krpe | 2.61e-16 | < 1e-09 | FAIL |"),
        ("| rope_mixed | 64 | 4.6e-16 | 1e-10 | PASS |", "| rope_mixed | 64 | 4.6e-16 | 1e-08 | PASS |"),
        ("| relu+rope_axial (pre-map) | 9.23e-01 |", "| relu+rope_axial (pre-map) | 9.32e-01 |"),
        ("log-log slopes: orthogonal -0.452", "log-log slopes: orthogonal -0.425"),
        ("45 checks passed, 0 failed (2.8 s).", "44 checks passed, 1 failed (2.8 s)."),
        ("6 run records for smoke, 6 finished", "6 run records for smoke, 5 finished"),
        ("runs/smoke/softmax+ape", "runs/smoke/favor+ape"),
    ],
)
def test_the_sanitizer_keeps_what_a_check_reads(one, other):
    assert _sanitized(one) != _sanitized(other)


def _nbval(folder, notebook: str) -> tuple[int, dict[int, str], str]:
    """nbval with `make test`'s flags on one notebook in `folder`, in a subprocess (its kernel starts in
    `folder`): the exit status, {n: 'PASSED' | 'FAILED'} per item `Cell n` (n: the code cell's index among
    the code cells) and the output."""
    command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *NBVAL, notebook]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    found = re.finditer(r"^(PASSED|FAILED|ERROR) \S+::Cell (\d+)", result.stdout, re.MULTILINE)
    return result.returncode, {int(m.group(2)): m.group(1) for m in found}, result.stdout + result.stderr


@pytest.mark.slow
def test_nbval_fails_on_a_changed_reference_or_computation_and_passes_the_stored_notebook(tmp_path):
    copies = nbval_references.write_checked_copies(tmp_path / "copies")
    next(p for p in copies if p.stem == "00_derivation_checks").rename(tmp_path / "stored.ipynb")
    nb = json.loads((tmp_path / "stored.ipynb").read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    number = {c.get("id"): n for n, c in enumerate(code)}
    favor, premap = (code[number[i]] for i in ("00-12", "00-08"))  # (c) FAVOR+ error table; pre-map contrast
    assert CHECKED in favor["metadata"]["tags"] and CHECKED in premap["metadata"]["tags"]
    table = next(o["data"]["text/markdown"] for o in favor["outputs"] if "text/markdown" in o.get("data", {}))
    row = next(i for i, line in enumerate(table) if line.startswith("| orthogonal | 16 | 1 | 0.3845 |"))
    table[row] = table[row].replace("0.3845", "0.3846")  # one number of a stored reference
    source = "".join(premap["source"])
    assert source.count("seed=seed,") == 1
    premap["source"] = source.replace("seed=seed,", "seed=seed + 1,")  # a computation changed, its table not
    (tmp_path / "changed.ipynb").write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    status, outcomes, output = _nbval(tmp_path, "stored.ipynb")
    assert status == 0 and outcomes == dict.fromkeys(range(len(code)), "PASSED"), output[-5000:]
    status, outcomes, output = _nbval(tmp_path, "changed.ipynb")
    failed = {n for n, outcome in outcomes.items() if outcome != "PASSED"}
    assert status == 1 and len(outcomes) == len(code) and failed == {number["00-08"], number["00-12"]}, output[-5000:]
    assert "Cell outputs differ" in output and "0.3846" in output  # (pytest may repeat the message in its summary)
