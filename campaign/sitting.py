"""A GPU sitting: train as much of a preset's grid as a few lent minutes allow, and carry it back.

`python -m campaign gpu-sitting <preset> --minutes 8 --out DIR --data-root DIR` on a machine with CUDA
checks the device and starts `--processes` study runners side by side on the one GPU. On CUDA they
use the pack engine: each takes the next variant's runs nobody holds and trains them in one
vectorised step (the model is launch-bound, so packs and several processes fill the GPU). At the
deadline the runners are stopped (a run checkpoints every epoch: a stopped run loses at most one
epoch), and what must travel back is packed into DIR as tar files of at most `PART_BYTES` each: the
preset's kept records (reports/<preset>/records/) and its run directories (runs/<preset>/).

`python -m campaign gpu-sitting --unpack DIR` puts them into this checkout: new kept records are
added and never overwrite; a run that ended on the device arrives whole where it has no record here;
an unfinished one replaces the local copy only when it holds more epochs (parking.place_run, the same
rule as a parked run's). `python -m campaign gpu-sitting --stage PRESET…` copies what the next sitting
needs of runs/ (unfinished runs' checkpoints: parking.unfinished_runs) into staged/, which it carries
out (the device tool's `carry`), so an unfinished run resumes where it stopped. Without CUDA it
refuses unless `--device cpu` (for tests). docs/scaling.md says how a sitting is prepared and carried back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from rpevit.core.errors import UserError
from rpevit.lab.params import PROJECT_ROOT, load_params
from rpevit.lab.schema import is_finished
from rpevit.lab.store import records

from .parking import epochs, place_run, restore, unfinished_runs

PACKED_RUNNERS = 3  # on CUDA each runner trains packs (one variant's seeds in one vectorised step)
PART_BYTES = 15 * 2**20  # the device tool brings back files of at most 16 MiB
STOP_GRACE_SECONDS = 20
PACK_RESERVE_SECONDS = 30  # the deadline leaves this much of --minutes for packing (a tenth of a short sitting)
CARRIED = (records.RECORD, records.HISTORY, records.CHECKPOINT, records.STABLE_CHECKPOINT, records.KEPT_WEIGHTS)
STAGED = "staged"  # git-ignored: the runs a sitting carries out (`--stage`), its `carry` path beside data/
STAGED_MARK = ".rpevit-staged"  # only a folder holding this is ever replaced by `--stage`


def add_parser(sub) -> None:
    """The `gpu-sitting` sub-command's arguments."""
    sitting = sub.add_parser(
        "gpu-sitting", help="train a preset's grid on a lent GPU for N minutes; pack it to carry back"
    )
    sitting.add_argument("params", nargs="?", help="preset name or YAML path")
    sitting.add_argument("--minutes", type=float, default=8.0, help="wall minutes for training and packing")
    sitting.add_argument("--out", help="folder for the packed results (the device tool's $OUT)")
    sitting.add_argument(
        "--processes", type=int, help="study runners side by side (default: 3 on CUDA, each training packs; 1 on CPU)"
    )
    sitting.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: for tests only")
    sitting.add_argument(
        "--capture", action="store_true", help="graph-captured packed steps (CUDA graphs; rpevit.core.capture)"
    )
    sitting.add_argument("--data-root", help="folder holding the dataset files (carried with the sitting)")
    sitting.add_argument("--unpack", metavar="DIR", help="put a sitting's packed results into this checkout")
    sitting.add_argument(
        "--stage",
        nargs="+",
        metavar="PRESET",
        help=f"copy what a sitting needs of these presets' unfinished runs into {STAGED}/ (its `carry`)",
    )


def command(args) -> int:
    """`python -m campaign gpu-sitting …`"""
    if args.unpack or args.stage:
        for line in unpack(Path(args.unpack)) if args.unpack else stage(args.stage, PROJECT_ROOT / STAGED):
            print(line)
        return 0
    if not args.params or not args.out:
        raise UserError("gpu-sitting needs a preset and --out DIR (or --unpack DIR).")
    if not 0.1 <= args.minutes <= 9.5:
        raise UserError(f"--minutes {args.minutes:g} is not valid; a device call lasts ≤ 10 minutes: use 0.1-9.5.")
    if args.processes is not None and args.processes < 1:
        raise UserError(f"--processes {args.processes} is not valid; use a positive integer.")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "no CUDA device is visible: a GPU sitting needs one (--device cpu runs it on the CPU, for tests)."
        )
    params = load_params(args.params)
    processes = args.processes or (PACKED_RUNNERS if args.device == "cuda" else 1)
    extra = ["--capture"] if args.capture else []
    return sit(params, args.params, args.minutes, Path(args.out), args.device, processes, args.data_root, extra)


def _device_line(device: str) -> str:
    import torch

    if device != "cuda":
        return f"device: cpu ({os.cpu_count()} cores), torch {torch.__version__}"
    props = torch.cuda.get_device_properties(0)
    return (
        f"device: {props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}, "
        f"torch {torch.__version__}, bf16 {'yes' if torch.cuda.is_bf16_supported() else 'no'}"
    )


def sit(
    params, preset: str, minutes: float, out: Path, device: str, processes: int, data_root: str | None, extra=()
) -> int:
    """Run the sitting for `params` (named `preset` on the command line, see the module's docstring);
    1 if a runner failed on its own, else 0 (also when the deadline stopped runners: the sitting's normal end)."""
    start = time.monotonic()
    deadline = start + 60 * minutes - min(PACK_RESERVE_SECONDS, 6 * minutes)
    out.mkdir(parents=True, exist_ok=True)
    print(_device_line(device), flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if data_root:
        env["RPEVIT_DATA"] = str(Path(data_root).resolve())
    if device == "cpu":
        env.setdefault("OMP_NUM_THREADS", "1")
    limit = max(1, int((deadline - time.monotonic()) // 60))
    engine = "pack" if device == "cuda" else "sequential"
    command = [sys.executable, "-m", "campaign", "study", preset, "--device", device, "--engine", engine]
    command += ["--no-progress", *extra]  # extra: e.g. --capture
    logs = [out / f"runner{i}.log" for i in range(processes)] if processes <= 4 else [None] * processes
    runners = []
    for i in range(processes):
        sink = open(logs[i], "w") if logs[i] else subprocess.DEVNULL  # noqa: SIM115 (closed below)
        runners.append(
            (
                subprocess.Popen(
                    [*command, "--time-limit", f"{limit}m"],
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=PROJECT_ROOT,
                    start_new_session=True,
                ),
                sink,
            )
        )
        time.sleep(2)  # each runner takes its first run before the next starts looking
    stopped = _wait(runners, deadline)
    failed = sum(p.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL) for p, _ in runners)
    for _, sink in runners:
        if sink is not subprocess.DEVNULL:
            sink.close()
    parts = pack(params.name, out)
    print(
        f"runners: {processes}, stopped at the deadline: {stopped}, failed: {failed}; "
        f"{time.monotonic() - start:.0f} s in all"
    )
    for line in progress_lines(params.name):
        print(line)
    print(f"packed: {', '.join(p.name for p in parts)} ({sum(p.stat().st_size for p in parts) / 2**20:.1f} MiB)")
    return 1 if failed else 0


def _wait(runners, deadline: float) -> int:
    """Wait for the runners until the deadline, then stop the rest (SIGTERM, then SIGKILL); how many were stopped."""
    while time.monotonic() < deadline and any(p.poll() is None for p, _ in runners):
        time.sleep(1)
    alive = [p for p, _ in runners if p.poll() is None]
    for p in alive:
        os.killpg(p.pid, signal.SIGTERM)
    end = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < end and any(p.poll() is None for p in alive):
        time.sleep(0.5)
    for p in alive:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return len(alive)


def _carried_files(preset: str) -> list[tuple[Path, str]]:
    """(file, name in the archive) of everything a sitting carries back for `preset`."""
    files = []
    for top, root in (("runs", records.runs_root()), ("reports", records.reports_root())):
        base = root / preset if top == "runs" else root / preset / "records"
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file() and path.name in CARRIED and records.SUPERSEDED not in path.parts:
                files.append((path, f"{top}/{path.relative_to(root).as_posix()}"))
    return files


def pack(preset: str, out: Path) -> list[Path]:
    """The carried files as tar parts sitting-1.tar, sitting-2.tar, … of at most PART_BYTES each (numbered
    on after the parts already in `out`: a sitting that trains a second preset packs beside the first)."""
    parts, current, size = [], None, 0
    before = len(list(out.glob("sitting-*.tar")))
    for path, name in _carried_files(preset):
        length = path.stat().st_size
        if current is None or size + length + 1024 > PART_BYTES:
            if current is not None:
                current.close()
            parts.append(out / f"sitting-{before + len(parts) + 1}.tar")
            current, size = tarfile.open(parts[-1], "w"), 0
        current.add(path, arcname=name)
        size += length + 1024
    if current is not None:
        current.close()
    return parts


def stage(presets: list[str], folder: Path) -> list[str]:
    """Replace `folder` with folder/runs/… holding each preset's unfinished runs (parked ones restored into
    runs/ first): what a sitting carries out (the device tool sends at most 64 MiB, and a finished run's
    checkpoints would soon fill it; the kept records travel with the tree and tell the study which runs
    are done). A line per restore and per preset."""
    import shutil

    if folder.exists() and not (folder / STAGED_MARK).is_file():
        raise UserError(f"{folder} exists and was not made by --stage; move it away first.")
    loaded = {preset: load_params(preset) for preset in presets}  # every preset is checked before any work
    lines = [line for params in loaded.values() for line in restore(params)]  # a fresh checkout's runs/ has none
    files = {preset: unfinished_runs(params) for preset, params in loaded.items()}
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "runs").mkdir(parents=True)
    (folder / STAGED_MARK).write_text("made by `python -m campaign gpu-sitting --stage`; replaced by the next\n")
    for preset, (own, donor) in files.items():
        copies = [(path, directory / name) for directory, named in own.items() for name, path in named.items()]
        copies += [(path, path) for path in donor]
        for path, place in copies:
            target = folder / "runs" / place.relative_to(records.runs_root())
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        lines.append(f"{preset}: {len(own)} unfinished run(s) staged ({len(copies)} files)")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
    lines.append(f'{folder.name}/: {size:.1f} MiB; carry it with the data: carry ["data", "{folder.name}"]')
    return lines


def unpack(folder: Path) -> list[str]:
    """Put the sitting's parts into this checkout (see the module's docstring); a line per decision."""
    parts = sorted(folder.glob("sitting-*.tar"))
    if not parts:
        raise UserError(f"{folder} holds no sitting-*.tar: give the folder a GPU sitting's --out came back to.")
    kept_files, run_files = {}, {}
    for part in parts:
        with tarfile.open(part) as archive:
            for member in archive.getmembers():
                top, _, rest = member.name.partition("/")
                if not member.isfile() or top not in ("runs", "reports") or ".." in Path(rest).parts:
                    continue
                data = archive.extractfile(member).read()
                if top == "reports":
                    kept_files[records.reports_root() / rest] = data
                else:
                    path = records.runs_root() / rest
                    run_files.setdefault(path.parent, {})[path.name] = data
    added = 0
    for target, data in kept_files.items():  # kept records: added, never overwritten
        if not target.exists():
            records.write_bytes(target, data)
            added += 1
    outcomes = [_place(directory, files) for directory, files in run_files.items()]
    return [
        f"unpacked {len(parts)} part(s): {added} kept files added, {outcomes.count('placed')} runs advanced or "
        f"added, {len(outcomes) - outcomes.count('placed')} runs kept as they were"
    ]


def _place(directory: Path, files: dict[str, bytes]) -> str:
    """A run that ended on the device arrives whole (record last) where it has no record here; an unfinished
    one goes through parking.place_run (only forward, as a whole)."""
    if records.RECORD not in files:
        return place_run(directory, files) if records.CHECKPOINT in files else "kept"
    if (directory / records.RECORD).is_file():
        return "kept"
    for name, data in sorted(files.items(), key=lambda item: item[0] == records.RECORD):
        records.write_bytes(directory / name, data)
    return "placed"


def progress_lines(preset: str) -> list[str]:
    """One line per run of the preset found in runs/: finished, or the epochs its checkpoint holds."""
    lines = []
    base = records.runs_root() / preset
    for directory in sorted(
        {p.parent for p in base.rglob(records.CHECKPOINT)} | {p.parent for p in base.rglob(records.RECORD)}
    ):
        if records.SUPERSEDED in directory.parts:
            continue
        record = records.read_record(directory)
        name = directory.relative_to(base).as_posix()
        if is_finished(record):
            lines.append(f"  finished  {name}: top-1 {100 * record['top1']:.2f} %")
        elif (directory / records.CHECKPOINT).is_file():
            epoch = epochs((directory / records.CHECKPOINT).read_bytes())
            lines.append(f"  partial   {name}: {epoch} epochs checkpointed")
    return lines
