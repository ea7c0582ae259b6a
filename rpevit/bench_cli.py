"""The `bench` command: its arguments and its dispatch to the benchmark wing (rpevit/lab/bench/:
throughput, attention, pack, tokens). Benchmarks print Markdown tables of ratios measured side by side;
they are never tests."""

from __future__ import annotations

import sys


def add_bench_parser(sub) -> None:
    """The `bench` sub-command's arguments."""
    bench = sub.add_parser("bench", help="throughput benchmarks")
    bench.add_argument(
        "what",
        choices=["train", "data", "levers", "speed", "tokens", "attention", "bias", "patches", "pack"],
        help="what to measure",
    )
    bench.add_argument(
        "--sides",
        help="attention: grid sides (N = side²), default 8,16,32,64,128 = 64…16384 tokens; tokens: patch-grid "
        "sides of the first preset's model on random images of side × patch pixels (N = side² + CLS)",
    )
    bench.add_argument(
        "--softmax-cpu-max",
        type=int,
        default=4096,
        help="attention: largest N on CPU for softmax and relative-bias methods (memory)",
    )
    bench.add_argument(
        "--params",
        help="comma-separated presets whose model/data to use (default smoke; tokens: 50-, 101-, 197-token presets)",
    )
    bench.add_argument("--compile", action="store_true", help="torch.compile the model (CUDA only)")
    bench.add_argument(
        "--variant",
        help="train/data: the variant to time (default: each preset's first); levers, speed, tokens: comma-separated",
    )
    bench.add_argument("--batches", default="128,256", help="levers: comma-separated batch sizes")
    bench.add_argument("--rounds", type=int, default=5, help="speed, tokens: interleaved rounds per variant")
    bench.add_argument("--csv", help="speed, tokens: write the per-round timings here (what the time claims read)")
    bench.add_argument("--no-compile", action="store_true", help="levers: leave torch.compile out")
    bench.add_argument(
        "--amp", choices=["both", "off"], default="both", help="levers: time fp32 and bf16 autocast, or fp32 only"
    )
    bench.add_argument("--steps", type=int, help="timed steps per measurement (train/data 20, attention 5)")
    bench.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    bench.add_argument("--variants", help="pack: comma-separated variants (default: the preset's primary)")
    bench.add_argument("--packs", help="pack: comma-separated pack sizes K (default 1,2,4,8)")
    bench.add_argument("--capture", action="store_true", help="pack: also time every cell graph-captured")


def cmd_bench(args) -> int:
    """Benchmarks: throughput of training, of the data pipeline and of attention (ratios in one run)."""
    print(
        "command: python -m rpevit " + " ".join(sys.argv[1:])
        if sys.argv[0].endswith("__main__.py")
        else f"command: rpevit bench {args.what}",
        flush=True,
    )
    if args.what == "tokens":
        from .lab.bench.tokens import run_tokens_bench

        run_tokens_bench(args)
        return 0
    if args.what == "pack":
        from .lab.bench.pack import run_pack_bench

        run_pack_bench(args)
        return 0
    from .lab.bench.throughput import run_bench

    run_bench(args.what, args)
    return 0
