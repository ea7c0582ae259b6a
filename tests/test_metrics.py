"""Tests for rpevit.core.metrics: scores against scikit-learn, FLOP counts against hand formulas."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import accuracy_score, precision_recall_fscore_support, top_k_accuracy_score
from torch import nn

from rpevit.core.metrics import (
    Timer,
    classification_metrics,
    count_parameters,
    inference_timing,
    matmul_flops,
    peak_memory_mb,
    reset_peak_memory,
)


def _random_logits(num_examples, num_classes, never_predicted, seed=0):
    """Random logits and labels where class `never_predicted` is never the argmax but does occur."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_examples, num_classes, generator=generator)
    logits[:, never_predicted] -= 100.0
    labels = torch.randint(0, num_classes, (num_examples,), generator=generator)
    labels[0] = never_predicted
    return logits, labels


def _sklearn_scores(logits, labels, num_classes):
    predictions = logits.argmax(dim=1).numpy()
    precision, recall, f1, _ = precision_recall_fscore_support(
        labels.numpy(), predictions, average="macro", zero_division=0
    )
    top5 = top_k_accuracy_score(labels.numpy(), logits.numpy(), k=min(5, num_classes), labels=np.arange(num_classes))
    return {
        "top1": accuracy_score(labels.numpy(), predictions),
        "top5": top5,
        "precision": precision,
        "recall": recall,
        "f1": f1,
    }


def _hand_log_likelihood(logits, labels):
    values = logits.double().numpy()
    shifted = values - values.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(log_probs[np.arange(len(labels)), labels.numpy()].sum())


def test_classification_metrics_match_sklearn_with_never_predicted_class():
    logits, labels = _random_logits(300, 10, never_predicted=7)
    assert 7 not in logits.argmax(dim=1) and 7 in labels

    metrics = classification_metrics(logits, labels, num_params=100)
    expected = _sklearn_scores(logits, labels, 10)

    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, abs=1e-12), name
    assert 0.0 < metrics["precision"] < 1.0


def test_macro_average_skips_classes_absent_from_labels_and_predictions_like_sklearn():
    logits, labels = _random_logits(200, 6, never_predicted=5, seed=1)
    labels = labels % 5  # class 5 now occurs nowhere

    metrics = classification_metrics(logits, labels, num_params=1)
    expected = _sklearn_scores(logits, labels, 6)

    for name in ("precision", "recall", "f1"):
        assert metrics[name] == pytest.approx(expected[name], abs=1e-12), name


def test_log_likelihood_aic_bic_and_json_types():
    logits, labels = _random_logits(50, 4, never_predicted=2, seed=2)
    logits = logits * 3.0
    num_params = 1234

    metrics = classification_metrics(logits, labels, num_params)
    log_likelihood = _hand_log_likelihood(logits, labels)

    assert metrics["log_likelihood"] == pytest.approx(log_likelihood, rel=1e-12)
    assert metrics["aic"] == pytest.approx(2 * num_params - 2 * log_likelihood, rel=1e-12)
    assert metrics["bic"] == pytest.approx(num_params * math.log(50) - 2 * log_likelihood, rel=1e-12)
    assert metrics["n_test"] == 50 and isinstance(metrics["n_test"], int)
    assert all(type(value) in (float, int) for value in metrics.values())
    json.dumps(metrics)


def test_low_precision_logits_use_float64_log_likelihood():
    logits, labels = _random_logits(40, 6, never_predicted=0, seed=3)
    logits = logits.to(torch.bfloat16)

    metrics = classification_metrics(logits, labels, num_params=10)

    assert metrics["log_likelihood"] == pytest.approx(_hand_log_likelihood(logits.float(), labels), rel=1e-12)


def test_top5_with_fewer_than_five_classes_covers_every_class():
    logits, labels = _random_logits(30, 3, never_predicted=1, seed=4)

    metrics = classification_metrics(logits, labels, num_params=1)

    assert metrics["top5"] == 1.0
    assert metrics["top1"] == pytest.approx((logits.argmax(1) == labels).double().mean().item())
    assert metrics["top1"] < 1.0


def test_classification_metrics_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"expected logits \(n, C\) and labels \(n,\), got \(4, 3\) and \(5,\)"):
        classification_metrics(torch.zeros(4, 3), torch.zeros(5, dtype=torch.long), num_params=1)


class _TiedModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)  # 40, shared with head
        self.frozen = nn.Linear(4, 4)  # 20, frozen
        self.hidden = nn.Linear(4, 3)  # 15
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.frozen.requires_grad_(False)


def test_count_parameters_skips_frozen_and_counts_tied_weight_once():
    assert count_parameters(_TiedModel()) == 40 + 15


def test_linear_flops_per_image():
    model = nn.Linear(64, 32)
    assert matmul_flops(model, torch.randn(7, 64)) == 2 * 64 * 32


class _TinyAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, tokens):
        batch, length, dim = tokens.shape
        q, k, v = self.qkv(tokens).view(batch, length, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v)
        return self.out(attended.transpose(1, 2).reshape(batch, length, dim))


def test_sdpa_attention_matmuls_are_counted():
    dim, heads, length = 32, 4, 17
    head_dim = dim // heads
    model = _TinyAttention(dim, heads).train()
    model.out.eval()  # a submodule with its own mode must keep it

    flops = matmul_flops(model, torch.randn(3, length, dim))

    projections = 2 * length * dim * 3 * dim + 2 * length * dim * dim
    attention = 2 * 2 * heads * length**2 * head_dim
    assert flops == projections + attention
    assert model.training and model.qkv.training and not model.out.training


class _SpectralFilter(nn.Module):
    def forward(self, images):
        return torch.fft.irfft2(torch.fft.rfft2(images), s=images.shape[-2:])


def test_fft_flops_follow_documented_formula():
    channels, height, width = 3, 8, 16
    flops = matmul_flops(_SpectralFilter(), torch.randn(2, channels, height, width))

    signal_elements = channels * height * width
    per_real_transform = 2.5 * signal_elements * math.log2(height * width)  # rfft2, then irfft2
    assert flops > 0
    assert flops == round(2 * per_real_transform)


def test_complex_fft_flops_follow_documented_formula():
    class ComplexFFT(nn.Module):
        def forward(self, tokens):
            return torch.fft.fft(tokens.to(torch.complex64), dim=1)

    batch, length, channels = 4, 12, 5
    flops = matmul_flops(ComplexFFT(), torch.randn(batch, length, channels))

    total = round(5.0 * batch * length * channels * math.log2(length))  # rounded per op, then per image
    assert flops == round(total / batch)


def test_inference_timing_positive_and_restores_train_mode():
    model = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.1), nn.Linear(32, 4)).train()

    timing = inference_timing(model, torch.randn(10, 16), batch_size=4, warmup=1, repeats=3)

    assert set(timing) == {"ms_per_image_batched", "ms_single_image"}
    assert all(math.isfinite(value) and value > 0 for value in timing.values())
    assert all(module.training for module in model.modules())


def test_timer_reads_the_clock_after_synchronising_at_both_ends(monkeypatch):
    """A fake clock (no wall time, so no load dependence): seconds is end − start, each read taken after the
    device is synchronised (a CUDA timer that read the clock first would time the launch, not the work)."""
    import types

    from rpevit.core import metrics

    events, readings, cpu_readings = [], iter([10.0, 10.25]), iter([3.0, 3.125])

    def clock():
        events.append("clock")
        return next(readings)

    def cpu_clock():
        events.append("cpu clock")
        return next(cpu_readings)

    monkeypatch.setattr(metrics, "time", types.SimpleNamespace(perf_counter=clock, process_time=cpu_clock))
    monkeypatch.setattr(metrics, "synchronize", lambda device: events.append(f"sync {torch.device(device).type}"))
    with Timer("cpu") as timer:
        events.append("block")
    assert (timer.seconds, timer.cpu_seconds) == (0.25, 0.125)
    assert events == ["sync cpu", "clock", "cpu clock", "block", "sync cpu", "clock", "cpu clock"]


def test_a_wait_is_wall_time_but_not_cpu_time():
    """What a one-thread CPU budget counts (cpu_seconds) leaves out time the process did not run — here a
    sleep, on a busy machine the waits for a core — and counts the work it did."""
    import time

    with Timer("cpu") as waited:
        time.sleep(0.3)
    assert waited.seconds >= 0.3 and waited.cpu_seconds < 0.1
    with Timer("cpu") as worked:
        deadline = time.process_time() + 0.2
        while time.process_time() < deadline:
            pass
    assert worked.cpu_seconds >= 0.2


def test_cpu_peak_memory_is_measured_per_run():
    """The peak resident set is reset per measurement (Linux VmHWM), so a later run does not inherit
    an earlier run's peak."""
    reset_peak_memory("cpu")
    before = peak_memory_mb("cpu")
    block = torch.ones(256 * 2**20 // 4)  # 256 MiB touched
    during = peak_memory_mb(torch.device("cpu"))
    del block
    assert 0 < before and during > before + 200
    assert peak_memory_mb("cpu") > before + 200  # a high-water mark: the freed block still counts
    reset_peak_memory("cpu")
    assert peak_memory_mb("cpu") < during - 200  # a new measurement starts from what is held now


def test_result_fields_are_what_a_run_computed():
    """The schema's one list of result fields (no timings, hosts or dates) — every test uses it."""
    from rpevit.lab.schema import RESULT_FIELDS, result_view

    assert {"top1", "log_likelihood", "test_correct", "test_predictions", "best_epoch"} <= set(RESULT_FIELDS)
    timings = {"ms_per_image_batched", "train_seconds_per_epoch", "train_cpu_seconds_per_epoch"}
    assert not {*timings, "finished_at", "device", "load_average"} & set(RESULT_FIELDS)
    assert result_view({"top1": 0.9, "ms_per_image_batched": 3.0})["top1"] == 0.9
