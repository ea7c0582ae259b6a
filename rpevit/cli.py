"""rpevit — train and compare Vision Transformers whose attention is exact softmax or a linear-time
Performer (FAVOR+, ReLU), each with relative or absolute positional encodings, and regenerate the
study's tables and notebooks from the run records.

A mistake in a command or preset prints one `error:` line and exits with status 2."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from .core.errors import UserError
from .lab.schema import is_finished
from .lab.tables import markdown_table


def _params(args):
    from .lab.params import load_params
    from .lab.store.catalog import reference_runs
    from .lab.training.continuation import check_donor_runs

    params = load_params(args.params)
    data = dataclasses.replace(
        params.data,
        root=getattr(args, "data_root", None) or params.data.root,
        download=params.data.download or getattr(args, "download", False),
    )
    train = params.train if not getattr(args, "device", None) else dataclasses.replace(params.train, device=args.device)
    only = tuple(b.strip() for b in (getattr(args, "capture_only", None) or "").split(",") if b.strip())
    if getattr(args, "capture", False) or only:  # train.compile is neutral: run keys and records stay the same
        train = dataclasses.replace(train, compile=True, compile_backends=only or train.compile_backends)
        train.check()
    if params.reference:  # the runs it reads must be the ones it would train: one error line before any
        reference_runs(params)
    check_donor_runs(params)  # a preset that `continues` another: the runs it goes on from are its own
    return dataclasses.replace(params, data=data, train=train)


def _dataset(args, params):
    """Load --dataset (default: the preset's first) onto the preset's device."""
    from .lab.training.runs import dataset_for

    return dataset_for(params, args.dataset)


def cmd_list(args) -> int:
    """Print backends, positional methods, variants, datasets and presets (rpevit/listing.py)."""
    from .listing import list_command

    return list_command(args)


def cmd_train(args) -> int:
    """Train one variant of a preset on one dataset (data-parallel when started by torchrun)."""
    from .core.variants import parse_variant
    from .lab.schedule.study import check_run_precision
    from .lab.store import records
    from .lab.store.run import Run
    from .lab.training import distributed
    from .lab.training.runs import preflight
    from .lab.training.train import train_run

    params = _params(args)
    variant = parse_variant(args.variant).name
    if args.epochs is not None and args.epochs < 1:
        raise UserError(f"--epochs: {args.epochs} is not valid; it must be a positive integer.")
    if args.seed < 0:
        raise UserError(f"--seed: {args.seed} is not valid; seeds must be integers ≥ 0.")
    dataset_name = args.dataset or params.datasets[0]

    def train():
        preflight(
            dataclasses.replace(params, datasets=(dataset_name,)) if dataset_name in params.datasets else params,
            variants=[variant],
        )
        run = Run(params, dataset_name, variant, args.seed, args.epochs)
        check_run_precision(params, run)
        dataset = _dataset(args, params)
        return run.dir, train_run(run, dataset, resume=args.resume, progress=not args.no_progress)

    # torchrun (WORLD_SIZE > 1): join the process group before the dataset goes to this rank's device
    if distributed.init(params.train.device):
        main = distributed.is_main()
        try:
            distributed.check_shared_runs_root(records.runs_root())
            out_dir, record = train()
            distributed.barrier()  # leave together: no rank tears the group down while rank 0 still tests
        except distributed.PeerFailed as exc:  # rank 0 prints the error, once
            return exc.code
        finally:
            distributed.teardown()
        if not main:
            return 0
    else:
        out_dir, record = train()
    if not is_finished(record):
        print(f"this run is recorded as {record.get('status')}: {record.get('message', '')}")
        return 1
    print(
        f"test top-1 {100 * record['top1']:.2f}% (best epoch {record['best_epoch']}); record: "
        f"{out_dir / records.RECORD}"
    )
    return 0


def cmd_study(args) -> int:
    """Run (or resume) a preset's grid and write reports/<preset>/summary.{csv,md}; installed hooks prepare it
    and gate each start (rpevit.lab.hooks)."""
    from .core.device import resolve_device
    from .lab import hooks
    from .lab.params import check_clean_revision
    from .lab.schedule.study import run_study, started_runs
    from .lab.schedule.time_limit import TimeLimit, parse_duration
    from .lab.store.records import reports_root

    params = _params(args)
    check_clean_revision(args.params, args.allow_dirty)  # a pre-registered preset: a clean, committed revision
    for line in hooks.prepare(params):
        print(line)
    limit = None if args.time_limit is None else TimeLimit(parse_duration(args.time_limit))
    if (refused := hooks.refusal(params)) and not started_runs(params):  # a gate that refuses starts nothing
        print(refused)
        return 0
    gates = (lambda run: hooks.refusal(params, run.runs_root, run.reports_root),)
    if args.engine == "ray":
        from .lab.schedule.cluster import run_study_ray

        if args.pack_size is not None and args.pack_size < 1:
            raise UserError(f"--pack-size {args.pack_size} is not valid: a positive integer.")

        results = run_study_ray(
            params,
            address=args.address,
            gpus_per_run=0.0 if args.gpus_per_run is None else args.gpus_per_run,
            cpus_per_run=1 if args.cpus_per_run is None else args.cpus_per_run,
            progress=False if args.no_progress else None,
            pack_size=args.pack_size,
            time_limit=limit,
            gates=gates,
        )
        failed = [r for r in results if r.get("status") in ("failed", "skipped")]
        print(
            f"{len(results) - len(failed)} runs recorded, {len(failed)} failed or skipped; "
            f"summary: {reports_root() / params.name / 'summary.md'}"
        )
        return 1 if failed else 0
    if args.address or args.gpus_per_run is not None or args.cpus_per_run is not None:
        raise UserError("--address, --gpus-per-run and --cpus-per-run need --engine ray.")
    if args.pack_size is not None and (args.pack_size < 1 or args.engine not in (None, "pack")):
        raise UserError(f"--pack-size {args.pack_size} is not valid: a positive integer, with --engine pack or ray.")
    engine = args.engine or ("pack" if resolve_device(params.train.device).type == "cuda" else "sequential")
    pack_size = (args.pack_size or 0) if engine == "pack" else None
    results = run_study(params, progress=not args.no_progress, time_limit=limit, pack_size=pack_size, gates=gates)
    print(f"{len(results)} runs recorded; summary: {reports_root() / params.name / 'summary.md'}")
    return 0


def cmd_evaluate(args) -> int:
    """Evaluate a finished run at other input resolutions (extrapolation / interpolation modes)."""
    from .lab.store.run import Run
    from .lab.training.evaluate import evaluate_resolutions

    params = _params(args)
    try:
        resolutions = [int(r) for r in args.resolutions.split(",")]
    except ValueError:
        raise UserError(
            f"--resolutions: {args.resolutions!r} is not a comma-separated list of integers (e.g. 20,28,36)."
        ) from None
    patch = params.model.patch_size
    bad = [r for r in resolutions if r < patch or r % patch]
    if bad:
        raise UserError(
            f"--resolutions: {bad} are not positive multiples of model.patch_size = {patch}; "
            "give image sizes divisible by the patch size."
        )
    dataset = _dataset(args, params)
    rows = evaluate_resolutions(run := Run(params, dataset.info.name, args.variant, args.seed), dataset, resolutions)
    print(
        markdown_table([{"resolution": r["resolution"], "mode": r["mode"], "top-1 %": 100 * r["top1"]} for r in rows])
    )
    print(f"stored in its record: {run.rooted().dir / 'record.json'} (resolution_eval)")
    return 0


def cmd_notebooks(args) -> int:
    """Execute the study notebooks with papermill into reports/<preset>/ and index them."""
    from .report.notebooks import execute_notebooks

    outputs = execute_notebooks(
        args.params,
        only=args.only.split(",") if args.only else None,
        kernel=args.kernel,
        reports_root=args.reports,
        cell_timeout=args.cell_timeout,
        train=not args.no_train,
    )
    print(f"{len(outputs)} notebooks executed; index: {outputs[0].parent / 'README.md' if outputs else '—'}")
    return 0


def cmd_retime(args) -> int:
    """Time finished runs' inference again on a quiet machine (runs first timed on a busy one)."""
    from .lab.schedule.study import retime_study
    from .lab.store.records import reports_root

    retimed = retime_study(params := _params(args), everything=args.all)
    print(f"{len(retimed)} runs re-timed: their records (and kept copies), summary {reports_root() / params.name}")
    return 0


def cmd_doctor(args) -> int:
    """The installation: torch and its build, the device, and the dtypes it computes in."""
    import torch

    from .core.device import resolve_device

    cuda = torch.cuda.is_available()
    print(f"torch {torch.__version__} ({'CUDA ' + torch.version.cuda if torch.version.cuda else 'CPU build'})")
    print(f"device: {torch.cuda.get_device_name(0) if cuda else 'cpu only (no CUDA device)'}")
    device = resolve_device("auto")
    bf16 = torch.cuda.is_bf16_supported() if cuda else True
    print(f"dtypes on {device.type}: float32, float64{', bfloat16' if bf16 else ''}")
    return 0


def cmd_status(args) -> int:
    """Where a study stands: finished runs, runs in flight, what it still wants and how long that takes."""
    from .lab.schedule.reproduction import reproduction_line
    from .lab.schedule.status import status_lines

    params = _params(args)  # --reproduced: one line, does this machine have the committed top-1 of each run?
    print(reproduction_line(params) if args.reproduced else "\n".join(status_lines(params)))
    return 0


def cmd_keep_weights(args) -> int:
    """Keep one finished run's tested weights per variant beside a preset's kept records."""
    from .lab.store.catalog import study_records
    from .lab.store.records import reports_root
    from .lab.training.runs import keep_weights

    params = _params(args)
    lines = keep_weights(params, study_records(params))
    print("\n".join(lines))
    if any(": kept " in line for line in lines):
        print(f"commit them with the records: git add {reports_root() / params.name / 'records'}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `error: <what> (see python -m rpevit <command> --help)`, status 2."""

    def error(self, message):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def command_parser(prog: str, description: str, epilog: str):
    """(parser, its sub-command group): one-line errors (`_Parser`), the description and examples kept as written."""
    parser = _Parser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog
    )
    return parser, parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)


# long: the CLI's one declarative table, a few lines per command; split, its commands would scatter
def build_parser() -> argparse.ArgumentParser:
    """The argparse parser for every sub-command."""
    parser, sub = command_parser("python -m rpevit", __doc__, EXAMPLES)

    listing = sub.add_parser("list", help="list backends, positional methods, variants, datasets and presets")
    listing.add_argument(
        "what", nargs="?", default="all", choices=["all", "backends", "positions", "variants", "datasets", "presets"]
    )
    listing.add_argument("--backend", help="only this backend's variants, e.g. favor")
    listing.add_argument("--position", help="only variants using this positional method, e.g. krpe")
    listing.add_argument(
        "--mechanism", help="only methods (and variants using one) of this mechanism: rotary, bias, gate, absolute"
    )

    def add_common(p):
        p.add_argument("--data-root", help="directory holding dataset files (also $RPEVIT_DATA)")
        p.add_argument("--download", action="store_true", help="allow torchvision to download datasets")
        p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="override train.device")
        p.add_argument("--no-progress", action="store_true", help="no progress bars")
        p.add_argument(
            "--capture", action="store_true", help="graph-capture the training step (torch.compile; train.compile)"
        )
        p.add_argument(
            "--capture-only", metavar="BACKENDS", help="capture only these backends' steps, e.g. favor (on this CPU)"
        )

    train = sub.add_parser("train", help="train one variant")
    train.add_argument("--params", required=True, help="preset name or YAML path, e.g. params/smoke.yaml")
    train.add_argument("--variant", required=True, help="e.g. softmax+ape (see `list`)")
    train.add_argument("--dataset", help="dataset (default: the preset's first)")
    train.add_argument("--epochs", type=int, help="override train.epochs")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    add_common(train)

    study = sub.add_parser("study", help="run or resume a preset's grid")
    study.add_argument("params", help="preset name or YAML path")
    study.add_argument(
        "--engine",
        choices=["sequential", "pack", "ray"],
        help="sequential: one run after another in this process (default on CPU); pack: the runs of one variant "
        "in one vectorised step (default on CUDA); ray: one Ray task per run",
    )
    study.add_argument(
        "--pack-size",
        type=int,
        help="--engine pack: at most this many runs per pack (default: all); --engine ray: one pack per task",
    )
    study.add_argument(
        "--address",
        help="--engine ray: a running Ray cluster, HOST:6379 or auto "
        "(default: $RAY_ADDRESS, else a new local Ray on this machine)",
    )
    study.add_argument(
        "--gpus-per-run", type=float, help="--engine ray: GPU share per run, ≤ 1 (0.25 packs 4 runs per GPU)"
    )
    study.add_argument("--cpus-per-run", type=int, help="--engine ray: CPUs per run = its torch threads (default 1)")
    study.add_argument("--allow-dirty", action="store_true", help="train a pre-registered preset from uncommitted code")
    study.add_argument(
        "--time-limit",
        metavar="DURATION",
        help="start no run that is not expected to finish within this time from now (e.g. 2h30m, 90m): a "
        "sitting of fixed length ends between runs; estimated from the preset's finished runs",
    )
    add_common(study)

    evaluate = sub.add_parser("evaluate", help="evaluate a finished run at other input resolutions")
    evaluate.add_argument("--params", required=True, help="preset name or YAML path")
    evaluate.add_argument("--variant", required=True)
    evaluate.add_argument("--dataset", help="dataset (default: the preset's first)")
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument("--resolutions", required=True, help="comma-separated image sizes, e.g. 20,28,36,44")
    add_common(evaluate)

    notebooks = sub.add_parser("notebooks", help="execute the study notebooks into reports/<preset>/")
    notebooks.add_argument("params", help="preset name or YAML path")
    notebooks.add_argument("--only", help="comma-separated notebook name prefixes, e.g. 00,40")
    notebooks.add_argument("--kernel", default="python3", help="Jupyter kernel name")
    notebooks.add_argument("--reports", type=Path, help="write the report into DIR/<preset>/, not reports/<preset>/")
    notebooks.add_argument(
        "--cell-timeout",
        type=int,
        help="seconds one cell may run before the notebook fails "
        "(default $RPEVIT_CELL_TIMEOUT or 900; training cells "
        "are exempt)",
    )
    notebooks.add_argument(
        "--no-train",
        action="store_true",
        help="report only the runs that have finished; train none of the missing ones "
        "(an interim report of a study still training elsewhere)",
    )

    retime = sub.add_parser("retime", help="time finished runs' inference again (those timed on a busy machine)")
    retime.add_argument("params", help="preset name or YAML path")
    retime.add_argument("--all", action="store_true", help="every finished run, not only those timed when busy")
    add_common(retime)

    status = sub.add_parser(
        "status", help="where a study stands: runs finished and in flight, what it still wants, hours left"
    )
    status.add_argument("params", help="preset name or YAML path")
    status.add_argument(
        "--reproduced", action="store_true", help="one line: do the runs here have the committed top-1?"
    )

    keep = sub.add_parser(
        "keep-weights",
        help="keep one run's tested weights per variant beside a preset's kept records (for a fresh clone's maps)",
    )
    keep.add_argument("params", help="preset name or YAML path (keep_records: true)")

    sub.add_parser("doctor", help="check the installation: torch, the device, its dtypes")

    from .bench_cli import add_bench_parser

    add_bench_parser(sub)
    return parser


EXAMPLES = """examples:
  python -m rpevit list variants --backend favor
  python -m rpevit study smoke                       run or resume a preset's grid (params/smoke.yaml)
  python -m rpevit train --params smoke --variant favor+rope_mixed --epochs 1
  python -m rpevit evaluate --params smoke --variant softmax+ape --resolutions 20,28,36
  python -m rpevit notebooks smoke                   regenerate reports/smoke/ from the run records
  python -m rpevit notebooks fmnist_converged --no-train   an interim report: finished runs only, none trained
  python -m rpevit status fmnist_converged          runs finished and in flight, what the design wants, hours left
  python -m rpevit keep-weights fmnist_converged     one seed's tested weights per variant beside its kept records
  python -m rpevit bench attention                   time and memory of one layer vs tokens
  python -m rpevit doctor                            torch, the device and its dtypes
"""


def _bench(args) -> int:
    from .bench_cli import cmd_bench

    return cmd_bench(args)


COMMANDS = {
    "list": cmd_list,
    "train": cmd_train,
    "study": cmd_study,
    "evaluate": cmd_evaluate,
    "notebooks": cmd_notebooks,
    "retime": cmd_retime,
    "status": cmd_status,
    "keep-weights": cmd_keep_weights,
    "bench": _bench,
    "doctor": cmd_doctor,
}


def main(argv=None) -> int:
    """Entry point: run a sub-command; user errors → one message, exit status 2. A torchrun rank leaves
    through `distributed.leave`."""
    args = build_parser().parse_args(argv)
    torchrun = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if torchrun and args.command != "train":
        print(
            f"error: torchrun starts several processes; only `train` runs data-parallel (got "
            f"`{args.command}`). Run `python -m rpevit {args.command} …` once, or `--engine ray` for a grid.",
            file=sys.stderr,
        )
        return 2
    code = _dispatch(args)
    if torchrun:
        from .lab.training import distributed

        distributed.leave(code)
    return code


def _dispatch(args) -> int:
    """Run the sub-command; its exit status (user errors → one message, 2)."""
    from .lab.store.records import RunBusy
    from .lab.training.train import Diverged
    from .report.notebooks import NotebookFailed

    try:
        return COMMANDS[args.command](args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early: stop quietly
        _silence_stdout()
        return 0
    except (Diverged, NotebookFailed, RunBusy, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            "interrupted: finished epochs are checkpointed; run the same command again "
            "(with --resume for `train`) to continue.",
            file=sys.stderr,
        )
        return 130


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush stays quiet."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
