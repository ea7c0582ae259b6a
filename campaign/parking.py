"""Parked runs: an unfinished run's state kept in the repository, so that it resumes in another checkout.

runs/ is git-ignored. A machine that is handed back or reset (a CPU sitting that ends, a fresh
clone, a lent GPU) loses every epoch trained since the last finished run, unless it is parked first:
`python -m campaign park PRESET…` copies each unfinished run's newest checkpoint and its stable
checkpoint (the cool-downs branch from it) to reports/<preset>/parked/ — tracked: commit it. `study`
puts them back into runs/ before it starts (`restore`). Nothing goes backwards: a run is placed as a
whole (its checkpoint, stable checkpoint and a history.csv written from the checkpoint's own history,
which the budget reads), only where it holds more epochs than the copy already there; a run with a
record (finished or diverged, here or kept) is never touched, and one another live process trains
is left alone. A GPU sitting's runs come back the same way (`place_run`, in sitting.unpack). A finished
run's stable checkpoint, which a longer budget goes on from, is kept apart (stable_checkpoints.py).
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

from rpevit.lab.params import Params, load_params
from rpevit.lab.store import records

PARKED = "parked"  # reports/<preset>/parked/<dataset>/<variant>/seed<N>/: tracked, unlike runs/
RUN_FILES = (records.CHECKPOINT, records.STABLE_CHECKPOINT)  # read in this order: a checkpoint past the stable
# phase was written after its stable checkpoint, so reading the checkpoint first never finds it missing


def _state(data: bytes) -> dict:
    """A checkpoint's state from its bytes ({} if it cannot be read: a damaged copy holds nothing to place)."""
    import torch

    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    except Exception:  # any unreadable copy
        return {}
    return state if isinstance(state, dict) else {}


def read_state(path: Path) -> dict:
    """A checkpoint file's state, read without judging or moving it: {} if it is missing or cannot be read
    (the run's own resume decides what a damaged checkpoint means; a status read moves nothing)."""
    return _state(path.read_bytes()) if path.is_file() else {}


def _loaded(preset: str | Params) -> Params:
    return preset if isinstance(preset, Params) else load_params(preset)


def epochs(data: bytes) -> int:
    """The epochs a checkpoint's bytes hold (0 if it cannot be read)."""
    return int(_state(data).get("epoch", 0))


def _local_epochs(directory: Path) -> int:
    """The epochs of a run's newest readable checkpoint here (0 if none), read without moving anything: a
    damaged file is left for the run's own resume to judge, and `status` reads through this too."""
    for name in (records.CHECKPOINT, records.PREVIOUS_CHECKPOINT):
        if (directory / name).is_file() and (state := _state((directory / name).read_bytes())):
            return int(state.get("epoch", 0))
    return 0


def unfinished_runs(preset: str | Params) -> tuple[dict[Path, dict[str, Path]], list[Path]]:
    """({run directory under runs/: {name: file}}, donor files): what each unfinished run needs to go on — its
    newest checkpoint (checkpoint.pt, else checkpoint.prev.pt, named CHECKPOINT here), its stable checkpoint
    and history.csv where it has them (a run with a record has ended) — and, for a preset that `continues`
    another, that one's stable checkpoints. `preset`: a name, a YAML path or loaded params."""
    params = _loaded(preset)
    base, wanted = records.runs_root() / params.name, {}
    for directory in sorted({p.parent for p in base.rglob("*.pt")} if base.is_dir() else ()):
        if records.SUPERSEDED in directory.parts or _ended(directory):
            continue  # set aside, or ended (finished or diverged): its record says so
        newest = directory / records.CHECKPOINT
        if not newest.is_file():
            newest = directory / records.PREVIOUS_CHECKPOINT
        if newest.is_file():
            others = {n: directory / n for n in (records.STABLE_CHECKPOINT, records.HISTORY)}
            wanted[directory] = {records.CHECKPOINT: newest, **{n: f for n, f in others.items() if f.is_file()}}
    donor = (
        sorted((records.runs_root() / params.continues).rglob(records.STABLE_CHECKPOINT)) if params.continues else []
    )
    return wanted, donor


def _ended(run_directory: Path) -> bool:
    """Whether a run under runs/<preset>/… has a record here or a kept one in reports/<preset>/records/."""
    relative = run_directory.relative_to(records.runs_root())
    kept = records.reports_root() / relative.parts[0] / "records" / Path(*relative.parts[1:])
    return (run_directory / records.RECORD).is_file() or (kept / records.RECORD).is_file()


def place_run(run_directory: Path, files: dict[str, bytes]) -> str:
    """Put one run's files (name → bytes of RUN_FILES, CHECKPOINT among them) into `run_directory` under runs/
    as a whole, with history.csv written from the checkpoint, only if the run has not ended and they hold
    more epochs than the checkpoint there: "placed", "ended", "busy" (another live process trains it) or
    "kept" (the copy there is as far or further)."""
    if _ended(run_directory):
        return "ended"
    state = _state(files[records.CHECKPOINT])
    try:
        with records.RunLock(run_directory):
            if int(state.get("epoch", 0)) <= _local_epochs(run_directory):
                return "kept"
            (run_directory / records.PREVIOUS_CHECKPOINT).unlink(missing_ok=True)
            (run_directory / records.STABLE_CHECKPOINT).unlink(missing_ok=True)  # the old run's, if any
            if records.STABLE_CHECKPOINT in files:
                records.write_bytes(run_directory / records.STABLE_CHECKPOINT, files[records.STABLE_CHECKPOINT])
            records.write_csv(run_directory / records.HISTORY, state.get("history", []))  # as train writes it
            records.write_bytes(run_directory / records.CHECKPOINT, files[records.CHECKPOINT])  # last: it resumes
    except records.RunBusy:
        return "busy"
    return "placed"


def _parked_root(preset_name: str) -> Path:
    return records.reports_root() / preset_name / PARKED


def parked_checkpoint(run) -> Path:
    """Where `park` keeps a rooted `Run`'s newest checkpoint (reports/<preset>/parked/<dataset>/<variant>/seed<N>/)."""
    relative = run.dir.relative_to(run.runs_root / run.params.name)
    return run.reports_root / run.params.name / PARKED / relative / records.CHECKPOINT


def history_so_far(run) -> list[dict]:
    """An unfinished rooted `Run`'s epochs so far: its history here (runs/) or the one its parked checkpoint
    holds, whichever is further on; [] if neither. For interim curves only (no verdict reads them); read
    without moving anything, as `_local_epochs` reads (the run's own resume judges a damaged file)."""
    here, path = [], run.dir / records.HISTORY
    if (run.dir / records.CHECKPOINT).is_file() and path.is_file():
        rows, problem = records.history_problem(path.read_bytes(), None)
        here = [] if problem else rows
    return max(here, list(read_state(parked_checkpoint(run)).get("history", [])), key=len)


def _parked_runs(preset_name: str):
    """(its path under the parked folder, parked folder, the run's directory under runs/) for each parked run
    of a preset, in order."""
    root = _parked_root(preset_name)
    for checkpoint in sorted(root.rglob(records.CHECKPOINT)) if root.is_dir() else ():
        relative = checkpoint.parent.relative_to(root)
        yield relative, checkpoint.parent, records.runs_root() / preset_name / relative


def pending(preset_name: str) -> list[str]:
    """ "<dataset>/<variant>/seed<N> at epoch E" for each parked run that `restore` would place now."""
    found = []
    for relative, folder, local in _parked_runs(preset_name):
        parked = epochs((folder / records.CHECKPOINT).read_bytes())
        if not _ended(local) and parked > _local_epochs(local):
            found.append(f"{relative.as_posix()} at epoch {parked}")
    return found


def restore(preset: str | Params) -> list[str]:
    """Put a preset's parked runs into runs/ (place_run), then the finished runs' kept stable checkpoints (of
    it and of the preset it continues: stable_checkpoints.restore); a line for what moved, none if nothing did."""
    params = _loaded(preset)
    name, placed, held = params.name, 0, 0
    for _, folder, local in _parked_runs(name):
        outcome = place_run(local, {n: (folder / n).read_bytes() for n in RUN_FILES if (folder / n).is_file()})
        placed, held = placed + (outcome == "placed"), held + (outcome == "busy")
    from . import stable_checkpoints  # it reads checkpoints through this module

    lines = stable_checkpoints.restore(params)
    if not placed and not held:
        return lines
    busy = f" ({held} left alone: another process trains them)" if held else ""
    where = _parked_root(name).relative_to(records.reports_root().parent)
    return [f"{name}: {placed} parked run(s) restored from {where}{busy}", *lines]


def park(presets: list[str]) -> list[str]:
    """Replace each preset's reports/<preset>/parked/ with its unfinished runs (restoring first, so a parked
    run this checkout is behind on is never lost; runs that ended drop out), and keep its finished runs'
    stable checkpoints (stable_checkpoints.keep). A line per preset, and one for stable checkpoints kept."""
    from . import stable_checkpoints  # it reads checkpoints through this module

    lines, loaded = [], [load_params(preset) for preset in presets]  # every preset checked before any work
    for params in loaded:
        name = params.name
        restore(params)
        wanted, _ = unfinished_runs(params)
        root = _parked_root(name)
        staging = root.with_name(f".{PARKED}.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        held = []
        for directory, files in wanted.items():
            relative = directory.relative_to(records.runs_root() / name)
            for file_name in (n for n in RUN_FILES if n in files):  # the checkpoint first (RUN_FILES)
                data = files[file_name].read_bytes()
                records.write_bytes(staging / relative / file_name, data)
                if file_name == records.CHECKPOINT:
                    held.append(f"{relative.as_posix()} at epoch {epochs(data)}")
        old = root.with_name(f".{PARKED}.old.tmp")
        shutil.rmtree(old, ignore_errors=True)
        if root.exists():
            root.rename(old)
        if wanted:
            staging.rename(root)
        shutil.rmtree(old, ignore_errors=True)
        epochs_held = ", ".join(held)
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20 if wanted else 0.0
        lines.append(
            f"{name}: {len(wanted)} unfinished run(s) parked in reports/{name}/{PARKED}/ ({size:.1f} MiB)"
            + (f": {epochs_held}; commit it" if wanted else "")
        )
        lines += stable_checkpoints.keep(params)
    return lines


def add_parser(sub) -> None:
    """The `park` sub-command's arguments."""
    parking = sub.add_parser(
        "park",
        help="keep presets' unfinished runs in reports/<preset>/parked/ (commit it; `study` resumes them) and "
        "finished runs' stable checkpoints in reports/<preset>/stable/",
    )
    parking.add_argument("presets", nargs="+", metavar="PRESET", help="preset names or YAML paths")


def command(args) -> int:
    """`python -m campaign park PRESET…`"""
    for line in park(args.presets):
        print(line)
    return 0
