"""Evaluation metrics and cost measurements for trained models.

* `classification_metrics`: top-1/top-5 accuracy, macro precision/recall/F1, the test-set
  log-likelihood and the AIC/BIC built from it.
* `count_parameters`: trainable parameters, shared tensors counted once.
* `matmul_flops`: forward matmul FLOPs per image from `torch.utils.flop_counter.FlopCounterMode`,
  with scaled-dot-product attention and FFTs made visible to it (see the function's docstring).
* `inference_timing`, `Timer`, `reset_peak_memory` / `peak_memory_mb`: wall-clock and memory,
  synchronising CUDA where the work runs on a GPU.
"""

from __future__ import annotations

import math
import os
import resource
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from .device import autocast

aten = torch.ops.aten


def correct_string(logits: Tensor, labels: Tensor) -> str:
    """Per-example correctness as a string of "1" (right) and "0" (wrong), in order."""
    return "".join("1" if ok else "0" for ok in (logits.argmax(-1) == labels).tolist())


def count_parameters(model: nn.Module) -> int:
    """Number of trainable (requires_grad) parameter elements, each shared tensor counted once."""
    # `parameters()` yields a Parameter tied into several modules only once.
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def classification_metrics(logits: Tensor, labels: Tensor, num_params: int) -> dict[str, float]:
    """Accuracy, macro precision/recall/F1, log-likelihood, AIC and BIC of `logits` against `labels`.

    Macro averages follow scikit-learn's `precision_recall_fscore_support(average='macro',
    zero_division=0)`: they run over the classes that occur in `labels` or in the predictions,
    and a ratio with a zero denominator counts as 0 (a class never predicted has precision 0).
    `log_likelihood` is sum_i log softmax(logits_i)[y_i] in float64; with k = `num_params` and
    n examples, aic = 2k - 2 ln L and bic = k ln n - 2 ln L. top5 uses min(5, C) classes.
    """
    if logits.ndim != 2 or labels.ndim != 1 or logits.shape[0] != labels.shape[0]:
        raise ValueError(f"expected logits (n, C) and labels (n,), got {tuple(logits.shape)} and {tuple(labels.shape)}")
    num_examples, num_classes = logits.shape
    if num_examples == 0:
        raise ValueError("classification_metrics needs at least one example")
    labels = labels.to(device=logits.device, dtype=torch.long)
    log_probs = torch.log_softmax(logits.double(), dim=1)
    log_likelihood = log_probs.gather(1, labels[:, None]).sum().item()

    predictions = logits.argmax(dim=1)
    top5_indices = logits.topk(min(5, num_classes), dim=1).indices
    top5 = (top5_indices == labels[:, None]).any(dim=1).double().mean().item()

    correct = predictions == labels
    true_positives = torch.bincount(labels[correct], minlength=num_classes).double()
    predicted_counts = torch.bincount(predictions, minlength=num_classes).double()
    actual_counts = torch.bincount(labels, minlength=num_classes).double()
    present = (predicted_counts + actual_counts) > 0
    precision = _safe_ratio(true_positives, predicted_counts)
    recall = _safe_ratio(true_positives, actual_counts)
    f1 = _safe_ratio(2 * true_positives, predicted_counts + actual_counts)

    return {
        "top1": correct.double().mean().item(),
        "top5": top5,
        "precision": precision[present].mean().item(),
        "recall": recall[present].mean().item(),
        "f1": f1[present].mean().item(),
        "log_likelihood": log_likelihood,
        "aic": 2.0 * num_params - 2.0 * log_likelihood,
        "bic": num_params * math.log(num_examples) - 2.0 * log_likelihood,
        "n_test": int(num_examples),
    }


def _safe_ratio(numerator: Tensor, denominator: Tensor) -> Tensor:
    """numerator / denominator elementwise, 0 where the denominator is 0."""
    return torch.where(denominator > 0, numerator / denominator.clamp(min=1), torch.zeros_like(numerator))


def _fft_flops(signal_shape: Sequence[int], dims: Sequence[int], flops_per_point_log2: float) -> int:
    """c · N · log2(n_d) summed over transformed dims d, N = number of signal elements."""
    num_elements = math.prod(signal_shape)
    return round(sum(flops_per_point_log2 * num_elements * math.log2(signal_shape[d]) for d in dims))


def _fft_r2c_flops(input_shape, dims, *args, out_shape=None, **kwargs) -> int:
    """Real-to-complex FFT: the real input is the signal, 2.5 n log2 n per 1-D transform."""
    return _fft_flops(input_shape, dims, 2.5)


def _fft_c2r_flops(input_shape, dims, *args, out_shape=None, **kwargs) -> int:
    """Complex-to-real FFT: the real output is the signal, 2.5 n log2 n per 1-D transform."""
    return _fft_flops(out_shape, dims, 2.5)


def _fft_c2c_flops(input_shape, dims, *args, out_shape=None, **kwargs) -> int:
    """Complex-to-complex FFT: 5 n log2 n per 1-D transform."""
    return _fft_flops(input_shape, dims, 5.0)


_FFT_FLOP_FORMULAS = {
    aten._fft_r2c: _fft_r2c_flops,
    aten._fft_c2r: _fft_c2r_flops,
    aten._fft_c2c: _fft_c2c_flops,
}


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Put every submodule in eval mode, then restore each one's own training flag."""
    training_flags = {module: module.training for module in model.modules()}
    model.eval()
    try:
        yield
    finally:
        for module, training in training_flags.items():
            module.training = training


def matmul_flops(model: nn.Module, images: Tensor) -> int:
    """Forward matmul FLOPs per image (2 per multiply-accumulate), total over `images` / batch size.

    Counted by `FlopCounterMode` (mm/addmm/bmm/convolution/einsum as 2·MACs; elementwise ops,
    softmax, normalisation etc. are not counted), in eval mode under `torch.no_grad()`.

    Scaled-dot-product attention: the fused CPU kernel is invisible to the counter (it counts 0),
    so the forward runs under `sdpa_kernel(SDPBackend.MATH)`, whose decomposition into bmm makes
    QK^T and AV count 2·2·h·T²·d per image. Outputs are unchanged; only the kernel differs.

    FFTs (`aten._fft_r2c`, `_fft_c2r`, `_fft_c2c`, which the counter ignores) are counted with
    registered formulas: a 1-D transform of length n costs 2.5·n·log2(n) real FLOPs when its
    signal is real (r2c, c2r; the real side's shape is the signal) and 5·n·log2(n) when complex
    (c2c). A transform over dims D of a signal with N elements runs N / n_d 1-D transforms along
    each d in D, so it costs c·N·Σ_d log2(n_d) = c·N·log2(Π_d n_d), c = 2.5 or 5.
    """
    with _eval_mode(model), torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        with FlopCounterMode(display=False, custom_mapping=_FFT_FLOP_FORMULAS) as counter:
            model(images)
    return round(counter.get_total_flops() / images.shape[0])


def synchronize(device: torch.device | str) -> None:
    """Wait for queued CUDA work on `device`; nothing to wait for elsewhere."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(run, device, repeats: int, warmup: int = 0) -> list[float]:
    """Wall seconds of each of `repeats` calls of `run` after `warmup` untimed calls, CUDA synchronised."""
    device = torch.device(device)
    for _ in range(warmup):
        run()
    durations = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        durations.append(time.perf_counter() - start)
    return durations


def _timed_seconds(run, device: torch.device, repeats: int) -> float:
    """Median wall seconds of `repeats` calls of `run`."""
    return statistics.median(timed(run, device, repeats))


def inference_timing(
    model: nn.Module,
    images: Tensor,
    *,
    batch_size: int = 256,
    warmup: int = 2,
    repeats: int = 5,
    amp: str = "off",
    compile_model: bool = False,
) -> dict[str, float]:
    """Batched ms/image over all `images` and single-image latency in ms, medians over `repeats`.

    Batched: one repeat is a full pass over `images` in `batch_size` chunks, divided by the
    number of images. Single: one repeat is a forward of `images[:1]`. Each measurement follows
    `warmup` untimed forwards of its input (first chunk / first image). Runs in eval mode
    (restored after) under `torch.inference_mode()`, in the precision and compile state the
    record states: `amp` as train.amp (rpevit.core.device), `compile_model` through torch.compile
    (compiled during the warmup).
    """

    if images.shape[0] == 0 or repeats < 1:
        raise ValueError("inference_timing needs at least one image and one repeat")
    chunks = images.split(batch_size)
    single = images[:1]

    forward = torch.compile(model) if compile_model else model

    def batched_pass() -> None:
        for chunk in chunks:
            forward(chunk)

    with _eval_mode(model), torch.inference_mode(), autocast(images.device, amp):
        for _ in range(warmup):
            forward(chunks[0])
        batched_seconds = _timed_seconds(batched_pass, images.device, repeats)
        for _ in range(warmup):
            forward(single)
        single_seconds = _timed_seconds(lambda: forward(single), images.device, repeats)
    return {
        "ms_per_image_batched": 1000.0 * batched_seconds / images.shape[0],
        "ms_single_image": 1000.0 * single_seconds,
    }


_CLEAR_REFS, _STATUS = Path("/proc/self/clear_refs"), Path("/proc/self/status")


def reset_peak_memory(device) -> None:
    """Start a new peak-memory measurement: CUDA's peak-allocation counter, or on Linux the
    process's peak resident set (VmHWM, reset by writing 5 to /proc/self/clear_refs)."""
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        pass  # not Linux, or not permitted: peak_memory_mb falls back to the process-wide mark


def peak_memory_mb(device) -> float:
    """Peak memory in MiB since `reset_peak_memory`: CUDA max allocated, or on CPU the peak RSS.

    On Linux the CPU figure is VmHWM, which reset_peak_memory resets, so each run of a study
    measures its own peak (it still includes what the process held before, e.g. the dataset);
    elsewhere it is the process-wide ru_maxrss high-water mark.
    """
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_bytes = max_rss if sys.platform == "darwin" else max_rss * 1024  # macOS reports bytes, Linux KiB
    return rss_bytes / 2**20


def machine_load() -> dict:
    """The load under which timings were taken: 1-minute load average, cores, torch threads."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {"load_average": load, "cpu_count": os.cpu_count(), "threads": torch.get_num_threads()}


def busy(record: dict) -> bool:
    """True if a record's (or a benchmark row's) timings were taken on a busy machine (busy_load)."""
    return busy_load(record.get("load_average"), record.get("cpu_count"))


def busy_load(load: float | None, cores: int | None) -> bool:
    """A 1-minute load average above the machine's cores (+ 0.5): timings taken then measure the load."""
    return load is not None and cores is not None and load > cores + 0.5


class Timer:
    """Context manager measuring its block's wall seconds (`.seconds`) and this process's CPU seconds,
    every thread summed (`.cpu_seconds`: what a one-thread CPU budget counts, unchanged by other
    processes on the machine), synchronising CUDA devices."""

    def __init__(self, device="cpu"):
        self.device = torch.device(device)
        self.seconds = self.cpu_seconds = 0.0
        self._start = self._cpu_start = 0.0

    def __enter__(self) -> Timer:
        synchronize(self.device)
        self._start, self._cpu_start = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc_info) -> None:
        synchronize(self.device)
        self.seconds = time.perf_counter() - self._start
        self.cpu_seconds = time.process_time() - self._cpu_start


# dense (no sparsity) bf16 tensor-core peaks, TFLOP/s, from NVIDIA's data sheets; the longest
# name contained in torch.cuda.get_device_name() wins
BF16_PEAK_TFLOPS = {
    "B200": 2250.0,
    "B100": 1750.0,
    "H200": 989.4,
    "GH200": 989.4,
    "H100 NVL": 835.0,
    "H100 PCIe": 756.0,
    "H100": 989.4,  # SXM
    "A100": 312.0,
    "L40S": 362.0,
    "L40": 181.0,
    "L4": 121.0,
    "A10G": 70.0,
    "A10": 125.0,
}


def bf16_peak(name: str) -> float | None:
    """The GPU's stated dense bf16 peak in FLOP/s, or None when the table does not know it."""
    known = [key for key in BF16_PEAK_TFLOPS if key.lower() in name.lower()]
    return BF16_PEAK_TFLOPS[max(known, key=len)] * 1e12 if known else None
