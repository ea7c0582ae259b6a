"""Study on Ray (rpevit.lab.schedule.cluster): a real local Ray cluster runs tiny grids; every record equals the
sequential runner's; a worker killed mid-run is retried and resumes from its checkpoint; a failed
run is named and the others go on. The Ray tests are skipped (with the reason shown) only where
Ray is not installed."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
import types

import pytest
import torch

from campaign import bench_engines
from rpevit.core.data import Dataset, Split
from rpevit.core.errors import UserError
from rpevit.lab import progress
from rpevit.lab.params import load_params
from rpevit.lab.progress import Progress
from rpevit.lab.schedule import cluster, study
from rpevit.lab.schedule.cell import cells, settle
from rpevit.lab.store import catalog, records
from rpevit.lab.training import runs

from helpers import require_module, without_times

DATASET_FOR = runs.dataset_for  # the real loader
NO_RAY = "Ray is not installed (pip install -e '.[cluster]'): the Ray engine tests cannot run"


def tiny_loader(params, name, n_train=256):
    """The dataset shrunk (first n_train train / 100 val / 100 test images) — loaded in Ray workers,
    so it is shipped to them by value (see the ray_cluster fixture)."""
    if name != "mnist5k":
        raise RuntimeError(f"no such tiny dataset: {name}")
    data = DATASET_FOR(params, name)

    def cut(split, n):
        return Split(split.images[:n], split.labels[:n])

    return Dataset(data.info, cut(data.train, n_train), cut(data.val, 100), cut(data.test, 100), data.source)


@pytest.fixture(scope="module")
def ray_cluster():
    ray = require_module("ray", NO_RAY)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import test modules
    ray.init(address="local", num_cpus=2, include_dashboard=False, _system_config=dict(cluster.LOCAL_CONFIG))
    yield ray
    ray.shutdown()


@pytest.fixture
def one_thread():
    """The sequential reference runs with the 1 torch thread each Ray task gets (same float sums)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def grid_params(grid_params, tiny_params):
    """conftest's 2 variants × 2 seeds at tiny_params' 2 epochs, multi-resolution evaluation at two sizes."""
    return dataclasses.replace(
        grid_params, train=tiny_params.train, evaluate=dataclasses.replace(tiny_params.evaluate, resolutions=(20, 36))
    )


def sequential(params, root, loader):
    """The in-process sequential runner's records (the reference)."""
    return study.run_study(params, runs_root=root / "runs", reports_root=root / "reports", dataset_loader=loader)


def test_engine_ray_without_ray_says_how_to_install(monkeypatch, tiny_params, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(UserError, match=r"pip install -e '\.\[cluster\]'"):
        cluster.run_study_ray(tiny_params, runs_root=tmp_path)


def test_bad_resources_are_one_clear_error(tiny_params, tmp_path):
    require_module("ray", NO_RAY)
    for wrong in ({"cpus_per_run": 0}, {"cpus_per_run": 1.5}, {"gpus_per_run": 2}, {"gpus_per_run": -0.5}):
        with pytest.raises(UserError, match="-per-run must"):
            cluster.run_study_ray(tiny_params, runs_root=tmp_path, **wrong)
    on_cuda = dataclasses.replace(tiny_params, train=dataclasses.replace(tiny_params.train, device="cuda"))
    with pytest.raises(UserError, match="--gpus-per-run is 0"):
        cluster.run_study_ray(on_cuda, runs_root=tmp_path)


def test_worker_that_does_not_share_the_runs_root_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr(runs.time, "sleep", lambda s: None)
    (tmp_path / "check-a").write_text("driver 1\n")
    cluster._check_shared(str(tmp_path), "check-a", "node-1")  # sees the driver's file: fine
    with pytest.raises(UserError, match="not the driver's.*shared filesystem"):
        cluster._check_shared(str(tmp_path), "check-b", "node-1")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(UserError, match="cannot be written.*every worker can reach"):
        cluster._check_shared(str(tmp_path / "a-file" / "runs"), "check-a", "node-1")


def test_unreachable_cluster_address_is_one_clear_error():
    fake_ray = types.SimpleNamespace(is_initialized=lambda: False, init=lambda **kw: pytest.fail("no init"))
    with pytest.raises(UserError, match="cannot reach the Ray cluster at 127.0.0.1:9.*ray start --head"):
        cluster._connect(fake_ray, "127.0.0.1:9")


def test_a_local_cluster_trains_at_the_drivers_niceness(ray_cluster, monkeypatch):
    """Ray nices its workers to 15 by default, which starves them beside any other busy process: the local
    cluster `_connect` starts asks for niceness 0, and this Ray honours the setting (the fixture passes it)."""
    started = {}
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # `_connect` would join that cluster instead
    fake_ray = types.SimpleNamespace(is_initialized=lambda: False, init=lambda **kw: started.update(kw))
    assert cluster._connect(fake_ray, None) and started["_system_config"]["worker_niceness"] == 0
    assert ray_cluster.get(ray_cluster.remote(lambda: os.nice(0)).remote()) == os.nice(0)


def test_progress_lines(capsys):
    seen = []
    meter = Progress(2, tty=False, on_event=seen.append)
    meter.event("running", ("mnist5k", "softmax+ape", 0), host="h", pid=7, attempt=1)
    meter.event("running", ("mnist5k", "softmax+ape", 0), host="h", pid=8, attempt=2)
    meter.event("done", ("mnist5k", "softmax+ape", 0), "top-1 90.00%")
    meter.event("failed", ("mnist5k", "favor+ape", 0), "RuntimeError: boom")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[0/2 done, 1 running, 0 failed] running: softmax+ape on mnist5k, seed 0 (host h, pid 7)"
    assert "running again, attempt 2" in lines[1] and "resuming from its last checkpoint" in lines[1]
    assert lines[2].startswith("[1/2 done, 0 running, 0 failed] done: softmax+ape on mnist5k, seed 0 — top-1")
    assert lines[3] == "[1/2 done, 0 running, 1 failed] failed: favor+ape on mnist5k, seed 0 — RuntimeError: boom"
    assert [e["kind"] for e in seen] == ["running", "running", "done", "failed"]


def test_progress_eta_ignores_skipped_runs(capsys, monkeypatch):
    clock = iter([0.0, 600.0])  # the meter starts; one 10-minute run later the next one starts
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    meter = Progress(4, tty=False)
    meter.event("skipped", ("mnist5k", "softmax+ape", 1), "busy")
    meter.event("running", ("mnist5k", "favor+ape", 1))
    meter.event("done", ("mnist5k", "favor+ape", 1))
    meter.event("running", ("mnist5k", "relu+ape", 1))
    lines = capsys.readouterr().out.splitlines()
    assert "ETA" not in lines[1]  # nothing trained yet: no estimate from the skipped run's 0 s
    assert lines[3].endswith("running: relu+ape on mnist5k, seed 1; ETA 20.0 min for the remaining runs")


def test_progress_eta_of_a_designed_study_counts_the_runs_its_design_wants(capsys, monkeypatch):
    clock = iter([0.0, 600.0])
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    meter = Progress(90, tty=False, wanted=lambda: (3, None))  # 90 runs in the grid, 3 wanted now, no pace
    meter.event("running", ("mnist5k", "favor+ape", 1))
    meter.event("done", ("mnist5k", "favor+ape", 1))
    meter.event("running", ("mnist5k", "relu+ape", 1))
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.endswith("running: relu+ape on mnist5k, seed 1; ETA 30.0 min for the 3 runs the design wants now")


def test_progress_eta_of_a_designed_study_takes_the_finished_runs_pace(capsys, monkeypatch):
    """A run resumed near its end takes minutes; the pace of the finished runs, not this process's
    mean, says how long the runs left take (a 3-minute resumed run would make 40 runs look like 2 hours)."""
    clock = iter([0.0, 180.0])
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    meter = Progress(90, tty=False, wanted=lambda: (40, 40 * 2100.0))  # 40 runs of 35 min each
    meter.event("running", ("mnist5k", "favor+ape", 1))
    meter.event("done", ("mnist5k", "favor+ape", 1))
    meter.event("running", ("mnist5k", "relu+ape", 1))
    lines = capsys.readouterr().out.splitlines()
    tail = "ETA 23.3 h for the 40 runs the design wants now, one after another at the finished runs' pace"
    assert lines[0].endswith(tail) and lines[-1].endswith(tail)  # known before this process trained a run


class _FakeBoard:
    """Ray and the board in one fake: a drain call answers after `delay` polls (a board still starting
    on a loaded machine; math.inf: never), or raises when the board is `dead`."""

    def __init__(self, delay=0, dead=False):
        self.events, self.delay, self.dead, self.calls = [], delay, dead, 0
        self.exceptions = types.SimpleNamespace(RayError=RuntimeError)
        self.drain = types.SimpleNamespace(remote=self._call)

    def _call(self):
        self.calls += 1
        return {"polls left": self.delay}

    def wait(self, refs, timeout):
        (ref,) = refs
        if ref["polls left"] == math.inf:
            return [], refs
        if ref["polls left"] > 0 and not timeout:
            ref["polls left"] -= 1
            return [], refs
        return refs, []

    def get(self, ref):
        if self.dead:
            raise RuntimeError("the board's actor died")
        events, self.events = self.events, []
        return events


def test_board_news_waits_for_a_slow_board_and_loses_no_event(capsys):
    """Under load the board's actor once took over a minute to answer and the driver gave its running
    events up for the whole study; now a slow board only delays them."""
    board = _FakeBoard(delay=2)
    news = cluster.BoardNews(board, board, patience=5)
    board.events.append("running a")
    assert news.take() == [] and news.take() == []  # still starting: nothing yet, not given up
    assert news.take() == ["running a"] and board.calls == 1  # the same call answered: nothing lost
    board.events.append("running b")
    assert news.take(complete=True) == ["running b"]  # a result waits: all the board holds now
    dead = _FakeBoard(dead=True)
    news = cluster.BoardNews(dead, dead)
    assert news.take() == [] and news.board is None and news.take() == []
    silent = _FakeBoard(delay=math.inf)
    news = cluster.BoardNews(silent, silent, patience=5)
    assert news.take(complete=True) == [] and news.board is None
    out = capsys.readouterr().out
    assert "unavailable from now on: RuntimeError" in out and "unavailable from now on: no answer in 5 s" in out


def test_ray_grid_equals_sequential_and_runs_only_what_is_missing(ray_cluster, grid_params, one_thread, tmp_path):
    loader = functools.partial(tiny_loader, n_train=256)
    reference = sequential(grid_params, tmp_path / "seq", loader)
    assert [r["status"] for r in reference] == ["finished"] * 4

    # a driver stopped earlier left one run finished and one finished without its multi-resolution evaluation
    ray_runs = tmp_path / "ray" / "runs"
    for variant, strip in (("softmax+none", False), ("softmax+ape", True)):
        source = records.run_dir("tiny", "mnist5k", variant, 1, tmp_path / "seq" / "runs")
        target = records.run_dir("tiny", "mnist5k", variant, 1, ray_runs)
        shutil.copytree(source, target)
        if strip:
            record = json.loads((target / records.RECORD).read_text())
            del record["resolution_eval"]
            records.write_json(target / records.RECORD, record)

    events = []
    results = cluster.run_study_ray(
        grid_params,
        cpus_per_run=1,
        runs_root=ray_runs,
        reports_root=tmp_path / "ray" / "reports",
        progress=False,
        dataset_loader=loader,
        on_event=events.append,
    )
    started = {(e["variant"], e["seed"]) for e in events if e["kind"] == "running"}
    assert started == {("softmax+none", 0), ("softmax+ape", 0), ("softmax+ape", 1)}, events  # not the finished one
    assert sorted(e["kind"] for e in events if e["kind"] != "running") == ["done"] * 3, events
    assert len(results) == 4
    for ours, theirs in zip(results, reference):
        ours_fields, theirs_fields = cluster.result_fields(ours), cluster.result_fields(theirs)
        assert ours_fields == theirs_fields, (
            ours["variant"],
            ours["seed"],
            {k: (ours_fields[k], theirs_fields[k]) for k in ours_fields if ours_fields[k] != theirs_fields[k]},
        )
        assert {row["resolution"] for row in ours["resolution_eval"]} == {20, 36}
    assert (tmp_path / "ray" / "reports" / "tiny" / "summary.md").read_text().count("| finished |") == 4
    assert not list(ray_runs.glob(f"{cluster.SHARED_CHECK_PREFIX}*"))  # the driver's check file is cleaned up
    events.clear()
    again = cluster.run_study_ray(
        grid_params,
        runs_root=ray_runs,
        reports_root=tmp_path / "ray" / "reports",
        dataset_loader=loader,
        on_event=events.append,
    )
    assert events == [] and [cluster.result_fields(r) for r in again] == [cluster.result_fields(r) for r in results]


def test_ray_packs_train_one_variants_runs_per_task_to_the_sequential_records(
    ray_cluster, grid_params, one_thread, tmp_path
):
    """--engine ray --pack-size: each Ray task trains one pack (cell.run_pack) — one per GPU with
    --gpus-per-run 1 — and every record equals the sequential engine's (accuracy fields exactly)."""
    loader = functools.partial(tiny_loader, n_train=256)
    reference = sequential(grid_params, tmp_path / "seq", loader)
    events = []
    results = cluster.run_study_ray(
        grid_params,
        cpus_per_run=1,
        runs_root=tmp_path / "ray" / "runs",
        reports_root=tmp_path / "ray" / "reports",
        progress=False,
        dataset_loader=loader,
        on_event=events.append,
        pack_size=0,
    )
    running = [e for e in events if e["kind"] == "running"]
    assert len(running) == 4 and sorted(e["kind"] for e in events if e["kind"] != "running") == ["done"] * 4
    workers = {v: {e["pid"] for e in running if e["variant"] == v} for v in ("softmax+none", "softmax+ape")}
    assert all(len(pids) == 1 for pids in workers.values()), workers  # a variant's two seeds: one task
    for ours, theirs in zip(results, reference, strict=True):  # as tests/test_pack.py: vmap sums round apart
        for key in ("status", "top1", "top5", "test_correct", "best_epoch", "best_val_acc"):
            assert ours[key] == theirs[key], (ours["variant"], ours["seed"], key)
        assert ours["log_likelihood"] == pytest.approx(theirs["log_likelihood"], rel=1e-6)
        assert [r["top1"] for r in ours["resolution_eval"]] == [r["top1"] for r in theirs["resolution_eval"]]


def test_time_limit_on_ray_starts_only_the_runs_that_fit(ray_cluster, grid_params, one_thread, tmp_path, capsys):
    """--time-limit on Ray: the sequential engine's rule (study.plain_order) decides each task when a slot
    frees: with no time left nothing starts and each run says why; with an hour the rest train."""
    from rpevit.lab.schedule.time_limit import TimeLimit

    loader = functools.partial(tiny_loader, n_train=256)
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    study.run_study(dataclasses.replace(grid_params, seeds=(0,)), dataset_loader=loader, **roots)  # paces
    capsys.readouterr()
    events = []
    cluster.run_study_ray(
        grid_params, progress=False, dataset_loader=loader, on_event=events.append,
        time_limit=TimeLimit(1e-6, clock=lambda: 0.0), **roots,
    )  # fmt: skip
    out = capsys.readouterr().out
    assert [e for e in events if e["kind"] == "running"] == []
    assert out.count("not started: ") == 2 and "a later sitting trains it" in out
    events.clear()
    cluster.run_study_ray(
        grid_params, progress=False, dataset_loader=loader, on_event=events.append,
        time_limit=TimeLimit(3600, clock=lambda: 0.0), **roots,
    )  # fmt: skip
    assert sorted((e["variant"], e["seed"]) for e in events if e["kind"] == "done") == [
        ("softmax+ape", 1),
        ("softmax+none", 1),
    ]


def test_failed_run_is_named_and_the_others_go_on(ray_cluster, tiny_params, tmp_path, capsys):
    params = dataclasses.replace(
        tiny_params,
        datasets=("mnist5k", "mnist"),
        variants=("softmax+none",),
        train=dataclasses.replace(tiny_params.train, epochs=1),
        evaluate=dataclasses.replace(tiny_params.evaluate, resolutions=()),
    )
    events = []
    results = cluster.run_study_ray(
        params,
        runs_root=tmp_path / "runs",
        reports_root=tmp_path / "reports",
        progress=False,
        dataset_loader=tiny_loader,
        on_event=events.append,
    )
    assert [(r["dataset"], r["status"]) for r in results] == [("mnist5k", "finished"), ("mnist", "failed")]
    assert "RuntimeError: no such tiny dataset: mnist" in results[1]["message"]
    out = capsys.readouterr().out
    assert "failed: softmax+none on mnist, seed 0 — RuntimeError: no such tiny dataset: mnist" in out
    assert "1 done, 0 diverged, 1 failed" in out
    summary = (tmp_path / "reports" / "tiny" / "summary.md").read_text()
    assert "| mnist | softmax+none |" in summary and "| failed |" in summary
    assert "- failed: softmax+none on mnist, seed 0 — RuntimeError" in summary


def test_killed_worker_is_retried_and_the_run_resumes(ray_cluster, tiny_params, one_thread, tmp_path):
    params = dataclasses.replace(
        tiny_params,
        name="tinykill",
        variants=("softmax+ape",),
        seeds=(0,),
        train=dataclasses.replace(tiny_params.train, epochs=4),
        evaluate=dataclasses.replace(tiny_params.evaluate, resolutions=()),
    )
    loader = functools.partial(tiny_loader, n_train=2048)  # epochs of ~0.5 s: time to kill mid-run
    reference = sequential(params, tmp_path / "seq", loader)
    run_dir = records.run_dir("tinykill", "mnist5k", "softmax+ape", 0, tmp_path / "ray" / "runs")
    killed = {}

    def kill_after_first_checkpoint(pid):
        deadline = time.monotonic() + 60
        while not (run_dir / records.CHECKPOINT).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        killed["record_existed"] = (run_dir / records.RECORD).exists()
        os.kill(pid, signal.SIGKILL)
        killed["pid"] = pid

    events, threads = [], []

    def on_event(event):
        events.append(event)
        if event["kind"] == "running" and not threads:
            threads.append(threading.Thread(target=kill_after_first_checkpoint, args=(event["pid"],)))
            threads[0].start()

    results = cluster.run_study_ray(
        params,
        runs_root=tmp_path / "ray" / "runs",
        reports_root=tmp_path / "reports",
        progress=False,
        dataset_loader=loader,
        on_event=on_event,
        max_retries=2,
    )
    threads[0].join()
    assert killed["pid"] and killed["record_existed"] is False  # killed mid-run, after a checkpoint
    running = [e for e in events if e["kind"] == "running"]
    assert [e["attempt"] for e in running] == [1, 2] and running[1]["pid"] != killed["pid"]
    assert events[-1]["kind"] == "done"
    assert cluster.result_fields(results[0]) == cluster.result_fields(reference[0])
    assert len(records.read_history(run_dir)) == 4


def test_compare_engines_reports_a_ratio(ray_cluster, tiny_params, one_thread, tmp_path, capsys):
    """bench engines (campaign.bench_engines) on the caller's data loader: both engines, same results."""
    params = dataclasses.replace(
        tiny_params,
        variants=("softmax+none", "softmax+ape"),
        train=dataclasses.replace(tiny_params.train, epochs=1),
        evaluate=dataclasses.replace(tiny_params.evaluate, resolutions=()),
    )
    result = bench_engines.compare_engines(
        params, cpus_per_run=1, root=tmp_path, dataset_loader=functools.partial(tiny_loader, n_train=128)
    )
    assert result["runs"] == 2 and result["workers"] == 2 and result["ratio"] > 0
    assert result["identical_results"] == 2  # one torch thread in both engines (one_thread)
    assert "sequential / ray:" in capsys.readouterr().out


def test_both_engines_keep_the_same_files(ray_cluster, tiny_params, one_thread, tmp_path):
    """keep_records under --engine ray: the same kept records and histories as the sequential engine
    (same results; timings aside), both going through one grid cell."""
    params = dataclasses.replace(
        tiny_params,
        variants=("softmax+ape",),
        seeds=(0, 1),
        keep_records=True,
        train=dataclasses.replace(tiny_params.train, epochs=1),
        evaluate=dataclasses.replace(tiny_params.evaluate, resolutions=(20,)),
    )
    loader = functools.partial(tiny_loader, n_train=128)
    sequential(params, tmp_path / "seq", loader)
    cluster.run_study_ray(
        params, runs_root=tmp_path / "ray" / "runs", reports_root=tmp_path / "ray" / "reports", dataset_loader=loader
    )
    kept = {engine: tmp_path / engine / "reports" / "tiny" / "records" for engine in ("seq", "ray")}
    files = {engine: sorted(p.relative_to(kept[engine]) for p in kept[engine].rglob("*")) for engine in kept}
    assert files["seq"] == files["ray"] and len([f for f in files["seq"] if f.name == "record.json"]) == 2
    for name in files["seq"]:
        if name.name == records.RECORD:
            seq, ray = (json.loads((kept[e] / name).read_text()) for e in ("seq", "ray"))
            assert cluster.result_fields(seq) == cluster.result_fields(ray) and seq["resolution_eval"], name
        elif name.name == records.HISTORY:
            seq, ray = ([without_times(row) for row in records.read_history((kept[e] / name).parent)] for e in kept)
            assert seq == ray and len(seq) == 1, name


def test_ray_submits_only_the_runs_the_design_wants(tiny_params, tmp_path, design_wanting_nothing, capsys):
    require_module("ray", NO_RAY)
    designed = dataclasses.replace(
        tiny_params, design=types.SimpleNamespace(active=True, plateau_check=None, primary=["softmax+ape"])
    )
    # nothing is due, so no task is submitted and no cluster is started
    assert cluster.run_study_ray(designed, runs_root=tmp_path, reports_root=tmp_path) == []
    said = capsys.readouterr().out
    assert "not started: softmax+ape on mnist5k, seed 0 (the stopping rule needs 0 primary seeds)" in said


def test_ray_refuses_a_sitting_in_another_precision_before_it_starts(grid_params, counted, monkeypatch, tmp_path):
    """As the sequential runner: a study whose finished runs trained in fp32 submits none in bf16."""
    require_module("ray", NO_RAY)
    calls, state = counted
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    state["crash_on"] = 2
    with pytest.raises(KeyboardInterrupt):
        study.run_study(grid_params, **roots)  # 1 run finished in fp32
    monkeypatch.setattr(study, "planned_precision", lambda device, amp: "bf16")  # as --gpus-per-run on a GPU would
    monkeypatch.setattr(cluster, "_connect", lambda *a: pytest.fail("Ray was started"))
    with pytest.raises(UserError, match="1 of its 1 finished runs trained in fp32, but this sitting would train in bf"):
        cluster.run_study_ray(grid_params, **roots)


def designed_draws(params, tmp_path, limit=20):
    """What study.designed_order hands a Ray-like engine that submits every run it is given and ends none:
    the places in order, then None where it would wait on them (the engine asks again when one ends)."""
    grid = cells(params, catalog.grid(params), tmp_path / "runs", tmp_path / "reports")
    todo = [(run, settle(run, repair=False)) for run in grid]
    handed: list = []
    order = study.designed_order(params, todo, Progress(len(todo)), None, submitted=lambda: set(handed))
    for item in itertools.islice(order, limit):
        if item is None:
            return handed + [None]
        handed.append(item[0].place)
    return handed


def test_ray_draws_count_the_runs_submitted_as_in_flight(tmp_path, capsys):
    """Submitted together, the first primary seeds count as in flight: the seed after them and the
    secondary variants wait for them instead of training beside them — the Ray engine draws from the
    sequential engine's designed order with its submitted runs as in flight."""
    path = tmp_path / "designed.yaml"
    path.write_text(
        "datasets: [mnist5k]\nvariants: [softmax+ape, favor+ape, softmax+krpe]\nseeds: [0, 1, 2, 3]\n"
        "design:\n  primary: [softmax+ape, favor+ape]\n  secondary: [softmax+krpe]\n"
        "  contrasts: [{name: gap, kind: equal, terms: {favor+ape: 1, softmax+ape: -1}}]\n"
        "  stopping: {min_seeds: 2, max_seeds: 3}\n  secondary_seeds: 1\n"
    )
    draws = designed_draws(load_params(path), tmp_path)
    primary_first = {("mnist5k", v, s) for v in ("softmax+ape", "favor+ape") for s in (0, 1)}
    assert set(draws[:-1]) == primary_first and len(draws) == 5 and draws[-1] is None  # min_seeds 2: seeds 0, 1


def test_ray_draws_hold_the_secondary_runs_while_the_longer_budget_check_wants_runs(tmp_path, capsys, monkeypatch):
    from test_design import _accuracies, _finished, checked

    designed = checked(tmp_path)  # the check (4 epochs, seeds 0-1) is linked by path
    settled = _finished(_accuracies([0, 1], 0.0))  # the primary grid is settled at 2 seeds
    reads = {designed.name: (set(), settled)}
    monkeypatch.setattr(catalog, "in_flight_and_records", lambda params, *roots: reads.get(params.name, (set(), [])))
    draws = designed_draws(designed, tmp_path)
    assert not any(place and place[1] == "softmax+krpe" for place in draws)
    assert "not started: softmax+krpe on mnist5k, seed 0 (the longer-budget check" in capsys.readouterr().out


def test_a_designed_study_on_ray_trains_what_the_sequential_engine_trains(
    ray_cluster, grid_params, one_thread, tmp_path, capsys, monkeypatch
):
    """Two slots, a stopping rule over up to 3 seeds: Ray draws from the designed order as slots free up (seed 2
    waits on the submitted seeds 0 and 1, then the rule decides it), and ends with the sequential engine's
    records — the same runs, the same results, the same runs not started."""
    path = tmp_path / "designed.yaml"
    path.write_text(
        "datasets: [mnist5k]\nvariants: [softmax+none, softmax+ape]\nseeds: [0, 1, 2]\n"
        "design:\n  primary: [softmax+none, softmax+ape]\n"
        "  contrasts: [{name: gap, kind: equal, terms: {softmax+ape: 1, softmax+none: -1}}]\n"
        "  stopping: {min_seeds: 2, max_seeds: 3, half_width: 0.001}\n"
    )
    designed = dataclasses.replace(grid_params, design=load_params(path).design, seeds=(0, 1, 2))
    loader = functools.partial(tiny_loader, n_train=128)
    reference = sequential(designed, tmp_path / "seq", loader)
    said = {line for line in capsys.readouterr().out.splitlines() if line.startswith("not started")}
    draws, designed_order = [], study.designed_order

    def counted(*args, **kwargs):
        for item in designed_order(*args, **kwargs):
            draws.append(item)
            yield item

    monkeypatch.setattr(study, "designed_order", counted)
    events = []
    results = cluster.run_study_ray(
        designed,
        runs_root=tmp_path / "ray" / "runs",
        reports_root=tmp_path / "ray" / "reports",
        progress=False,
        dataset_loader=loader,
        on_event=events.append,
    )
    assert sorted((e["variant"], e["seed"]) for e in events if e["kind"] == "done") == sorted(
        (r["variant"], r["seed"]) for r in reference
    )
    assert [cluster.result_fields(r) for r in results] == [cluster.result_fields(r) for r in reference]
    assert {line for line in capsys.readouterr().out.splitlines() if line.startswith("not started")} == said
    assert None in draws  # the order waited on submitted runs at least once, and was asked again
