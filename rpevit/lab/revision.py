"""The code revision a run's record was made with (its `code_revision` field): the git commit of the
package's repository, with "+dirty" when the package has uncommitted changes, else — outside a
checkout, or without git — "sha256:" and a short hash of the package's Python sources. A run resumed
across sittings may train under several: its checkpoint and record list them (`code_revisions`), and the
machines it trained on too (`device_names`): a report names both (provenance_line)."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

UNRECORDED = "unrecorded"  # revisions of a checkpoint written before checkpoints kept their list
PACKAGE = Path(__file__).resolve().parents[1]  # rpevit/, above this module's lab/


def _git(*args: str) -> str | None:
    """The stripped output of a git command in the package's repository, or None if it fails."""
    try:
        done = subprocess.run(
            ["git", "-C", str(PACKAGE.parent), *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def source_hash(package: Path | None = None) -> str:
    """A short sha256 of the package's .py files (their paths and contents, in path order)."""
    package, digest = package or PACKAGE, hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return f"sha256:{digest.hexdigest()[:12]}"


@functools.cache
def code_revision() -> str:
    """The package's git commit (+dirty with uncommitted changes under it) where it sits at the top of
    a git checkout, else its source_hash; computed once per process."""
    if (PACKAGE.parent / ".git").exists():
        commit = _git("rev-parse", "HEAD")
        changes = _git("status", "--porcelain", "--", PACKAGE.name)
        if commit and changes is not None:
            return commit + ("+dirty" if changes else "")
    return source_hash()


def short_revision(revision: str) -> str:
    """A revision as people read it: a commit's first 12 hex digits (+dirty kept); a source hash as is."""
    if revision.startswith("sha256:"):
        return revision
    commit, plus, rest = revision.partition("+")
    return commit[:12] + plus + rest


def extended(revisions: list[str], current: str) -> list[str]:
    """A run's revision list once `current` code goes on with it: appended unless it is already the last."""
    return list(revisions) if revisions and revisions[-1] == current else [*revisions, current]


def run_revisions(run) -> list[str]:
    """The revisions a finished run (Result) was trained under: its list, or, in a record older than the
    lists, its one `code_revision` (earlier ones of a resumed run unknown); [] when it names none."""
    return list(run.code_revisions) or ([run.code_revision] if run.code_revision else [])


def run_machines(run) -> list[str]:
    """The CPUs or GPUs a finished run (a Result or its record) trained on: its `device_names`, or, in a
    record older than the lists, its one `device_name`; [] when it names none."""
    names = run.get("device_names") or []
    return list(names) or ([run["device_name"]] if run.get("device_name") else [])


def machine_names(runs) -> str:
    """Every machine finished runs (Results or records) name, in name order ('' where none does): the
    reproduction line's "measured on"."""
    return ", ".join(sorted({name for r in runs for name in run_machines(r) if name != UNRECORDED}))


def _counted(lists: list[list[str]]) -> str:
    """'`a` (2 runs), `b` (1 run)': each name with the runs that list it (once per run), in name order."""
    from collections import Counter

    counts = Counter(name for names in lists for name in dict.fromkeys(names))
    return ", ".join(f"`{name}` ({n} run{'s' * (n != 1)})" for name, n in sorted(counts.items()))


def revisions_line(runs) -> str:
    """The code revisions finished runs (Results) were trained under, with run counts (a run resumed across
    revisions counts under each), and how many came from uncommitted, unnamed or unrecorded code, or
    were recorded before records kept the list: a study's report names them."""
    runs = list(runs)
    lists = [[short_revision(rev) for rev in run_revisions(r)] or ["unnamed"] for r in runs]
    if not lists:
        return "Code revisions: no finished run yet."
    notes = []
    unclean = sum(any(rev.endswith("+dirty") or rev in ("unnamed", UNRECORDED) for rev in revs) for revs in lists)
    if unclean:
        notes.append(f"{unclean} from an uncommitted, unnamed or unrecorded revision")
    resumed = sum(len(set(revs)) > 1 for revs in lists)
    if resumed:
        notes.append(f"{resumed} resumed across revisions")
    older = sum(not r.code_revisions for r in runs)
    if older:
        notes.append(f"{older} recorded before records listed every revision (only their last is known)")
    return (
        f"Code revisions its finished runs were trained from: {_counted(lists)}"
        + "".join(f" — {n}" for n in notes)
        + "."
    )


def machines_line(runs) -> str:
    """The CPUs or GPUs finished runs (Results) trained on (their records' device_names, else their one
    device_name), with run counts (a run resumed on another machine counts under each): float results depend
    on the machine, so a study's report names them; '' without any finished run."""
    runs = list(runs)
    lists = [run_machines(r) or ["unnamed"] for r in runs]
    if not lists:
        return ""
    notes = []
    if resumed := sum(len({name for name in names if name != UNRECORDED}) > 1 for names in lists):
        notes.append(f"{resumed} resumed on another machine")
    if unknown := sum(not r.device_names or UNRECORDED in r.device_names for r in runs):
        notes.append(f"{unknown} trained before records listed every machine (only the last is known)")
    return f"Machines they trained on: {_counted(lists)}" + "".join(f" — {n}" for n in notes) + "."


def provenance_line(runs) -> str:
    """revisions_line and machines_line of finished runs (Results), as one paragraph of a study's report."""
    runs = list(runs)
    return " ".join(line for line in (revisions_line(runs), machines_line(runs)) if line)
