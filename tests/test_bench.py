"""rpevit.lab.bench.throughput's side-by-side measurements: structure and order, never speed targets (those are
ratios in reports/bench/, measured on a quiet machine)."""

from __future__ import annotations

import dataclasses

import pytest

from rpevit.lab.bench import throughput as bench
from rpevit.lab.params import load_params


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


def test_token_bench_times_presets_side_by_side_and_divides_by_the_right_partner(small):
    """Cells of two presets interleave in one process; the table divides a Performer by softmax with
    the same positional methods and a method by APE on the same backend, at each token count."""
    from rpevit.lab.bench import tokens as bench_tokens

    wide = dataclasses.replace(small, name="wide", datasets=("mnist5k_canvas40",))
    assert (bench_tokens.tokens_of(small), bench_tokens.tokens_of(wide)) == (50, 101)
    assert [bench_tokens.tokens_of(load_params(p)) for p in bench_tokens.DEFAULT_PRESETS.split(",")] == [50, 101, 197]
    cells = [(small, "softmax+ape"), (wide, "favor+ape")]
    rounds = bench.interleaved_speeds(cells, "cpu", rounds=2, train_steps=1, infer_batches=1, infer_batch=4)
    first, second = ("smoke", "softmax+ape", 50), ("wide", "favor+ape", 101)
    assert [(r["preset"], r["variant"], r["tokens"]) for r in rounds] == [first, second, second, first]  # rotates
    # a cell with an image side times the preset's model on random images of that size (here 20×20: 26 tokens)
    (sized,) = bench.interleaved_speeds([(small, "relu+ape", 20)], "cpu", rounds=1, train_steps=1, infer_batches=1)
    assert sized["tokens"] == 26 and sized["preset"] == "smoke" and sized["train_seconds_per_image"] > 0
    ms = {"softmax+ape": 2.0, "favor+ape": 3.0, "favor+rope_mixed": 4.5, "softmax+rope_mixed": 9.0}
    rows = [
        {"tokens": tokens, "variant": v, "ms_per_image_batched": t * scale + wobble}
        for tokens, scale in ((50, 1.0), (197, 2.0))
        for v, t in ms.items()
        for wobble in (-0.1, 0.0, 0.1)  # the median is the middle round
    ]
    table = {r["variant"]: r for r in bench_tokens.token_table(rows, "ms_per_image_batched")}
    assert table["favor+rope_mixed"]["ms at 197"] == pytest.approx(9.0)
    assert table["favor+rope_mixed"]["× softmax at 50"] == pytest.approx(0.5)
    assert table["favor+rope_mixed"]["× APE at 197"] == pytest.approx(1.5)
    assert table["softmax+ape"]["× softmax at 50"] == 1.0
    line = bench_tokens.crossover_line(list(table.values()), [50, 197], "Inference")
    assert "favor 1.50× at 50, 1.50× at 197" in line and "softmax" not in line.split(":")[1].split(";")[0][:8]


def test_levers_time_every_setting_and_ratio_to_fp32_eager(small):
    rows = bench.training_levers(small, ["relu+ape"], "cpu", batches=(4, 8), repeats=2, steps=1, compile_model=False)
    assert [(r["batch"], r["amp"]) for r in rows] == [(4, "fp32"), (4, "bf16"), (8, "fp32"), (8, "bf16")]
    assert rows[0]["ratio"] == 1.0 and all(r["images/s"] > 0 for r in rows)
    fp32 = bench.training_levers(
        small, ["relu+ape"], "cpu", (4,), repeats=1, steps=1, compile_model=False, amps=[False]
    )
    assert [(r["batch"], r["amp"]) for r in fp32] == [(4, "fp32")]


def test_bench_engines_reads_its_options_from_the_command_line():
    """`python -m campaign bench-engines`: the preset with --variants and --epochs applied, the Ray options
    passed through."""
    from campaign.bench_engines import engines_params
    from campaign.cli import build_parser

    args = build_parser().parse_args(
        ["bench-engines", "--params", "smoke", "--variants", "softmax+ape, relu+ape", "--epochs", "1"]
        + ["--workers", "3", "--cpus-per-run", "2", "--root", "/tmp/x"]
    )
    params = engines_params(args)
    assert params.name == "smoke" and params.variants == ("softmax+ape", "relu+ape") and params.train.epochs == 1
    assert (args.workers, args.cpus_per_run, args.root) == (3, 2, "/tmp/x")
    default = engines_params(build_parser().parse_args(["bench-engines"]))
    assert default.variants == load_params("smoke").variants and default.train == load_params("smoke").train


def test_bench_engines_with_an_unknown_preset_is_one_error_line(capsys):
    from campaign.cli import main

    assert main(["bench-engines", "--params", "no_such_preset"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "no_such_preset" in err and "\n" not in err


def test_benchmarks_and_records_name_the_cpu(monkeypatch):
    """A CPU is named by /proc/cpuinfo's model name (platform.processor() is empty on Linux), so a
    table measured on another machine says so."""
    import builtins
    import io

    import torch

    from rpevit.core.device import device_name

    real_open = builtins.open

    def fake_open(path, *args, **kwargs):
        if str(path) == "/proc/cpuinfo":
            return io.StringIO("processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    assert device_name(torch.device("cpu")) == "AMD EPYC 9654 96-Core Processor"
    monkeypatch.setattr(builtins, "open", lambda *a, **k: (_ for _ in ()).throw(OSError("no procfs")))
    assert device_name(torch.device("cpu"))  # platform.processor() or "cpu"
