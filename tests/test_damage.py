"""Damaged files, every kind in every place: {record, kept record, history, kept history, kept weights,
checkpoint, previous checkpoint} × {truncated, empty, garbled, deleted} on a finished and on an unfinished run
of a tiny preset with keep_records. Each case is recovered by one study, named in the summary where
something had to be repaired, and ends identical to an undamaged run (records, kept copies,
histories and kept weights), in runs/ and in the kept copy alike."""

from __future__ import annotations

import csv
import dataclasses
import shutil

import pytest
import torch

from rpevit.core.data import Dataset, Split
from rpevit.lab.params import EvaluateConfig
from rpevit.lab.schedule import cell, study
from rpevit.lab.schedule.status import status_lines
from rpevit.lab.schema import result_view
from rpevit.lab.store import catalog, records
from rpevit.lab.store.records import without_times
from rpevit.lab.store.run import Run
from rpevit.lab.training.train import train_run

FILES = ("record", "kept record", "history", "kept history", "kept weights", "checkpoint", "prev checkpoint")
DAMAGES = ("truncated", "empty", "garbled", "deleted")
# deleting these leaves nothing to repair: an unfinished run has no record or kept copy yet, resumes
# from checkpoint.prev.pt without a word, rewrites its history; a finished run needs no previous checkpoint
SILENT_DELETIONS = {
    ("unfinished", "record"),
    ("unfinished", "kept record"),
    ("unfinished", "kept history"),
    ("unfinished", "kept weights"),
    ("unfinished", "history"),
    ("unfinished", "checkpoint"),
    ("unfinished", "prev checkpoint"),
    ("finished", "prev checkpoint"),
}


def _cut(split: Split, n: int) -> Split:
    return Split(split.images[:n], split.labels[:n])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, request):
    """The tiny preset (keep_records, 3 epochs, one resolution), a loader of 128/50/50 images, and
    snapshots of a finished run (runs/ + kept copy) and of one stopped after epoch 2 of 3."""
    from rpevit.lab.params import load_params

    base = load_params("smoke")
    params = dataclasses.replace(
        base,
        name="damage",
        variants=("softmax+ape",),
        seeds=(0,),
        keep_records=True,
        model=dataclasses.replace(base.model, dim=16, depth=1, heads=2, mlp_dim=32),
        train=dataclasses.replace(
            base.train, epochs=3, batch_size=64, lr=3e-3, warmup_epochs=0.5, eval_batch_size=50, timing_images=4
        ),
        evaluate=EvaluateConfig(resolutions=(20,)),
    )
    full = study.runs.dataset_for(params)
    data = Dataset(full.info, _cut(full.train, 128), _cut(full.val, 50), _cut(full.test, 50), full.source)
    root = tmp_path_factory.mktemp("damage")
    study.run_study(
        params,
        runs_root=root / "finished" / "runs",
        reports_root=root / "finished" / "reports",
        dataset_loader=lambda *a: data,
    )
    unfinished = records.run_dir("damage", "mnist5k", "softmax+ape", 0, root / "unfinished" / "runs")

    def stop(row):
        if row["epoch"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_run(Run(params, "mnist5k", "softmax+ape", 0), data, unfinished, on_epoch_end=stop)
    return params, data, root


def _paths(runs_root, reports_root):
    run = records.run_dir("damage", "mnist5k", "softmax+ape", 0, runs_root)
    kept = reports_root / "damage" / "records" / "mnist5k" / "softmax+ape" / "seed0"
    return {
        "record": run / records.RECORD,
        "kept record": kept / records.RECORD,
        "history": run / records.HISTORY,
        "kept history": kept / records.HISTORY,
        "kept weights": kept / records.KEPT_WEIGHTS,
        "checkpoint": run / records.CHECKPOINT,
        "prev checkpoint": run / records.PREVIOUS_CHECKPOINT,
    }


def _damage(path, how: str, original: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "deleted":
        path.unlink(missing_ok=True)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(original[: len(original) // 2])
    else:  # garbled: 64 bytes in the middle overwritten
        middle = len(original) // 2
        path.write_bytes(original[:middle] + b"\xff\x00" * 32 + original[middle + 64 :])


def _history(path) -> list[dict]:
    """The file's rows as written (not through read_history, which would set a damaged one aside), by column
    name and less the wall and CPU seconds."""
    with path.open(newline="") as handle:
        return [without_times(row) for row in csv.DictReader(handle)]


@pytest.mark.parametrize("state", ["finished", "unfinished"])
@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("target", FILES)
def test_damaged_file_is_recovered_named_and_identical(tiny, tmp_path, state, damage, target):
    params, data, root = tiny
    shutil.copytree(root / state, tmp_path, dirs_exist_ok=True)
    runs_root, reports_root = tmp_path / "runs", tmp_path / "reports"
    reference = _paths(root / "finished" / "runs", root / "finished" / "reports")
    files = _paths(runs_root, reports_root)
    _damage(files[target], damage, reference[target].read_bytes())

    study.run_study(params, runs_root=runs_root, reports_root=reports_root, dataset_loader=lambda *a: data)

    expected = records.read_record(reference["record"].parent)
    for name in ("record", "kept record"):
        assert result_view(records.read_record(files[name].parent)) == result_view(expected), name
    assert files["kept record"].read_bytes() == files["record"].read_bytes()
    assert files["kept history"].read_bytes() == files["history"].read_bytes()
    assert _history(files["history"]) == _history(reference["history"])
    _assert_kept_weights(files, reference)
    assert files["checkpoint"].is_file()
    summary = (reports_root / "damage" / "summary.md").read_text()
    if (state, target) not in SILENT_DELETIONS or damage != "deleted":
        assert "Notes from the last study run" in summary and files[target].name in summary, summary
        if damage != "deleted" and files[target].parent.exists():
            assert list(files[target].parent.glob(f"{files[target].name}.damaged-*")), "kept aside"
    again = study.run_study(params, runs_root=runs_root, reports_root=reports_root, dataset_loader=lambda *a: data)
    assert "Notes" not in (reports_root / "damage" / "summary.md").read_text() and len(again) == 1  # settled


def _assert_kept_weights(files, reference) -> None:
    """The kept weights are the reference's tensors, marked with the kept record's result."""
    record = records.read_record(files["kept record"].parent)
    kept = torch.load(files["kept weights"], weights_only=True)
    expected = torch.load(reference["kept weights"], weights_only=True)
    assert {k: kept[k] for k in records.WEIGHTS_MARK} == {k: record[k] for k in records.WEIGHTS_MARK}
    result = ("key", "best_epoch", "top1")  # the mark less the time it finished
    assert {k: kept[k] for k in result} == {k: expected[k] for k in result}
    assert kept["state"].keys() == expected["state"].keys()
    assert all(torch.equal(kept["state"][k], v) for k, v in expected["state"].items())


def test_a_kill_while_keeping_leaves_nothing_behind(tiny, tmp_path, capsys):
    """Killed after the kept record and history were copied and before the weights were saved, with a
    temporary file of an interrupted write left in the kept folder: the next study saves the weights
    (the record alone is not enough), names it, removes the temporary file, and then has nothing to do."""
    params, data, root = tiny
    shutil.copytree(root / "finished", tmp_path, dirs_exist_ok=True)
    files = _paths(tmp_path / "runs", tmp_path / "reports")
    reference = _paths(root / "finished" / "runs", root / "finished" / "reports")
    files["kept weights"].unlink()
    leftover = files["kept record"].parent / ".record.json.x1y2z3.tmp"
    leftover.write_bytes(b'{"variant": ')
    (run,) = cell.cells(params, catalog.grid(params), tmp_path / "runs", tmp_path / "reports")
    state = cell.settle(run, repair=False)
    assert state.kind == "stale" and "weights.pt" in state.repairs[0] and "missing" in state.repairs[0]
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    assert "the next study writes them again from their checkpoints here" in "\n".join(status_lines(params, **roots))
    study.run_study(params, **roots, dataset_loader=lambda *a: data)
    assert "weights.pt" in (tmp_path / "reports" / "damage" / "summary.md").read_text()
    _assert_kept_weights(files, reference)
    assert not leftover.exists() and not list(files["kept record"].parent.glob(".*"))
    assert not cell.settle(run, repair=False).work
    assert not any(line.startswith("kept weights") for line in status_lines(params, **roots))


@pytest.mark.parametrize("damage", ["truncated", "garbled", "deleted"])
def test_kept_weights_lost_where_the_checkpoint_is_not_are_named_by_status(tiny, tmp_path, capsys, damage):
    """A fresh clone (kept records only) whose kept weights are damaged or deleted: the study cannot
    restore them and says nothing is wrong with the records; status names them and where to go."""
    params, data, root = tiny
    shutil.copytree(root / "finished" / "reports", tmp_path / "reports")
    files = _paths(tmp_path / "elsewhere", tmp_path / "reports")
    _damage(files["kept weights"], damage, files["kept weights"].read_bytes())
    roots = {"runs_root": tmp_path / "elsewhere", "reports_root": tmp_path / "reports"}
    (line,) = [line for line in status_lines(params, **roots) if line.startswith("kept weights")]
    why = "missing" if damage == "deleted" else "damaged"
    assert line.startswith(f"kept weights {why}") and "softmax+ape | mnist5k | seed 0" in line
    assert "their checkpoints are not here: run `python -m rpevit study damage` where they were trained" in line
    (run,) = cell.cells(params, catalog.grid(params), tmp_path / "elsewhere", tmp_path / "reports")
    assert not cell.settle(run, repair=False).work  # nothing here to restore them from, nothing to retrain


def test_run_history_of_a_truncated_history_is_empty_not_a_traceback(tiny, tmp_path, capsys):
    params, _, root = tiny
    shutil.copytree(root / "finished" / "reports", tmp_path / "reports")
    files = _paths(tmp_path / "elsewhere", tmp_path / "reports")  # a fresh clone: only the kept copy
    files["kept history"].write_bytes(files["kept history"].read_bytes()[:-30])  # the last row cut short
    assert (
        catalog.run_history(
            Run(
                params, "mnist5k", "softmax+ape", 0, runs_root=tmp_path / "elsewhere", reports_root=tmp_path / "reports"
            )
        )
        == []
    )
    assert "history.csv" in capsys.readouterr().out and list(files["kept history"].parent.glob("history.csv.damaged-*"))


def test_a_kept_record_left_stale_by_a_kill_during_evaluation_is_restored(tiny, tmp_path):
    """Killed after runs/…/record.json got its resolution rows, before it was kept: the next study
    restores the kept copy from runs/ and says so."""
    params, data, root = tiny
    shutil.copytree(root / "finished", tmp_path, dirs_exist_ok=True)
    files = _paths(tmp_path / "runs", tmp_path / "reports")
    record = records.read_record(files["kept record"].parent)
    records.write_json(files["kept record"], {k: v for k, v in record.items() if k != "resolution_eval"})
    study.run_study(
        params, runs_root=tmp_path / "runs", reports_root=tmp_path / "reports", dataset_loader=lambda *a: data
    )
    assert files["kept record"].read_bytes() == files["record"].read_bytes()
    assert "restored from" in (tmp_path / "reports" / "damage" / "summary.md").read_text()


def test_settle_without_repair_only_looks(tiny, tmp_path):
    """The state is decided from both copies; a look (repair=False, what the Ray driver does) moves nothing."""
    params, _, root = tiny
    shutil.copytree(root / "finished", tmp_path / "finished")
    shutil.copytree(root / "unfinished", tmp_path / "unfinished")

    def look(where):
        (run,) = cell.cells(params, catalog.grid(params), tmp_path / where / "runs", tmp_path / where / "reports")
        return cell.settle(run, repair=False)

    assert look("finished").kind == "finished" and not look("finished").work
    assert look("unfinished").kind == "missing" and look("unfinished").train
    files = _paths(tmp_path / "finished" / "runs", tmp_path / "finished" / "reports")
    files["kept history"].unlink()
    assert look("finished").kind == "stale" and "history.csv" in look("finished").repairs[0]
    shutil.copy(root / "finished" / files["kept history"].relative_to(tmp_path / "finished"), files["kept history"])
    files["record"].write_bytes(b"{")
    state = look("finished")
    assert state.kind == "damaged" and not state.train and state.record["status"] == "finished"  # the kept copy
    assert files["record"].read_bytes() == b"{" and not list(files["record"].parent.glob("*.damaged-*"))


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"variant": "softmax+ape"}'])
def test_peek_record_reads_without_moving_a_damaged_record(tmp_path, content):
    """read_record moves a damaged record aside (its own run repairs it); peek_record, which reads
    another process's run, only says None and leaves the file where it is."""
    (tmp_path / records.RECORD).write_bytes(content)
    assert records.peek_record(tmp_path) is None
    assert (tmp_path / records.RECORD).read_bytes() == content
    assert records.read_record(tmp_path) is None and not (tmp_path / records.RECORD).exists()
    assert records.peek_record(tmp_path) is None  # and none there at all
