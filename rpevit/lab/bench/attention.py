"""Benchmarks of one attention layer (`python -m rpevit bench attention` and `bench bias`): forward+
backward time and memory against the number of tokens N for every backend, bare and with each
positional method consumed inside attention, growth ratios T(4N)/T(N), and a relative bias in linear
attention through its fast paths against the dense N×N path. Numbers measured side by side in one
process, never asserted by tests."""

from __future__ import annotations

import torch

from ...core.device import device_name, resolve_device
from ...core.metrics import timed
from ..tables import markdown_table

ATTENTION_SIDES = "8,16,32,64,128"  # grid sides of the attention and bias benches: 64 … 16384 tokens


def attention_cost(
    backend: str,
    method: str | None,
    side: int,
    device,
    dtype,
    repeats: int,
    bias_path: str = "auto",
    heads: int = 8,
    head_dim: int = 32,
    batch: int = 1,
) -> dict:
    """Seconds per forward+backward of one attention layer on a side×side grid (+CLS), and memory.

    `method` is any positional method consumed inside attention (rotary, bias or gate) or None;
    `bias_path` (auto / fft / dense / axis / scan) picks how linear backends apply a relative bias.
    Memory: on CUDA the peak allocated bytes; on CPU the bytes autograd saves for backward (the
    layer's activation memory), which isolates the layer from everything else the process holds.
    """
    from ...core.attention import linear_backends
    from ...core.attention.layer import MultiHeadAttention
    from ...core.config import model_config
    from ...core.grid import Grid
    from ...core.position import POSITIONS

    torch.manual_seed(0)
    paths = {name: {"bias_path": bias_path} for name in linear_backends()}
    config = model_config(dim=heads * head_dim, heads=heads, image_size=side * 4, patch_size=4, **paths)
    mechanism = {POSITIONS[method].mechanism: method} if method else {}
    layer = MultiHeadAttention.from_config(config, backend, **mechanism).to(device)
    grid = Grid(side, side, cls=True)
    x = torch.randn(batch, grid.num_tokens, config.dim, device=device, requires_grad=True)

    def forward():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            return layer(x, grid)

    def step():
        forward().float().sum().backward()

    times = timed(step, device, repeats, warmup=1)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        step()
        memory = torch.cuda.max_memory_allocated(device) - base
    else:
        saved = []

        def pack(tensor):
            saved.append(tensor.numel() * tensor.element_size())
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            forward().float().sum()
        memory = sum(saved)
    return {"seconds": sorted(times)[len(times) // 2], "memory_mb": memory / 2**20}


def _table(header: list[str], rows: list[list]) -> str:
    return markdown_table([dict(zip(header, row)) for row in rows], header)


def growth(rows: dict, key: tuple, ns: list[int]) -> list[str]:
    """T(4N)/T(N) cells for one (backend, method, path) series of measured seconds."""
    return [
        f"{rows[key + (b,)]['seconds'] / rows[key + (a,)]['seconds']:.2f}"
        if key + (a,) in rows and key + (b,) in rows
        else "—"
        for a, b in zip(ns, ns[1:])
    ]


def run_attention_bench(args) -> None:
    """Print the attention scaling tables: time/memory vs N per backend × method (bias path "auto",
    as in training), growth ratios, method overhead at N = 1024, and krpe in linear attention
    through the FFT path vs the dense N×N path (both forced), with their crossover."""
    from ...core.attention import BACKENDS, linear_backends
    from ...core.position import POSITIONS

    device = resolve_device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    methods = [None] + [n for n, m in POSITIONS.items() if m.mechanism in ("rotary", "bias")]
    sides = [int(s) for s in (args.sides or ATTENTION_SIDES).split(",")]
    ns = [s * s for s in sides]
    rows: dict = {}
    print(
        f"device: {device} ({device_name(device)}, "
        f"{torch.get_num_threads()} threads), torch {torch.__version__}, {dtype}, batch 1, 8 heads, head dim 32; "
        f"forward+backward of one attention layer, median of {args.steps}; memory: "
        + ("peak allocated (CUDA)" if device.type == "cuda" else "activations saved for backward (CPU)")
    )
    print()
    print("| backend | method | bias path | N | ms | memory MB |\n|---|---|---|---|---|---|")

    def measure(backend, method, path, side):
        n = side * side
        quadratic = BACKENDS[backend].exact or (method and POSITIONS[method].mechanism == "bias")
        if quadratic and device.type == "cpu" and n > args.softmax_cpu_max:
            return  # N² memory (softmax, any dense bias) or m·d·4N (FFT bias) beyond a 24 GiB CPU box
        try:
            cost = attention_cost(backend, method, side, device, dtype, args.steps, bias_path=path)
        except torch.OutOfMemoryError:
            print(f"| {backend} | {method or '—'} | {path} | {n} | out of memory | |", flush=True)
            return
        rows[(backend, method, path, n)] = cost
        print(
            f"| {backend} | {method or '—'} | {path} | {n} | {1000 * cost['seconds']:.2f} | {cost['memory_mb']:.1f} |",
            flush=True,
        )

    for backend in BACKENDS:
        for method in methods:
            for side in sides:
                measure(backend, method, "auto", side)
    for backend in linear_backends():
        for path in ("fft", "dense"):
            for side in sides:
                measure(backend, "krpe", path, side)

    _attention_summaries(rows, ns, [m for m in methods if m])


def _attention_summaries(rows: dict, ns: list[int], named: list[str]) -> None:
    """run_attention_bench's summaries of its timings: growth of the bare backends, each method's
    overhead at N = 1024, and krpe's FFT path against the dense path in linear attention."""
    from ...core.attention import BACKENDS, linear_backends

    print("\nGrowth T(4N)/T(N) of the bare backends (linear attention → 4, softmax → 16):\n")
    print(
        _table(
            ["backend"] + [f"{a}→{b}" for a, b in zip(ns, ns[1:])],
            [[b] + growth(rows, (b, None, "auto"), ns) for b in BACKENDS],
        )
    )
    print("\nOverhead of each method at N = 1024: T(with method) / T(bare backend):\n")
    print(
        _table(
            ["backend"] + named,
            [
                [b]
                + [
                    f"{rows[(b, m, 'auto', 1024)]['seconds'] / rows[(b, None, 'auto', 1024)]['seconds']:.2f}"
                    if (b, m, "auto", 1024) in rows and (b, None, "auto", 1024) in rows
                    else "—"
                    for m in named
                ]
                for b in BACKENDS
            ],
        )
    )
    print(
        "\nkrpe in linear attention: the 2D-FFT path vs the dense N×N path (time ratio dense/FFT; > 1: FFT "
        "faster), and the FFT path's growth T(4N)/T(N):\n"
    )
    linear = linear_backends()
    print(
        _table(
            ["backend"] + [f"N={n}" for n in ns] + [f"FFT {a}→{b}" for a, b in zip(ns, ns[1:])],
            [
                [b]
                + [
                    f"{rows[(b, 'krpe', 'dense', n)]['seconds'] / rows[(b, 'krpe', 'fft', n)]['seconds']:.2f}"
                    if (b, "krpe", "dense", n) in rows and (b, "krpe", "fft", n) in rows
                    else "—"
                    for n in ns
                ]
                + growth(rows, (b, "krpe", "fft"), ns)
                for b in linear
            ],
        )
    )


def run_bias_bench(args) -> None:
    """Relative bias inside linear attention: time and memory of every bias method × exact
    path per linear backend and N, as ratios to plain linear attention of the same backend, in one run."""
    from ...core.attention import linear_backends
    from ...core.attention.linear import bias_paths
    from ...core.position import POSITIONS, build_position

    device = resolve_device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    sides = [int(s) for s in (args.sides or ATTENTION_SIDES).split(",")]
    biases = [n for n, m in POSITIONS.items() if m.mechanism == "bias"]
    print(
        f"device: {device} ({device_name(device)}, "
        f"{torch.get_num_threads()} threads), torch {torch.__version__}, {dtype}, batch 1, 8 heads, head dim 32, "
        f"CLS; forward+backward of one attention layer (projections included), median of {args.steps}; memory: "
        + ("peak allocated (CUDA)" if device.type == "cuda" else "activations saved for backward (CPU)")
        + f"; dense N×N paths only up to N = {args.softmax_cpu_max} on CPU"
    )
    rows = []
    for backend in linear_backends():
        for side in sides:
            n = side * side
            plain = attention_cost(backend, None, side, device, dtype, args.steps)
            rows.append(
                {
                    "backend": backend,
                    "method": "— (plain)",
                    "path": "—",
                    "N": n,
                    "ms": 1000 * plain["seconds"],
                    "MB": plain["memory_mb"],
                    "time ×": 1.0,
                    "memory ×": 1.0,
                }
            )
            print(markdown_table(rows[-1:], list(rows[-1])), end="", flush=True)
            for method in biases:
                probe = build_position(method, _bench_config(side), 32, 8)
                for path in bias_paths(probe):
                    if path == "dense" and device.type == "cpu" and n > args.softmax_cpu_max:
                        continue
                    cost = attention_cost(backend, method, side, device, dtype, args.steps, bias_path=path)
                    rows.append(
                        {
                            "backend": backend,
                            "method": method,
                            "path": path,
                            "N": n,
                            "ms": 1000 * cost["seconds"],
                            "MB": cost["memory_mb"],
                            "time ×": cost["seconds"] / plain["seconds"],
                            "memory ×": cost["memory_mb"] / max(plain["memory_mb"], 1e-9),
                        }
                    )
                    print(markdown_table(rows[-1:], list(rows[-1])).splitlines()[-1], flush=True)
    print("\nAll rows (ratios to plain linear attention of the same backend and N):\n")
    print(markdown_table(rows, list(rows[0]), digits=2))


def _bench_config(side: int):
    from ...core.config import model_config

    return model_config(dim=256, heads=8, image_size=side * 4, patch_size=4)
