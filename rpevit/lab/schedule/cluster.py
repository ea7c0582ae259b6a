"""Study runner on a Ray cluster: one Ray Core task per run of a preset's grid.

`run_study_ray` runs the grid cells `study.run_study` runs, each through the same
`cell.run_cell` (repair, train, evaluate, keep), with the same preflight and summary; only the
cells go to Ray tasks instead of one loop. The driver only looks (`cell.settle` without repairs)
to choose the cells that have work. Ray does all the scheduling (resources per task:
`cpus_per_run` CPUs and `gpus_per_run` GPUs, fractional GPUs pack several runs on one GPU) and
retries a task whose worker process died (`max_retries`); the retried task resumes the run from
its last epoch checkpoint. Python errors are not retried: the run is reported failed by name and
the other runs go on.

Records and checkpoints on disk are the source of truth, so the runs root (and, for presets with
keep_records, the reports root) must be one directory that the driver and every worker see at the
same path (a shared filesystem on a multi-node cluster). Each task checks that: it must be able
to write there and to see a check file the driver wrote there, else the run fails with one message saying so.

Ray Core tasks, not Ray Tune: a run is already a complete, checkpointed job writing its own
record; Tune would add its own trial directories, state and checkpoints beside them (two sources
of truth), and its search and early-stopping schedulers have nothing to do in a fixed grid.
Ray is an optional extra (`pip install -e '.[cluster]'`), imported only once a study on Ray is asked for.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import socket
import sys
import time
from pathlib import Path

from ...core.errors import UserError
from ..params import Params
from ..progress import Progress, label
from ..schema import finished, result_view
from ..store import catalog, records
from ..store.run import Run
from ..training import runs
from . import study
from .cell import cells, failure_row, run_cell, run_pack, settle

# Ray runs its workers at niceness 15 by default: beside any other busy process (a second runner, a test
# session) they then get a few per cent of a core, so a local cluster's runs would train far slower than the
# sequential engine's and `compare_engines` would measure the niceness. Its runs are the work: niceness 0.
# (ray.init adds its own keys to the dict it is given: pass a copy.)
LOCAL_CONFIG = {"worker_niceness": 0}
INSTALL_HINT = "--engine ray needs Ray: pip install -e '.[cluster]' (or pip install 'ray>=2.9')"
SHARED_CHECK_PREFIX = runs.SHARED_CHECK_PREFIX


def import_ray():
    """The ray module, or one UserError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    return ray


def result_fields(record: dict) -> dict:
    """The fields of a record that make up its result (no timings, hosts or dates)."""
    return result_view(record)


# --------------------------------------------------------------------------------------------
# worker side (runs inside Ray worker processes)


class _Board:
    """A Ray actor the tasks tell when they start (host, pid) and end, so the driver can show what runs."""

    def __init__(self):
        self.events = []

    def put(self, event: dict) -> None:
        self.events.append(event)

    def drain(self) -> list:
        events, self.events = self.events, []
        return events


_DATASET_CACHE: dict = {}  # one dataset per worker process: Ray reuses workers for later tasks


def _dataset(params: Params, name: str, loader):
    if loader is not None:
        return loader(params, name)
    key = (name, params.data, params.train.device)
    if key not in _DATASET_CACHE:
        _DATASET_CACHE.clear()
        _DATASET_CACHE[key] = runs.dataset_for(params, name)
    return _DATASET_CACHE[key]


def _check_shared(runs_root: str, check_name: str, host: str) -> None:
    """One UserError unless this worker can write the runs root and sees the driver's check file."""
    runs.check_runs_root(runs_root)
    if not runs.sees_check_file(runs_root, check_name):
        raise UserError(
            f"the runs directory {runs_root} on worker host {host} is not the driver's: the check file "
            f"{check_name} the driver wrote there is missing. Every node must see the runs directory at the "
            "same path (a shared filesystem such as NFS or Lustre); set it with $RPEVIT_RUNS."
        )


def _clear_stale_foreign_lock(out_dir: Path) -> None:
    """A run's lock left by a dead process on another node of the cluster is stale: remove it.

    RunLock can tell a dead process only on its own host, and Ray may retry a killed task on
    another node; so ask the lock's host (a zero-CPU task pinned to that node) whether the
    process is alive. Hosts that are not in the cluster are left alone (RunBusy as usual).
    """
    lock = Path(out_dir) / records.LOCK
    try:
        pid, host = lock.read_text().split()
    except (OSError, ValueError):
        return
    if host == socket.gethostname():
        return  # RunLock handles its own host
    ray = import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("NodeManagerHostname") == host]
    if not nodes:
        return
    probe = ray.remote(records.pid_alive).options(
        num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[0]["NodeID"], soft=False)
    )
    try:
        alive = ray.get(probe.remote(int(pid)), timeout=60)
    except Exception:  # node gone meanwhile, probe timed out: cannot tell, leave the lock
        return
    if not alive:
        print(f"taking over {lock}: process {pid} on {host} is gone", flush=True)
        lock.unlink(missing_ok=True)


def _tell(ray, board, event: dict) -> None:
    """Tell the driver's board (waiting up to a minute until it has the event: a board still starting
    gets it later); progress never fails a run."""
    try:
        ray.get(board.put.remote(event), timeout=60)
    except Exception as exc:
        print(f"(progress event not confirmed: {type(exc).__name__})", flush=True)


def _run_task(
    runs: list[Run],
    check_name: str,
    cpus_per_run: int,
    board,
    dataset_loader=None,
) -> dict:
    """One cell (or one pack of one variant's cells) on a Ray worker, through cell.run_cell (repair,
    train resuming from its checkpoint, evaluate, keep) or cell.run_pack; returns {"rows": their
    summary rows, host, pid, seconds, recovered}."""
    import ray
    import torch

    torch.set_num_threads(cpus_per_run)
    host, pid = socket.gethostname(), os.getpid()
    tells = [{"run": run.place, "host": host, "pid": pid} for run in runs]
    for tell in tells:
        _tell(ray, board, {"kind": "running", **tell})
    records.recovered.clear()
    started = time.perf_counter()
    result = {"host": host, "pid": pid, "recovered": records.recovered}
    first = runs[0]

    def load(run=first):
        return _dataset(run.params, run.dataset, dataset_loader)

    try:
        _check_shared(str(first.runs_root), check_name, host)
        for run in runs:
            _clear_stale_foreign_lock(run.dir)
        rows = [run_cell(first, load)] if len(runs) == 1 else run_pack(runs, load)
        return {**result, "rows": rows, "seconds": time.perf_counter() - started}
    except UserError as exc:
        return {**result, "rows": [failure_row(run, "failed", f"{exc} (on {host})") for run in runs]}
    finally:  # the slots are free: the driver counts the runs as no longer running (their results follow)
        for tell in tells:
            _tell(ray, board, {"kind": "ended", **tell})


# --------------------------------------------------------------------------------------------
# driver side


def remote_task(ray, gpus_per_run: float):
    """The Ray remote function of one run. A GPU run gets a fresh worker process (`max_calls=1`,
    set on the function: Ray ignores it in `.options`): a reused worker would keep its CUDA context
    on the previous task's GPU, its cached allocator memory and its dataset cache."""
    return ray.remote(max_calls=1)(_run_task) if gpus_per_run > 0 else ray.remote(_run_task)


def _connect(ray, address):
    """Initialise Ray (reusing an initialised one); returns True if this call started it."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    hint = (
        "Start the cluster first (ray start --head on its head node) and pass the address it prints "
        "(--address HOST:6379), or leave --address out for a local cluster on this machine."
    )
    host, _, port = (address or "").rpartition(":")
    if host and port.isdigit() and "/" not in host:  # HOST:PORT: fail fast (ray.init would retry for minutes)
        try:
            socket.create_connection((host, int(port)), timeout=10).close()
        except OSError as exc:
            raise UserError(f"cannot reach the Ray cluster at {address} ({exc.strerror or exc}). {hint}") from None
    try:
        if address:
            ray.init(address=address)
        else:
            ray.init(
                address="local", num_cpus=os.cpu_count(), include_dashboard=False, _system_config=dict(LOCAL_CONFIG)
            )
    except ConnectionError as exc:
        raise UserError(f"cannot reach the Ray cluster at {address}: {exc}. {hint}") from None
    return True


def _check_resources(ray, cpus_per_run: int, gpus_per_run: float) -> list:
    """The alive nodes; one UserError if no node can hold one run."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    fits = [
        n
        for n in nodes
        if n["Resources"].get("CPU", 0) >= cpus_per_run and n["Resources"].get("GPU", 0) >= gpus_per_run
    ]
    if not fits:
        have = "; ".join(
            f"{n.get('NodeManagerHostname')}: {n['Resources'].get('CPU', 0):g} CPUs, "
            f"{n['Resources'].get('GPU', 0):g} GPUs"
            for n in nodes
        )
        raise UserError(
            f"no node of the Ray cluster can hold one run ({cpus_per_run} CPUs"
            f"{f', {gpus_per_run:g} GPU' if gpus_per_run else ''}); nodes: {have or 'none'}. "
            "Lower --cpus-per-run / --gpus-per-run or add nodes."
        )
    return nodes


def _task_params(params: Params, gpus_per_run: float) -> Params:
    """The preset as the tasks run it: on CUDA when they hold a GPU share, else on CPU."""
    device = params.train.device
    if gpus_per_run == 0 and device == "cuda":
        raise UserError(
            "the preset trains on cuda (train.device) but --gpus-per-run is 0; give each run a GPU "
            "share, e.g. --gpus-per-run 0.25, or use --device cpu."
        )
    if device == "auto":
        device = "cuda" if gpus_per_run > 0 else "cpu"
    return dataclasses.replace(params, train=dataclasses.replace(params.train, device=device))


# long: a 35-line docstring documents each option of `study --engine ray`; the body is 55 lines
def run_study_ray(
    params: Params,
    *,
    address: str | None = None,
    gpus_per_run: float = 0.0,
    cpus_per_run: int = 1,
    runs_root=None,
    reports_root=None,
    max_retries: int = 3,
    progress: bool | None = None,
    dataset_loader=None,
    on_event=None,
    pack_size: int | None = None,
    time_limit=None,
    gates=(),
) -> list[dict]:
    """Run every missing run of the preset's grid as Ray tasks, then write the summary.

    Like `study.run_study`: preflight first, then one task per cell with work (cell.run_cell on a
    worker: repairs, training resumed from its checkpoint, the multi-resolution evaluation, keeping;
    diverged runs recorded and not retried), then reports/<preset>/summary.{csv,md}. Each run is one
    task holding `cpus_per_run` CPUs (and as many torch threads) and `gpus_per_run` GPUs (fractions
    pack runs on one GPU); a task whose worker dies is retried up to `max_retries` times. `address`:
    a running Ray cluster (HOST:PORT, or "auto" for the one `ray start` began on this machine; else
    $RAY_ADDRESS, else a new local cluster on this machine's cores, shut down at the end); an
    initialised Ray is reused. `progress`: a tqdm bar (True), one line per event (False), or by
    whether stdout is a terminal (None). `dataset_loader(params, name)`: a picklable module-level
    function loading a dataset in the workers (default `runs.dataset_for`). `on_event(dict)` is
    called in the driver for every event (kind running/done/failed/diverged/skipped, dataset,
    variant, seed, host, pid, attempt). `pack_size` (the pack engine on Ray; 0: no limit): each task
    trains one pack of a variant's runs (cell.run_pack) on its CPUs and GPU share, so with
    `gpus_per_run=1` Ray places one pack per GPU; a design's adaptive order keeps one run per task.
    Which runs start, and in which order, is the sequential engine's (study.plain_order, or for a designed
    study study.designed_order with the runs submitted counted as in flight), drawn as the cluster's slots
    free up; `time_limit` (rpevit.lab.schedule.time_limit) applies its rule at each draw — a run starts only if it is
    expected to finish in the time left then; the others are not started (and say so), as with `gates`.

    Returns the records of the grid in grid order, plus a row with status `failed` or `skipped`
    (and its `message`) for each run that failed or was skipped in this sitting.
    """
    ray = import_ray()
    _check_shares(cpus_per_run, gpus_per_run)
    task_params = _task_params(params, gpus_per_run)
    root = Path(runs_root or records.runs_root()).resolve()
    runs.preflight(
        dataclasses.replace(task_params, train=dataclasses.replace(task_params.train, device="cpu")), runs_root=root
    )  # the driver needs no GPU: the workers check their device
    records.recovered.clear()
    grid = cells(task_params, catalog.grid(params), root, Path(reports_root or records.reports_root()).resolve())
    states = [settle(run, repair=False) for run in grid]
    study.check_precision(task_params, states)
    todo = [(run, state) for run, state in zip(grid, states) if state.work]
    tty = sys.stdout.isatty() if progress is None else progress
    meter = Progress(len(todo), tty, on_event, name=f"study {params.name}")
    pending: dict = {}  # Ray object ref → the runs of its task
    order = _draw_order(params, todo, meter, (time_limit, gates), pack_size, pending)
    first = next(order, None) if todo else None
    if first is None:  # nothing for Ray to do: no cluster needed
        meter.close()
        study.announce(params, states)
        return study.summarise(params, grid, {}, [])
    order = itertools.chain([first], order)

    started_ray = _connect(ray, address)
    check = runs.write_check_file(root)
    try:
        nodes = _check_resources(ray, cpus_per_run, gpus_per_run)
        total_cpus = sum(n["Resources"].get("CPU", 0) for n in nodes)
        total_gpus = sum(n["Resources"].get("GPU", 0) for n in nodes)
        study.announce(
            params,
            states,
            f" on Ray ({len(nodes)} node{'s' * (len(nodes) != 1)}, {total_cpus:g} CPUs, {total_gpus:g} GPUs; "
            f"each run {cpus_per_run} CPU{'s' * (cpus_per_run != 1)}"
            f"{f' + {gpus_per_run:g} GPU' if gpus_per_run else ''})",
        )
        slots = max(1, int(total_gpus // gpus_per_run if gpus_per_run else total_cpus // cpus_per_run))
        shares = {"num_cpus": cpus_per_run, "num_gpus": gpus_per_run, "max_retries": max_retries}
        rows, outcomes, worker_notes = _dispatch(ray, order, pending, slots, shares, check.name, meter, dataset_loader)
    except BaseException:
        for ref in pending:  # interrupted: stop this sitting's tasks (their checkpoints stay)
            ray.cancel(ref, force=True)
        raise
    finally:
        meter.close()
        check.unlink(missing_ok=True)
        if started_ray:
            ray.shutdown()
    results = study.summarise(params, grid, rows, records.recovered + worker_notes)
    counts = {kind: sum(o == kind for o in outcomes.values()) for kind in ("done", "diverged", "failed", "skipped")}
    print(
        f"study {params.name}: {counts['done']} done, {counts['diverged']} diverged, {counts['failed']} failed, "
        f"{counts['skipped']} skipped in this sitting; {len(finished(results))} of {len(grid)} runs finished",
        flush=True,
    )
    return results + [rows[run.place] for run in grid if rows.get(run.place, {}).get("status") in ("failed", "skipped")]


def _check_shares(cpus_per_run, gpus_per_run) -> None:
    """One `error:` line for a share of the cluster a run cannot take."""
    if not (isinstance(cpus_per_run, int) and cpus_per_run >= 1):
        raise UserError(f"--cpus-per-run must be a positive integer, not {cpus_per_run!r}.")
    if not 0 <= gpus_per_run <= 1:  # a run trains on one device
        raise UserError(
            f"--gpus-per-run must be in [0, 1] (a run uses one GPU at most; 0.25 packs 4 runs on a "
            f"GPU), not {gpus_per_run!r}."
        )


def _draw_order(params: Params, todo: list, meter, limits: tuple, pack_size, pending: dict):
    """One scheduler for every engine: the sequential engine's order, drawn as the cluster's slots free
    up — a list of (run, state) per task, or None while a designed study waits on its submitted runs
    (each run chosen when a slot frees, the runs submitted counting as in flight); `limits`: (time limit, gates)."""
    time_limit, gates = limits
    if params.design.active:
        submitted = functools.partial(_places, pending)
        return (item and [item] for item in study.designed_order(params, todo, meter, time_limit, submitted))
    if pack_size is not None:
        return iter(study.packs(list(study.plain_order(params, todo, time_limit, gates)), pack_size))
    return ([item] for item in study.plain_order(params, todo, time_limit, gates))


def _dispatch(ray, order, pending: dict, slots: int, shares: dict, check_name: str, meter, dataset_loader):
    """Keep `slots` tasks running from `order` until it is drawn dry and every task has returned;
    report each event to `meter`. Returns (rows by place, outcome kind by place, workers' notes)."""
    rows, outcomes, worker_notes, attempts = {}, {}, [], {}
    board = ray.remote(num_cpus=0)(_Board).remote()
    news = BoardNews(ray, board)
    task = remote_task(ray, shares["num_gpus"])

    def submit() -> None:  # None from the order: nothing to start until a submitted run ends
        while len(pending) < slots and (group := next(order, None)) is not None:
            runs_ = [run for run, _ in group]
            ref = task.options(
                **shares,
                retry_exceptions=False,
                name=f"rpevit {runs_[0].variant} {runs_[0].dataset} seed{','.join(str(r.seed) for r in runs_)}",
            ).remote(runs_, check_name, shares["num_cpus"], board, dataset_loader)
            pending[ref] = runs_

    submit()
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
        for event in news.take(complete=bool(ready)):  # in the order they happened, before the results
            key = tuple(event["run"])  # a run that ended: its running event first
            if event["kind"] == "ended":
                meter.ended(key)
            elif key not in outcomes:
                attempts[key] = attempts.get(key, 0) + 1
                meter.event("running", key, host=event["host"], pid=event["pid"], attempt=attempts[key])
        for ref in ready:
            group = pending.pop(ref)
            for run, (kind, message, info) in zip(group, _outcomes(ray, ref, group), strict=True):
                worker_notes += info.pop("recovered", [])
                rows[run.place] = info.pop("row", None) or failure_row(run, kind, message)
                outcomes[run.place] = kind
                meter.event(kind, run.place, message, attempt=attempts.get(run.place, 1), **info)
        submit()
    return rows, outcomes, worker_notes


def _places(pending: dict) -> set:
    """The places of the runs submitted and not yet ended (pending: task → its runs)."""
    return {run.place for group in pending.values() for run in group}


class BoardNews:
    """The board's events for the driver's loop, one drain call in flight at a time. A slow board (a
    loaded machine: its actor may take a minute to start) only delays the running lines; events
    are never dropped, and only a board that is gone, or silent for `patience` seconds when a
    result waits on it, ends them (progress display only: results are unaffected)."""

    def __init__(self, ray, board, patience: float = 600.0):
        self.ray, self.board, self.patience, self.call = ray, board, patience, None

    def take(self, complete: bool = False) -> list:
        """New events: whatever the board has answered so far, or — `complete` — everything it
        holds now (the in-flight answer and one more drain), waiting for it."""
        if self.board is None:
            return []
        events = []
        # complete: the in-flight call may predate the latest events, so then one more drain after it
        for _ in range(2 if complete and self.call is not None else 1):
            if self.call is None:
                self.call = self.board.drain.remote()
            ready, _ = self.ray.wait([self.call], timeout=self.patience if complete else 0)
            if not ready:
                if complete:
                    self._give_up(f"no answer in {self.patience:g} s")
                return events
            call, self.call = self.call, None
            try:
                events += self.ray.get(call)
            except self.ray.exceptions.RayError as exc:
                self._give_up(type(exc).__name__)
                return events
        return events

    def _give_up(self, why: str) -> None:
        print(f"(running events unavailable from now on: {why}; results still follow)", flush=True)
        self.board = None


def _outcomes(ray, ref, group: list[Run]) -> list[tuple]:
    """(kind, message, info) of each run of a finished task: done / diverged / skipped / failed; info
    holds the worker's host, pid, recovered notes (with the task's first run) and the cell's summary row."""
    name = ", ".join(label(*run.place) for run in group)
    try:
        result = ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None) or exc
        print(f"error in {name}:\n{exc}", file=sys.stderr, flush=True)  # the worker's traceback
        last = str(cause).strip().splitlines()[-1] if str(cause).strip() else ""
        return [("failed", f"{type(cause).__name__}: {last}", {}) for _ in group]
    except ray.exceptions.RayError as exc:  # the worker (or its node) died on every attempt
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return [("failed", f"{type(exc).__name__}: its worker died on every attempt ({first})", {}) for _ in group]
    found = []
    for i, (run, row) in enumerate(zip(group, result["rows"], strict=True)):
        notes = result.get("recovered", []) if i == 0 else []  # the task's notes, told once
        info = {"host": result.get("host"), "pid": result.get("pid"), "recovered": notes}
        found.append(_outcome_of(run, row, info, result.get("seconds", 0.0)))
    return found


def _outcome_of(run: Run, row: dict, info: dict, seconds: float) -> tuple:
    status = row.get("status")
    if status in ("failed", "skipped", "diverged"):
        return status, row.get("message", ""), {**info, "row": row}
    if catalog.current_record(run) is None:
        message = (
            f"the worker on {info['host']} finished the run but its record is not in {run.runs_root} as "
            "the driver sees it: every node must see the runs directory at the same path (a shared filesystem)"
        )
        return "failed", message, info
    top1 = row.get("top1")
    message = (f"top-1 {100 * top1:.2f}%, " if top1 is not None else "") + f"{seconds:.0f} s on {info['host']}"
    return "done", message, {**info, "row": row}
