"""rpevit.bench's side-by-side measurements: structure and order, never speed targets (those are
ratios in reports/bench/, measured on a quiet machine)."""

from __future__ import annotations

import dataclasses

import pytest

from rpevit import bench
from rpevit.params import load_params


@pytest.fixture
def small():
    params = load_params("smoke")
    return dataclasses.replace(
        params,
        model=dataclasses.replace(params.model, dim=16, depth=1, heads=2, mlp_dim=16),
        train=dataclasses.replace(params.train, batch_size=4),
    )


def test_speed_rounds_rotate_the_order_and_time_every_variant(small):
    variants = ["softmax+ape", "favor+ape", "relu+ape"]
    rounds = bench.variant_speeds(small, variants, "cpu", rounds=3, train_steps=1, infer_batches=1, infer_batch=4)
    assert [r["variant"] for r in rounds] == [*variants, *variants[1:], variants[0], variants[2], *variants[:2]]
    assert all(r["train_seconds_per_image"] > 0 and r["ms_per_image_batched"] > 0 for r in rounds)
    assert {"load_average", "cpu_count", "threads"} <= set(rounds[0])
    table = bench.speed_table(rounds)
    assert [row["variant"] for row in table] == variants and all(row["rounds"] == 3 for row in table)
    assert table[0]["train × softmax+ape"] == 1.0 and table[0]["inference time × softmax+ape"] == 1.0
    for row in table:
        assert row["train min"] <= row["train images/s"] <= row["train max"]


def test_levers_time_every_setting_and_ratio_to_fp32_eager(small):
    rows = bench.training_levers(small, ["relu+ape"], "cpu", batches=(4, 8), repeats=2, steps=1, compile_model=False)
    assert [(r["batch"], r["amp"]) for r in rows] == [(4, "fp32"), (4, "bf16"), (8, "fp32"), (8, "bf16")]
    assert rows[0]["ratio"] == 1.0 and all(r["images/s"] > 0 for r in rows)
