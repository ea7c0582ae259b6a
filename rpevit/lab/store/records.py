"""Run records on disk, written atomically (temporary file, then rename), never lost.

Layout: runs/<preset>/<dataset>/<variant>/seed<k>[-e<epochs>]/{record.json, history.csv,
checkpoint.pt, checkpoint.prev.pt}; a preset with keep_records keeps record.json and history.csv
(and one run's tested weights per variant: weights.pt, runs.keep_first_weights) under reports/<preset>/records/. A
record exists only for a finished (or diverged) run; a checkpoint without a record is an interrupted
run. The previous epoch's checkpoint is kept until the next one is safely written, so one damaged
file costs at most one epoch. A damaged file is moved aside (kept, renamed `<name>.damaged-<time>`)
and named in a message; results made with other settings are moved to `superseded/` rather than
overwritten. A lock file marks a run that a live process is training."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import socket
import tempfile
import time
import zipfile
from pathlib import Path

import torch

from ..params import PROJECT_ROOT
from ..paths import inside
from ..schema import is_finished

_UMASK = os.umask(0)
os.umask(_UMASK)
RECORD, HISTORY, CHECKPOINT = "record.json", "history.csv", "checkpoint.pt"
PREVIOUS_CHECKPOINT, LOCK, SUPERSEDED = "checkpoint.prev.pt", ".lock", "superseded"
# under WSD, the checkpoint at the end of the stable phase (the main run's decay starts after it): the
# state every longer budget of the same seed passes through (rpevit/core/budgets.py), kept once
STABLE_CHECKPOINT = "checkpoint.stable.pt"


def runs_root() -> Path:
    """runs/ (or $RPEVIT_RUNS): the runs' working folders, git-ignored; read per call."""
    return Path(os.environ.get("RPEVIT_RUNS", PROJECT_ROOT / "runs"))


def reports_root() -> Path:
    """reports/ (or $RPEVIT_REPORTS): kept records, summaries and report folders; read per call."""
    return Path(os.environ.get("RPEVIT_REPORTS", PROJECT_ROOT / "reports"))


# what was recovered (damaged files moved aside) since the study last reported it
recovered: list[str] = []


def run_dir(
    preset: str, dataset: str, variant: str, seed: int, root: Path | None = None, epochs: int | None = None
) -> Path:
    """Directory of one run; a run with an `epochs` override (train --epochs) gets its own."""
    name = f"seed{seed}" if epochs is None else f"seed{seed}-e{epochs}"
    return inside(root or runs_root(), preset, dataset, variant, name)


def note(message: str) -> None:
    """Say what was recovered or repaired, in the log now and in the study summary's notes."""
    print(message, flush=True)
    recovered.append(message)


def move_aside(path: Path, why: str, tag: str = "damaged") -> Path:
    """Rename a file to `<name>.<tag>-<time>` (kept for inspection) and say why."""
    stem = f"{path.name}.{tag}-{time.strftime('%Y%m%d-%H%M%S')}"
    target, n = path.with_name(stem), 1
    while target.exists():
        target, n = path.with_name(f"{stem}-{n}"), n + 1
    os.replace(path, target)
    note(f"recovered: {path} — {why}; moved aside to {target.name}")
    return target


def clean_temporary(directory: Path) -> None:
    """Remove temporary files left by interrupted atomic writes (call with the run's lock held)."""
    for tmp in Path(directory).glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


def _atomic_write(path: Path, write, keep_previous: Path | None = None) -> None:
    """Call write(file) on a temporary file beside `path`, then rename it into place (the old
    `path`, if any, first renamed to `keep_previous` when given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the usual permissions
        if keep_previous is not None and path.exists():
            os.replace(path, keep_previous)
        os.replace(tmp, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # make the rename itself durable
        finally:
            os.close(directory)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes(path: Path, data: bytes) -> None:
    """Atomically write a binary file."""
    _atomic_write(Path(path), lambda handle: handle.write(data))


def write_text(path: Path, text: str) -> None:
    """Atomically write a text file."""
    write_bytes(path, text.encode())


def write_json(path: Path, data) -> None:
    """Atomically write JSON (indented, keys in insertion order)."""
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def write_csv(path: Path, rows: list[dict], columns: list[str] | None = None) -> None:
    """Atomically write rows (dicts sharing keys) as CSV; with `columns`, a header even for no rows."""
    buffer = io.StringIO()
    fieldnames = list(columns or (rows[0] if rows else []))
    if fieldnames:
        writer = csv.DictWriter(buffer, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    write_text(path, buffer.getvalue())


def save_checkpoint(path: Path, state: dict, stable: bool = False) -> None:
    """Atomically torch.save a checkpoint, keeping the one it replaces as checkpoint.prev.pt; with
    `stable`, first the same bytes as checkpoint.stable.pt beside it (a kill between the two leaves the
    checkpoint before, whose resumed run writes both again)."""
    path = Path(path)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    if stable:
        write_bytes(path.with_name(STABLE_CHECKPOINT), data)
    _atomic_write(path, lambda handle: handle.write(data), keep_previous=path.with_name(PREVIOUS_CHECKPOINT))


def checkpoint_problem(path: Path) -> str | None:
    """Why a checkpoint file is damaged (not a zip archive, or a member failing its CRC), else None;
    reads the file without unpickling it."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        return f"{type(exc).__name__}: {str(exc)[:120] or 'unreadable'}"
    return None if bad is None else f"member {bad} fails its checksum"


def _load(path: Path) -> dict | None:
    """A checkpoint file's contents, or None (moved aside) if it is damaged."""
    problem = checkpoint_problem(path)
    if problem is not None:
        move_aside(path, problem)
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # truncated zip, empty file, unpickling errors: all mean "damaged"
        move_aside(path, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else 'unreadable'}")
        return None
    if not isinstance(state, dict) or "epoch" not in state:
        move_aside(path, "not an rpevit checkpoint")
        return None
    return state


def load_checkpoint(path: Path) -> dict | None:
    """The newest readable checkpoint of a run (checkpoint.pt, else checkpoint.prev.pt), or None.

    Damaged files are moved aside and named; None means no good state is left.
    """
    path = Path(path)
    for candidate in (path, path.with_name(PREVIOUS_CHECKPOINT)):
        if candidate.is_file():
            state = _load(candidate)
            if state is not None:
                return state
    return None


FINISHED_NUMBERS = ("epochs", "best_epoch", "best_val_acc", "top1", "top5")


def record_problem(data: bytes) -> tuple[dict | None, str | None]:
    """(record, None) if `data` is a run record — a JSON object with variant, dataset, seed and status,
    and for a finished run finite numbers for its results — else (None, why)."""
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if not isinstance(record, dict) or not {"variant", "dataset", "seed", "status"} <= record.keys():
        return None, "not a run record (a JSON object with variant, dataset, seed and status)"
    if is_finished(record):
        bad = [k for k in FINISHED_NUMBERS if not _finite(record.get(k))]
        if bad or not isinstance(record.get("key"), str):
            return None, f"a finished record without a key or finite {', '.join(bad) or 'numbers'}"
    return record, None


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _parse_record(path: Path) -> dict | None:
    record, problem = record_problem(path.read_bytes())
    if problem is not None:
        move_aside(path, problem)
    return record


def read_record(directory: Path) -> dict | None:
    """The run's record, or None if there is none (a damaged one is moved aside and named)."""
    path = Path(directory) / RECORD
    return _parse_record(path) if path.is_file() else None


def peek_record(directory: Path) -> dict | None:
    """The run's record, or None if there is none or it is damaged; unlike read_record it moves nothing
    (for reading another process's run)."""
    path = Path(directory) / RECORD
    return record_problem(path.read_bytes())[0] if path.is_file() else None


def load_records(preset: str, root: Path | None = None) -> list[dict]:
    """Every readable run record of a preset, sorted by dataset, variant, seed."""
    base = inside(root or runs_root(), preset)
    found = [r for p in sorted(base.glob(f"*/*/seed*/{RECORD}")) if (r := _parse_record(p)) is not None]
    return sorted(found, key=lambda r: (r["dataset"], r["variant"], r["seed"]))


def supersede(directory: Path, why: str) -> Path | None:
    """Move a run's results (record, history, checkpoints) into superseded/<time>/, keeping them."""
    directory = Path(directory)
    names = (RECORD, HISTORY, CHECKPOINT, PREVIOUS_CHECKPOINT, STABLE_CHECKPOINT)
    files = [directory / n for n in names if (directory / n).exists()]
    if not files:
        return None
    stem = directory / SUPERSEDED / time.strftime("%Y%m%d-%H%M%S")
    target, n = stem, 1
    while target.exists():
        target, n = stem.with_name(f"{stem.name}-{n}"), n + 1
    target.mkdir(parents=True)
    for path in files:
        os.replace(path, target / path.name)
    print(f"kept: the results in {directory} were made with {why}; moved them to {target}", flush=True)
    return target


KEPT = (RECORD, HISTORY)


def keep(run_directory: Path, kept_directory: Path) -> list[str]:
    """Copy a run's record and history (not its checkpoints) to a tracked place, atomically, where
    the copy differs; returns the names written."""
    written = []
    for name in KEPT:
        source, target = Path(run_directory) / name, Path(kept_directory) / name
        if source.is_file() and (not target.is_file() or target.read_bytes() != source.read_bytes()):
            write_bytes(target, source.read_bytes())
            written.append(name)
    return written


KEPT_WEIGHTS = "weights.pt"  # beside a kept record: its run's tested weights (the study, or `rpevit keep-weights`)
WEIGHTS_MARK = (
    "key",
    "best_epoch",
    "top1",
    "finished_at",
)  # the result kept weights belong to (a retrained run differs)


def save_kept_weights(kept_directory: Path, record: dict, state: dict) -> Path:
    """Atomically write a finished run's tested (best-validation) weights beside its kept record,
    marked with the record's result (`WEIGHTS_MARK`) so that they are never read for another one."""
    path = Path(kept_directory) / KEPT_WEIGHTS
    kept = {**{k: record.get(k) for k in WEIGHTS_MARK}, "state": state}
    _atomic_write(path, lambda handle: torch.save(kept, handle))
    return path


def _read_kept_weights(kept_directory: Path, record: dict | None) -> tuple[dict | None, str | None]:
    """(the kept weights' state dict, None), or (None, why not): "missing", damaged, or made for another result."""
    path = Path(kept_directory) / KEPT_WEIGHTS
    if record is None or not path.is_file():
        return None, "missing"
    if (problem := checkpoint_problem(path)) is not None:
        return None, f"damaged ({problem})"
    try:
        kept = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated or foreign file: not usable, and not ours to move
        return None, f"damaged ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else 'unreadable'})"
    if not isinstance(kept, dict) or not isinstance(kept.get("state"), dict):
        return None, "damaged (not kept weights)"
    if any(kept.get(k) != record.get(k) for k in WEIGHTS_MARK):
        return None, "made for another result of the run"
    return kept["state"], None


def load_kept_weights(kept_directory: Path, record: dict | None) -> dict | None:
    """The weights kept beside `record` (a state dict), or None: none kept, unreadable, or made for
    another result (a field of WEIGHTS_MARK differs). A tracked file: loaded with weights_only, never moved."""
    return _read_kept_weights(kept_directory, record)[0]


def kept_weights_problem(kept_directory: Path, record: dict | None) -> str | None:
    """Why the weights beside `record` cannot be used ("missing", "damaged (…)", "made for another
    result of the run"), or None when they can."""
    return _read_kept_weights(kept_directory, record)[1]


LOCK_GRACE_SECONDS = 5.0  # an unreadable or empty lock younger than this may still be being written


class RunBusy(RuntimeError):
    """Another live process is training this run."""


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (the one liveness check of locks, here and on Ray nodes)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lock_owner(content: bytes) -> tuple[int, str]:
    """(pid, host) a lock file's bytes name; (0, "") when empty, garbled or not UTF-8."""
    try:
        text, host = content.decode("utf-8").split()
        return int(text), host
    except ValueError:  # UnicodeDecodeError is a ValueError too
        return 0, ""


class RunLock:
    """Exclusive use of a run directory: `<dir>/.lock` holds "pid host". A lock of a dead process on
    this host is stale and taken over, and so is one that cannot be read or names no process once it
    is LOCK_GRACE_SECONDS old; a live one (or a younger unreadable one) raises RunBusy. Re-entrant within a process: the
    grid cell holds it across training, evaluation and keeping, and train_run takes it again."""

    _held: dict[Path, int] = {}

    def __init__(self, directory: Path):
        self.path = Path(os.path.abspath(Path(directory) / LOCK))  # one key per directory, however spelled

    def __enter__(self) -> RunLock:
        if self._held.get(self.path):
            self._held[self.path] += 1
            return self
        self._take()
        self._held[self.path] = 1
        return self

    def _take(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = f"{os.getpid()} {socket.gethostname()}"
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666 & ~_UMASK)
            except FileExistsError:
                holder = self.holder()
                if holder:
                    raise RunBusy(
                        f"{self.path.parent} is being trained by process {holder}; "
                        "skipping it (delete the .lock file if that process is gone)"
                    ) from None
                try:
                    if self._names_no_process():  # truncated or garbled: named like any damaged file
                        move_aside(self.path, "a lock that names no process (its writer died mid-write)")
                    self.path.unlink(missing_ok=True)  # stale: its process is gone
                except OSError as exc:
                    raise RunBusy(f"could not take over the stale lock {self.path} ({exc.strerror or exc})") from None
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(me)
            return
        raise RunBusy(f"could not take the lock {self.path}")

    def holder(self) -> str | None:
        """Who else holds this lock — "PID on HOST" of another live process — else None (no lock, a
        stale one of a dead process on this host, or this process's own). A lock that cannot be read
        or parsed counts as held for LOCK_GRACE_SECONDS after it was last written (its writer may be
        between creating it and writing its name), then as stale."""
        try:
            pid, host = _lock_owner(self.path.read_bytes())
        except FileNotFoundError:
            return None
        except OSError:
            return None if self._older_than_grace() else "unknown (unreadable lock)"
        if pid < 1:
            return None if self._older_than_grace() else "unknown (lock not written yet, or its writer died mid-write)"
        if host != socket.gethostname() or (pid != os.getpid() and pid_alive(pid)):
            return f"{pid} on {host}"
        return None

    def _names_no_process(self) -> bool:
        """Whether the lock file is there but holds no "pid host" (empty, truncated or garbled)."""
        try:
            return _lock_owner(self.path.read_bytes())[0] < 1
        except FileNotFoundError:
            return False
        except OSError:
            return True

    def _older_than_grace(self) -> bool:
        """Whether the lock file was last written more than LOCK_GRACE_SECONDS ago (True if it is gone)."""
        try:
            return time.time() - self.path.stat().st_mtime > LOCK_GRACE_SECONDS
        except OSError:
            return True

    def __exit__(self, *exc_info) -> None:
        self._held[self.path] -= 1
        if not self._held[self.path]:
            del self._held[self.path]
            self.path.unlink(missing_ok=True)


HISTORY_COLUMNS = ("epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "seconds", "cpu_seconds")
# histories written before the epochs' CPU seconds were recorded: read as they are, never filled in
WALL_ONLY_HISTORY_COLUMNS = HISTORY_COLUMNS[:-1]
TIME_COLUMNS = ("seconds", "cpu_seconds")  # an epoch's wall and CPU seconds


def without_times(row: dict) -> dict:
    """A history row less its wall and CPU seconds: what two runs of the same training share (a resumed
    run and an uninterrupted one, a packed run and one alone, the two engines)."""
    return {k: v for k, v in row.items() if k not in TIME_COLUMNS}


def in_history_columns(row: dict, history: list[dict]) -> dict:
    """`row` in the columns of the history it joins: a run whose history began without CPU seconds
    (recorded before they were) goes on without them, so its table keeps one schema."""
    if history and "cpu_seconds" not in history[0]:
        return {k: v for k, v in row.items() if k != "cpu_seconds"}
    return row


def history_problem(data: bytes, epochs: int | None = None) -> tuple[list[dict] | None, str | None]:
    """(rows, None) if `data` is a run history — the history columns, finite numbers, epochs 1, 2, …
    (`epochs` of them when given) — else (None, why)."""
    try:
        reader = csv.DictReader(io.StringIO(data.decode("utf-8")))
        rows = [{k: float(v) for k, v in row.items()} for row in reader]
    except (UnicodeDecodeError, csv.Error, ValueError, TypeError) as exc:
        return None, f"not a history table ({type(exc).__name__}: {str(exc)[:80]})"
    if tuple(reader.fieldnames or ()) not in (HISTORY_COLUMNS, WALL_ONLY_HISTORY_COLUMNS):
        return None, f"columns {reader.fieldnames} are not {', '.join(HISTORY_COLUMNS)}"
    if not all(math.isfinite(v) for row in rows for v in row.values()):
        return None, "a number is missing or not finite"
    if [row["epoch"] for row in rows] != list(range(1, len(rows) + 1)):
        return None, "its epochs are not 1, 2, … in order"
    if epochs is not None and len(rows) != epochs:
        return None, f"{len(rows)} epochs where the run has {epochs}"
    return rows, None


def read_history(directory: Path, epochs: int | None = None) -> list[dict]:
    """Per-epoch history rows of a run (numbers parsed), [] if there is none; a damaged one (schema,
    finite numbers, `epochs` rows when given) is moved aside and named, and [] returned."""
    path = Path(directory) / HISTORY
    if not path.is_file():
        return []
    rows, problem = history_problem(path.read_bytes(), epochs)
    if problem is not None:
        move_aside(path, problem)
        return []
    return rows
