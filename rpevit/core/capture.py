"""Graph-captured training steps: torch.compile of the step's forward (and so its backward, through
AOTAutograd) and, on one CUDA device, CUDA graphs (compile mode "reduce-overhead": the whole step's
kernels replayed by one launch). The study's model is launch-bound on a GPU (one run keeps an H100
≈ 0.1 % busy), so removing per-kernel launch costs is the second lever beside packing runs
(rpevit.lab.training.pack). On the CPU inductor's fused C++ kernels help unevenly (at 197 tokens, one thread:
FAVOR+ 1.60×, softmax 1.01×, ReLU 0.81×; reports/bench/cpu_train_levers.md), so `train.compile_backends`
(or `--capture-only favor`) limits capture to the backends where it pays. A step is captured only when
`train.compile` (or `--capture`) asks for it.

The compiled step must compute what the plain step computes: tests/test_compile.py checks every
backend × {ape, rope_mixed, krpe, string_circulant}, single and packed, for graph breaks
(fullgraph) and recompiles (dynamo's counters) over steps with FAVOR+ redraws and stochastic-depth
draws, and that a pack trained through the captured step gives the plain pack's records.
"""

from __future__ import annotations

import torch

MODE = "reduce-overhead"  # CUDA graphs through inductor's cudagraph trees
# tests set a dynamo backend here (a counter, or "eager" to run the captured graph with eager kernels)
BACKEND = None


def captures(train_cfg, backend: str) -> bool:
    """Whether a run's training step is captured: asked for (`train.compile`), for this run's
    `backend` when `train.compile_backends` names some (CUDA graphs on one CUDA device, inductor's
    kernels elsewhere: `capture`)."""
    listed = tuple(getattr(train_cfg, "compile_backends", ()))
    return bool(train_cfg.compile) and (not listed or backend in listed)


def capture(step, device: torch.device, *, world_size: int = 1, fullgraph: bool = False):
    """`step` (a module or function) compiled: CUDA graphs on one CUDA device; the default mode under
    DDP (its gradient hooks run between kernels) and elsewhere. `fullgraph`: a graph break raises."""
    if BACKEND is not None:
        return torch.compile(step, backend=BACKEND, fullgraph=fullgraph)
    mode = MODE if device.type == "cuda" and world_size == 1 else None
    return torch.compile(step, mode=mode, fullgraph=fullgraph)
