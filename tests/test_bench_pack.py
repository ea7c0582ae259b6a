"""The packed-training benchmark (python -m rpevit bench pack): its table's cells, captured cells and
MFU column, measured on the CPU with the smoke preset's model (what it measures is the GPU's business)."""

from __future__ import annotations

import math

import torch

from rpevit.core import capture
from rpevit.lab.bench import pack as bench_pack
from rpevit.lab.params import load_params


def test_pack_rows_time_every_pack_size_plain_and_captured_with_mfu(monkeypatch):
    monkeypatch.setattr(capture, "BACKEND", "eager")  # the captured graph run by eager kernels
    monkeypatch.setattr(bench_pack, "WARM_UP_STEPS", 1)
    params = load_params("smoke")
    rows = bench_pack.pack_rows(params, ["relu+ape"], [1, 2], torch.device("cpu"), 1, 1, (False, True), peak=1e12)
    (row,) = rows
    names = ["K=1", "K=2", "single captured", "K=1 captured", "K=2 captured"]
    assert list(row) == ["variant", "single run img/s"] + [f"{n} {u}" for n in names for u in ("img/s", "×")] + [
        "best MFU %"
    ]
    for name in names:
        assert row[f"{name} img/s"] > 0
        assert math.isclose(row[f"{name} ×"], row[f"{name} img/s"] / row["single run img/s"])
    best = max(v for k, v in row.items() if k.endswith("img/s"))
    flops = bench_pack._training_flops(params, "relu+ape", torch.device("cpu"))
    assert flops > 0
    assert math.isclose(row["best MFU %"], 100 * best * flops / 1e12)


def test_bench_pack_prints_its_conditions_and_table(capsys, monkeypatch):
    from rpevit.cli import main

    monkeypatch.setattr(bench_pack, "WARM_UP_STEPS", 1)
    argv = "bench pack --params smoke --variants favor+ape --packs 2 --steps 1 --rounds 1"
    code = main(argv.split())
    out = capsys.readouterr().out
    assert code in (0, None)
    assert "device: cpu" in out and "preset smoke" in out
    assert "| favor+ape |" in out and "K=2 ×" in out and "captured" not in out
