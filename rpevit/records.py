"""Run records on disk, written atomically (temporary file, then rename).

Layout: runs/<preset>/<dataset>/<variant>/seed<k>/{record.json, history.csv, checkpoint.pt}.
A record exists only for a finished run; a checkpoint without a record is an interrupted run.
"""
from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path

import torch

from .params import PROJECT_ROOT

_UMASK = os.umask(0)
os.umask(_UMASK)
RUNS_ROOT = Path(os.environ.get("RPEVIT_RUNS", PROJECT_ROOT / "runs"))
RECORD, HISTORY, CHECKPOINT = "record.json", "history.csv", "checkpoint.pt"


def run_dir(preset: str, dataset: str, variant: str, seed: int, root: Path | None = None) -> Path:
    """Directory of one run."""
    return Path(root or RUNS_ROOT) / preset / dataset / variant / f"seed{seed}"


def _atomic_write(path: Path, write) -> None:
    """Call write(file) on a temporary file beside `path`, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the usual permissions
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


def write_csv(path: Path, rows: list[dict]) -> None:
    """Atomically write rows (dicts sharing keys) as CSV."""
    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    write_text(path, buffer.getvalue())


def save_checkpoint(path: Path, state: dict) -> None:
    """Atomically torch.save a checkpoint."""
    _atomic_write(Path(path), lambda handle: torch.save(state, handle))


def load_checkpoint(path: Path) -> dict:
    """Load a checkpoint onto the CPU."""
    return torch.load(path, map_location="cpu", weights_only=False)


def read_record(directory: Path) -> dict | None:
    """The finished run's record, or None."""
    path = Path(directory) / RECORD
    return json.loads(path.read_text()) if path.is_file() else None


def load_records(preset: str, root: Path | None = None) -> list[dict]:
    """Every finished run record of a preset, sorted by dataset, variant, seed."""
    base = Path(root or RUNS_ROOT) / preset
    records = [json.loads(p.read_text()) for p in sorted(base.glob(f"*/*/seed*/{RECORD}"))]
    return sorted(records, key=lambda r: (r["dataset"], r["variant"], r["seed"]))


def read_history(directory: Path) -> list[dict]:
    """Per-epoch history rows of a run (numbers parsed)."""
    path = Path(directory) / HISTORY
    if not path.is_file():
        return []
    with path.open() as handle:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle)]
