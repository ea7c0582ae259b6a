"""Did this machine reproduce a study's committed numbers? A run's test top-1 against the committed
summary (reports/<preset>/summary.csv, written by the machine that made the committed report).

Float results depend on the CPU, the torch build and the thread count (two cores summing in another order
give other last bits, and those grow through training), so a different number is not an error; the line
says which runs differ, by how much, and what the committed runs were measured with.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
from pathlib import Path

from ..params import PROJECT_ROOT, Params
from ..result import Result
from ..revision import machine_names
from ..schema import finished, is_finished
from ..store import records
from ..store.catalog import grid_runs

COMMITTED = PROJECT_ROOT / "reports"  # the tracked reports, whatever $RPEVIT_REPORTS points at


def committed_text(path: Path) -> str | None:
    """The committed content of `path` (git's HEAD: a run here may have rewritten the file), else the file's
    own text outside a checkout, or None if neither has it."""
    relative = Path(path).resolve().relative_to(PROJECT_ROOT.resolve()) if Path(path).is_absolute() else path
    try:
        shown = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "show", f"HEAD:{Path(relative).as_posix()}"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        shown = None
    if shown is not None and shown.returncode == 0:
        return shown.stdout
    return Path(path).read_text() if Path(path).is_file() else None


def committed_top1(preset: str, root: Path = COMMITTED) -> tuple[dict[tuple[str, str, int], float], set[str]]:
    """(dataset, variant, seed) → top-1 of the committed summary, and the thread counts it names ({} if none)."""
    path = Path(root) / preset / "summary.csv"
    inside = Path(root).resolve().is_relative_to(PROJECT_ROOT.resolve())
    text = committed_text(path) if inside else (path.read_text() if path.is_file() else None)
    if text is None:
        return {}, set()
    rows = [row for row in csv.DictReader(io.StringIO(text)) if is_finished(row)]
    top1 = {(r["dataset"], r["variant"], int(r["seed"])): float(r["top1"]) for r in rows}
    return top1, {r["threads"] for r in rows if r.get("threads")}


def trained_here(params: Params) -> list[Result]:
    """The preset's finished runs whose records are in this machine's runs root (runs/, or $RPEVIT_RUNS) —
    not the kept copies in reports/, which are the committed numbers themselves."""
    found = []
    for run in grid_runs(params):
        record = records.read_record(run.dir)
        if run.matches(record):
            found.append(Result.of(record, run))
    return finished(found)


def committed_devices(params: Params, root: Path = COMMITTED) -> str:
    """Where the committed runs were measured: machine_names() of the records kept beside the committed summary
    (reports/<preset>/records/, for a preset with keep_records), '' without them."""
    kept = [records.read_record(run.kept_dir) for run in grid_runs(params, reports_root=root)]
    return machine_names([record for record in kept if record])


def reproduction_line(params: Params, root: Path = COMMITTED) -> str:
    """One line: whether this machine's finished runs have the committed top-1, run by run."""
    committed, threads = committed_top1(params.name, root)
    if not committed:
        return f"reproduction: no committed summary for {params.name} to compare with."
    here_runs = trained_here(params)
    mine = {r.place: r.top1 for r in here_runs}
    shared = sorted(set(mine) & set(committed))
    if not shared:
        return f"reproduction: none of this machine's finished runs is in the committed summary of {params.name}."
    differ = [(abs(mine[p] - committed[p]), p) for p in shared if mine[p] != committed[p]]
    where = f"reports/{params.name}/summary.csv"
    if not differ:
        return f"reproduced: the test top-1 of all {len(shared)} runs equals the committed {where}, bit for bit."
    largest, (_, variant, seed) = max(differ)
    here = os.environ.get("OMP_NUM_THREADS", "the default")
    there, this = committed_devices(params, root), machine_names(here_runs)
    return (
        f"not reproduced here: {len(differ)} of {len(shared)} runs differ from the committed {where} (largest "
        f"|Δ top-1| {largest:.4f}, {variant} seed {seed}); the committed runs used {', '.join(sorted(threads)) or '?'} "
        f"thread(s){f' on {there}' if there else ''}, this one OMP_NUM_THREADS={here}{f' on {this}' if this else ''}"
        ": float results depend on the CPU, torch build and threads."
    )
