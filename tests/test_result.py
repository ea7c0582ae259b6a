"""The one typed result API (rpevit/lab/result.py): a record read as a value, and every report, claim,
rule and notebook helper reading records through its attributes (a Result that refuses to be read as
a mapping goes through all of them)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from analysis import gap_table, results_table
from analysis.claims import busy_text, evaluate_claims, protocol_rows, run_table, seed_table
from analysis.claims.registry import Claim, Comparison, Source
from analysis.cost_plots import accuracy_cost_points
from analysis.plots import resolution_bands
from campaign.gap_arithmetic import budget_top1
from rpevit.lab.params import load_params
from rpevit.lab.result import Result, results
from rpevit.lab.schedule import policy
from rpevit.lab.schedule.time_limit import seconds_per_epoch
from rpevit.lab.schedule.wanted import planned_line
from rpevit.lab.schema import finished, is_finished, make_record
from rpevit.lab.store.catalog import study_records
from rpevit.lab.store.run import Run
from rpevit.lab.training import runs
from rpevit.report.index import headline


class ReadAsMapping(AssertionError):
    pass


class AttributesOnly(Result):
    """A Result that fails any read as a mapping: whoever reads it must use its attributes."""

    def __getitem__(self, key):
        raise ReadAsMapping(f"read as a mapping: [{key!r}]")

    def get(self, key, default=None):
        raise ReadAsMapping(f"read as a mapping: .get({key!r})")

    def __iter__(self):
        raise ReadAsMapping("iterated as a mapping")


def _record(variant: str, seed: int, top1: float, rng, **fields) -> dict:
    correct = rng.random(400) < top1
    return make_record(
        preset="t",
        dataset="mnist5k",
        variant=variant,
        seed=seed,
        status="finished",
        epochs=4,
        best_epoch=3,
        top1=float(correct.mean()),
        top5=1.0,
        **{name: 0.5 for name in ("precision", "recall", "f1", "train_images_per_second", "ms_single_image")},
        **{name: -100.0 for name in ("log_likelihood", "aic", "bic", "peak_memory_mb")},
        test_correct="".join("1" if c else "0" for c in correct),
        n_test=400,
        num_params=1000,
        flops_per_image=10**6,
        train_seconds_per_epoch=10.0 + seed,
        ms_per_image_batched=0.5,
        load_average=0.5,
        cpu_count=2,
        threads=1,
        device="cpu",
        amp="off",
        finished_at="2026-11-27T10:00:00",
        code_revision="abc",
        budgets={"2": {"top1": top1 - 0.01}},
        resolution_eval=[{"mode": "extrapolate", "resolution": 28, "trained_resolution": 28, "top1": top1}],
        **fields,
    )


@pytest.fixture
def found() -> list[dict]:
    rng = np.random.default_rng(0)
    grid = {"softmax+ape": 0.9, "favor+ape": 0.86, "relu+ape": 0.88}
    return [_record(v, seed, top1, rng) for seed in (1, 2, 3) for v, top1 in grid.items()]


def test_a_result_reads_a_record_as_attributes_and_gives_it_back_as_written(found):
    written = {**found[0], "an_older_field": 3}
    result = Result.of(written)
    assert (result.top1, result.seed, result.variant, result.budgets) == (
        written["top1"],
        1,
        "softmax+ape",
        {"2": {"top1": 0.89}},
    )
    assert result.finished and result.place == ("mnist5k", "softmax+ape", 1) and result.name == "softmax+ape"
    assert result.as_record() == written  # the field of an older record is kept, in `extra`
    assert json.loads(json.dumps(result.as_record())) == written
    assert Result.of(result) is result and results([result, written])[0] is result
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.top1 = 1.0
    diverged = Result.of({"dataset": "mnist5k", "variant": "favor+ape", "seed": 4, "status": "diverged"})
    assert not diverged.finished and not is_finished(diverged) and finished([diverged, result]) == [result]


def test_the_canonical_name_and_busy_flag_come_from_the_record():
    result = Result.of({"variant": "favor+ape+rope_mixed", "load_average": 3.1, "cpu_count": 2})
    assert result.name == "favor+rope_mixed+ape" and result.busy
    assert not Result.of({"variant": "softmax+ape", "load_average": 2.4, "cpu_count": 2}).busy


def test_the_catalog_reads_results_that_know_their_run(tmp_path):
    params = load_params("canvas_gap_pilot")  # its kept records are in the repository
    found = study_records(params)
    assert found and all(isinstance(r, Result) for r in found)
    assert all(r.run is not None and r.run.place == r.place and r.run.matches(r.as_record()) for r in found)


def test_readers_use_the_attributes_only(found, tmp_path):
    """Every reader of records, given Results that refuse mapping reads, computes what it computes from
    the plain records."""
    strict = [AttributesOnly.of(r) for r in found]
    assert all(type(r) is AttributesOnly for r in strict)
    with pytest.raises(ReadAsMapping):
        strict[0]["top1"]
    assert results_table(strict) == results_table(found)
    assert gap_table(strict) == gap_table(found)
    assert headline(strict) == headline(found)
    assert budget_top1(strict) == budget_top1(found)
    claim = Claim(Source("t"), "favor matches softmax", "at_least", Comparison("favor+ape", "softmax+ape"))
    assert evaluate_claims(strict, [claim]) == evaluate_claims(found, [claim])
    assert seed_table(strict) == seed_table(found)
    assert run_table(strict, n_resamples=200) == run_table(found, n_resamples=200)
    assert busy_text(strict, []) == busy_text(found, [])
    assert accuracy_cost_points(strict, None) == accuracy_cost_points(found, None)
    assert resolution_bands(strict, "extrapolate") == resolution_bands(found, "extrapolate")
    assert seconds_per_epoch(strict, "mnist5k", "favor+ape") == seconds_per_epoch(found, "mnist5k", "favor+ape")
    params = load_params("smoke")
    chosen = [r.place for r in runs.inspectable(params, strict, lambda r: True)]
    assert chosen == [r.place for r in runs.inspectable(params, found, lambda r: True)] and len(chosen) == 3
    assert policy.training_hours(strict) == policy.training_hours(found)
    assert protocol_rows(params, strict) == protocol_rows(params, found)
    assert planned_line(params, strict) == planned_line(params, found)


def test_the_design_rules_of_a_kept_study_read_attributes_only():
    """The pre-registered study's kept records, read strictly: its stopping rule, its analysed seeds, a
    decision, the collapsed-run policy and the convergence rows come out as from the plain Results."""
    from analysis.convergence import finished_convergence, split_collapsed

    params = load_params("fmnist_converged")
    found = study_records(params)
    strict = [AttributesOnly.of(r.as_record(), r.run) for r in found]
    assert len(strict) >= 48 and all(type(r) is AttributesOnly for r in strict)
    dataset = params.datasets[0]
    assert policy.primary_progress(params, strict) == policy.primary_progress(params, found)
    analysed = policy.complete_seed_records(params, strict)
    assert [r.place for r in analysed] == [r.place for r in policy.complete_seed_records(params, found)]
    run = Run(params, dataset, "favor+ape", params.seeds[-1])
    assert policy.decide(run, strict) == policy.decide(run, found)
    assert policy.seeds_text(params, strict) == policy.seeds_text(params, found)
    kept, apart = split_collapsed(params, strict)
    assert [r.place for r in kept] == [r.place for r in split_collapsed(params, found)[0]] and len(kept) + len(apart)
    assert finished_convergence(params, strict) == finished_convergence(params, found)
