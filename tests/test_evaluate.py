"""Multi-resolution evaluation of finished runs (and its place in the study runner)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rpevit.core.errors import UserError
from rpevit.lab.params import EvaluateConfig
from rpevit.lab.schedule import study
from rpevit.lab.store import records
from rpevit.lab.store.run import Run
from rpevit.lab.training import runs
from rpevit.lab.training.evaluate import evaluate_resolutions, position_modes, resize_split


def test_resize_split_antialiases_and_keeps_labels(tiny_dataset):
    small = resize_split(tiny_dataset.test, 14)
    assert small.images.shape[-2:] == (14, 14) and small.images.dtype == torch.uint8
    assert torch.equal(small.labels, tiny_dataset.test.labels)
    # a 2× antialiased downsample of a digit keeps its mean intensity
    assert abs(small.images.float().mean() - tiny_dataset.test.images.float().mean()) < 2.0
    assert resize_split(tiny_dataset.test, 28) is tiny_dataset.test


def test_modes_only_where_they_differ():
    assert position_modes("softmax+ape") == ("extrapolate",)
    assert position_modes("softmax+none") == ("extrapolate",)


def test_study_evaluates_resolutions_into_the_record(tiny_params, tiny_dataset, monkeypatch, tmp_path):
    monkeypatch.setattr(runs, "dataset_for", lambda *a, **k: tiny_dataset)
    params = dataclasses.replace(
        tiny_params,
        variants=("softmax+ape",),
        train=dataclasses.replace(tiny_params.train, epochs=1),
        evaluate=EvaluateConfig(resolutions=(20, 28, 36)),
    )
    study.run_study(params, runs_root=tmp_path, reports_root=tmp_path)
    record = records.load_records("tiny", tmp_path)[0]
    rows = {(r["resolution"], r["mode"]): r["top1"] for r in record["resolution_eval"]}
    assert set(rows) == {(20, "extrapolate"), (28, "extrapolate"), (36, "extrapolate")}
    assert rows[(28, "extrapolate")] == pytest.approx(record["top1"])  # native resolution = the test score
    assert not study.needs_resolution_eval(Run(params, "mnist5k", "softmax+ape", 0, runs_root=tmp_path))
    with pytest.raises(UserError, match=r"resolutions \[30\] are not positive multiples of the patch size 4"):
        evaluate_resolutions(Run(params, "mnist5k", "softmax+ape", 0, runs_root=tmp_path), tiny_dataset, [30])
    with pytest.raises(UserError, match="no finished run of softmax\\+none"):
        evaluate_resolutions(Run(params, "mnist5k", "softmax+none", 0, runs_root=tmp_path), tiny_dataset, [28])
