"""CUDA readiness without a GPU (issue 19): the defects a GPU would show, caught on the CPU build.

- The `meta` device stands in for an accelerator: it refuses to mix with CPU tensors as CUDA
  does, and every host sync (`.item()`, `bool()`, `.cpu()`) raises. `HostToDevice` records each
  tensor a forward creates from host data on a device (a blocking copy per call on CUDA).
- Graph capture does not depend on the device: `torch._dynamo.explain` counts graph breaks and
  a compiled model counts its frames on the CPU as it would on CUDA.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from rpevit.core.errors import UserError
from rpevit.core.grid import Grid

from helpers import require_module

META = torch.device("meta")


def _off_host(device) -> bool:
    return device is not None and torch.device(device).type != "cpu"


class HostToDevice(TorchFunctionMode):
    """Records every tensor made on a device from host data, or copied there from a CPU tensor."""

    _FACTORIES = (torch.tensor, torch.as_tensor, torch.asarray)

    def __init__(self):
        super().__init__()
        self.copies: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self._FACTORIES and _off_host(kwargs.get("device")):
            if not (isinstance(args[0], torch.Tensor) and args[0].device.type != "cpu"):
                self.copies.append(f"{func.__name__} on {kwargs['device']}")
        elif func is torch.Tensor.to and isinstance(args[0], torch.Tensor) and args[0].device.type == "cpu":
            device = torch._C._nn._parse_to(*args[1:], **kwargs)[0]
            if _off_host(device):
                self.copies.append(f"Tensor.to({device}) of a CPU tensor {tuple(args[0].shape)}")
        elif func is torch.Tensor.copy_ and args[0].device.type != "cpu" and args[1].device.type == "cpu":
            self.copies.append(f"copy_ of a CPU tensor {tuple(args[1].shape)} to {args[0].device}")
        return func(*args, **kwargs)


# ------------------------------------------------------------------ defects 2 and 3 of issue 19


def test_grid_positions_and_decay_rates_are_made_on_the_device():
    """Defect 2: scaled patch positions and per-axis decay rates were `torch.tensor([...], device)`."""
    from rpevit.core.config import model_config
    from rpevit.core.position import build_position

    grid = Grid(5, 6, cls=True, trained=(3, 3), interpolate=True)
    decay = build_position("manhattan", model_config(dim=16, heads=2), 8, 2).to(META)
    with HostToDevice() as recorder:
        coords = grid.coords(device=META)
        rates = decay.axis_rates(grid)
    assert recorder.copies == []
    assert coords.device == META and coords.shape == (30, 2) and rates.shape == (2, 2)
    expected = Grid(5, 6, trained=(3, 3), interpolate=True).coords() / torch.tensor([3 / 5, 3 / 6])
    torch.testing.assert_close(expected, Grid(5, 6).coords())


def test_separable_auto_path_reads_no_device_value():
    """Defect 3: the auto path tested the decay rates' sign with `bool()` (a sync, a graph break)."""
    from rpevit.core.attention.separable import separable_linear_attention

    grid, heads, m, d = Grid(3, 4, cls=True), 2, 6, 4
    q, k = (torch.empty(2, heads, grid.num_tokens, m, device=META) for _ in range(2))
    v = torch.empty(2, heads, grid.num_tokens, d, device=META)
    decay = torch.empty(heads, device=META)
    out = separable_linear_attention(q, k, q, k, v, grid, decay=decay)
    assert out.shape == (2, heads, grid.num_tokens, d) and out.device == META


def test_amp_auto_needs_bf16_support_and_asked_bf16_runs_anywhere(monkeypatch):
    """Defect 8: `amp: auto` picked bf16 on any GPU (V100 and T4 have none); `amp: bf16` was fp32 on CPU."""
    from rpevit.core import device as device_lib

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert not device_lib.uses_bf16(cuda, "auto") and device_lib.uses_bf16(cuda, "bf16")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert device_lib.uses_bf16(cuda, "auto") and not device_lib.uses_bf16(cuda, "off")
    assert not device_lib.uses_bf16(cpu, "auto") and device_lib.uses_bf16(cpu, "bf16")
    with device_lib.autocast(cpu, "bf16"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.bfloat16


def test_the_planned_precision_is_told_without_a_gpu_where_it_can_be(monkeypatch):
    """amp 'auto' is fp32 on a CPU and bf16 on a GPU with bf16 (one run key for both): the study checks
    the precision a sitting will train in before it trains; unknown only for 'auto' on a GPU not seen."""
    from rpevit.core import device as device_lib

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_lib.planned_precision("cpu", "auto") == "fp32" == device_lib.planned_precision("auto", "auto")
    assert device_lib.planned_precision("cpu", "bf16") == "bf16"
    assert device_lib.planned_precision("cuda", "off") == "fp32"
    assert device_lib.planned_precision("cuda", "auto") is None  # a Ray driver without the workers' GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert device_lib.planned_precision("cuda", "auto") == "bf16" == device_lib.planned_precision("auto", "auto")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert device_lib.planned_precision("cuda", "auto") == "fp32"  # V100, T4


def test_a_study_is_not_continued_in_another_precision():
    from rpevit.core import device as device_lib

    finished = [{"amp": "fp32"}, {"amp": "fp32"}, {"amp": "bf16"}]
    said = "preset p: 2 of its 3 finished runs trained in fp32, but this sitting would train in bf16"
    with pytest.raises(UserError, match="^" + said) as error:  # no regex metacharacters in it
        device_lib.check_one_precision("p", "auto", "bf16", "cuda", finished)
    assert "(--device cpu)" in str(error.value) and "under another name" in str(error.value)
    with pytest.raises(UserError, match="1 of its 3 finished runs trained in bf16, but this sitting would train in fp"):
        device_lib.check_one_precision("p", "auto", "fp32", "cpu", finished)
    device_lib.check_one_precision("p", "auto", "fp32", "cpu", finished[:2])  # one precision: nothing to say
    device_lib.check_one_precision("p", "auto", None, "cuda", finished)  # not known here: the workers train


def test_kernel_sum_channels_trace_without_graph_breaks():
    """Defect 9: `torch.mul(..., out=)` into a permuted view broke the graph on the axis bias path."""
    from rpevit.core.attention.kernel_sums import outer_channels

    k_num, values, k_den = torch.randn(2, 3, 4, 5), torch.randn(2, 4, 4, 5), torch.randn(2, 3, 4, 5)
    for layout in ("channels_first", "rows_first"):
        torch._dynamo.reset()
        explained = torch._dynamo.explain(outer_channels)(k_num, values, k_den, layout)
        assert explained.graph_break_count == 0, (layout, explained.break_reasons)
        assert torch.equal(
            outer_channels(k_num, values, k_den, layout), outer_channels(k_num, values, k_den, "channels_first")
        )


def test_ray_gpu_runs_get_a_fresh_worker_each():
    """Defect 1: GPU runs reused Ray workers (CUDA context, allocator cache, dataset cache outlived a run)."""
    ray = require_module("ray", "Ray is not installed (pip install -e '.[cluster]')")
    from rpevit.lab.schedule import cluster

    assert cluster.remote_task(ray, 0.5)._default_options.get("max_calls") == 1
    assert cluster.remote_task(ray, 1)._default_options.get("max_calls") == 1
    assert cluster.remote_task(ray, 0)._default_options.get("max_calls") in (None, 0)  # CPU workers are reused


def _install_script(tmp_path, installed: str | None, gpu: str | None, decide: bool):
    """scripts/install_torch.sh with a fake python (torch `installed` or none; `pip` succeeds;
    `torch.cuda.is_available()` is False) and a fake nvidia-smi (absent for gpu None; "ok" lists a
    GPU, "broken" exits 9 as without a driver)."""
    import subprocess
    from pathlib import Path

    bin_dir = tmp_path / f"bin-{installed}-{gpu}-{decide}"
    bin_dir.mkdir()
    python = bin_dir / "python"
    version = f"echo {installed}" if installed else "exit 1"
    python.write_text(f'#!/bin/sh\n[ "$1" = -m ] && exit 0\ncase "$2" in *is_available*) exit 1;; esac\n{version}\n')
    if gpu is not None:
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\n{'echo GPU 0: H100' if gpu == 'ok' else 'exit 9'}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    script = Path(__file__).resolve().parents[1] / "scripts" / "install_torch.sh"
    command = ["bash", str(script), *["--decide"] * decide, str(python), "2.13.0", *["0.28.0"] * (not decide)]
    return subprocess.run(command, capture_output=True, text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"})


def _decision(tmp_path, installed, gpu) -> str:
    result = _install_script(tmp_path, installed, gpu, decide=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_install_script_replaces_a_cpu_build_on_a_gpu_machine_and_checks_cuda(tmp_path):
    """Defect 5: a "+cpu" build counted as installed on a GPU machine, so `device: auto` trained on
    the CPU; nothing checked that the CUDA build sees the GPU."""
    assert _decision(tmp_path, "2.13.0+cpu", "ok") == "cuda"
    assert _decision(tmp_path, "2.13.0", "ok") == "keep"
    assert _decision(tmp_path, "2.12.0", "ok") == "cuda"
    assert _decision(tmp_path, None, "ok") == "cuda"
    assert _decision(tmp_path, None, None) == "cpu"
    assert _decision(tmp_path, "2.13.0+cpu", None) == "keep"
    assert _decision(tmp_path, "2.13.0+cpu", "broken") == "keep"  # nvidia-smi without a working driver
    installed = _install_script(tmp_path, "2.13.0+cpu", "ok", decide=False)  # its torch sees no GPU
    assert installed.returncode == 1 and "error: torch" in installed.stderr and "sees no CUDA GPU" in installed.stderr


# ------------------------------------------------------------------ defect 6 and issue 20 item 2


def _tiny_model(variant: str, seed: int = 0, **overrides):
    from rpevit.core.model import build_model

    torch.manual_seed(seed)
    options = {"dim": 16, "depth": 2, "heads": 2, "mlp_dim": 16, "image_size": 8, "patch_size": 4}
    return build_model(variant, seed=seed, **{**options, "channels": 1, "num_classes": 3, **overrides})


def _draw_omega(rank: int, store: str, out: str) -> None:
    """One gloo rank: its own global RNG stream, then two FAVOR+ redraws; saves every layer's ω."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        model = _tiny_model("favor+ape", seed=5, favor={"redraw_steps": 1}).train()
        torch.manual_seed(1000 + rank)  # a redraw must not depend on the process's global RNG
        initial = [block.attn.backend.omega.clone() for block in model.blocks]
        for _ in range(2):
            model.count_training_step()
        torch.save({"initial": initial, "drawn": [block.attn.backend.omega for block in model.blocks]}, f"{out}{rank}")
        dist.barrier()  # no rank tears its group down while the other is still connecting (a loaded machine)
    finally:
        dist.destroy_process_group()


def test_data_parallel_ranks_draw_the_same_random_features(tmp_path):
    """Issue 20 item 2: ω comes from a generator seeded by (run seed, layer, redraw count), so two
    gloo ranks with different global RNG streams draw bitwise the same matrices, no broadcast."""
    import torch.multiprocessing as mp

    mp.spawn(_draw_omega, args=(str(tmp_path / "store"), str(tmp_path / "omega")), nprocs=2, join=True)
    first, second = (torch.load(tmp_path / f"omega{rank}") for rank in (0, 1))
    for layer in range(2):
        assert torch.equal(first["initial"][layer], second["initial"][layer])
        assert torch.equal(first["drawn"][layer], second["drawn"][layer])
        assert not torch.equal(first["drawn"][layer], first["initial"][layer])
    assert not torch.equal(first["drawn"][0], first["drawn"][1])  # each layer its own draw


def test_compiled_favor_training_steps_do_not_recompile():
    """Defect 6: the redraw counter was a Python int read inside forward: every step recompiled."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    model = _tiny_model("favor+ape", favor={"redraw_steps": 2}).train()
    counter = CompileCounter()
    forward = torch.compile(model, backend=counter)
    omegas = []
    for _ in range(5):
        forward(torch.randn(2, 1, 8, 8)).sum().backward()
        getattr(model, "count_training_step", lambda: None)()
        omegas.append(model.blocks[0].attn.backend.omega.clone())
    assert counter.frame_count == 1
    assert int(model.blocks[0].attn.backend.redraw_counter) == 5
    assert not torch.equal(omegas[0], omegas[1]) and torch.equal(omegas[1], omegas[2])  # redrawn every 2


def _module_imports() -> dict[str, set[str]]:
    """rpevit module → the rpevit modules it imports anywhere in its text.

    Counted: every `import` statement, also those inside functions (a deferred import still makes
    the importing module depend on the imported one; the loop of issue 20 went through one,
    distributed.py importing runs inside a function) and under `if TYPE_CHECKING:`. Not counted:
    the implicit import of a module's parent packages (Python loads a package's __init__ before
    its submodules in any order, so such an edge never blocks an import). `from .pkg import name`
    counts as an import of pkg.name when that is a module, else of pkg.
    """
    import ast
    from pathlib import Path

    import rpevit

    root = Path(rpevit.__file__).parent
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = (path, parts[-1] == "__init__")

    graph = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level else ""
                source = ".".join(part for part in (base, node.module) if part)
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source for alias in node.names
                ]
            else:
                continue
            edges |= {target for target in targets if target in modules and target != name}
        graph[name] = edges
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a list of modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_package_has_no_import_cycle():
    """Issue 20 item 2: attention/linear.py imported `distributed` (for a broadcast), closing a loop
    attention → distributed → runs → model → attention; the import graph stays acyclic."""
    graph = _module_imports()
    assert "rpevit.lab.training.distributed" in graph["rpevit.lab.training.train"]  # the walk sees imports
    assert "rpevit.core.attention.linear" in graph["rpevit.core.attention"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle(graph) is None, " → ".join(_cycle(graph))


def test_bench_data_draws_batches_on_the_data_device(monkeypatch, tiny_params):
    """Defect 7: `bench data` drew its batches with a CPU generator for data on the GPU."""
    from types import SimpleNamespace

    from rpevit.lab.bench import throughput as bench

    made = []

    class Generator:
        def __init__(self, device="cpu"):
            made.append(torch.device(device))

        def manual_seed(self, seed):
            return self

    def batches(split, info, batch_size, **kwargs):
        yield from ((torch.zeros(batch_size, 1, 2, 2), torch.zeros(batch_size)) for _ in range(4))

    data_device = torch.device("cuda", 1)  # only compared, never touched
    dataset = SimpleNamespace(info=SimpleNamespace(name="mnist5k"), train=None)
    monkeypatch.setattr(bench.runs, "dataset_for", lambda params, device: dataset)
    monkeypatch.setattr(bench.data_lib, "recipe_for", lambda info, augment: "none")
    monkeypatch.setattr(bench.data_lib, "batches", batches)
    monkeypatch.setattr(bench, "synchronize", lambda device: None)
    monkeypatch.setattr(torch, "Generator", Generator)
    assert bench.data_throughput(tiny_params, data_device, steps=1) > 0
    assert made == [data_device]


# ------------------------------------------------------------------ every variant on a stand-in device

TINY = {"dim": 16, "depth": 1, "heads": 2, "mlp_dim": 16, "image_size": 8, "patch_size": 4, "channels": 1}


def _variants() -> list[str]:
    from rpevit.core.variants import list_variants

    return list_variants()


def _representatives() -> list[str]:
    """Each backend alone and with each positional method alone (every module's code path once)."""
    return [name for name in _variants() if name.count("+") == 1]


def _meta_model(variant: str, **overrides):
    from rpevit.core.model import build_model

    with torch.device(META):
        return build_model(variant, **{**TINY, "num_classes": 3, **overrides})


def _step(model, images, interpolate=False):
    model(images, interpolate=interpolate).sum().backward()


def _attention_combinations() -> list[str]:
    """Every backend × rotary × bias × gate combination once (360), the absolute methods (none, ape,
    ape_sincos) taken in turn. An absolute method acts once, on the tokens before the first block,
    and meets no attention code, so this covers every code path of the 1,080 variants at a third of
    the cost (meta runs ~8× slower than the CPU: Python reference kernels); the bf16 test below
    runs all 1,080."""
    from rpevit.core.variants import parse_variant

    by_combination: dict[tuple, dict] = {}
    for variant in _variants():
        parsed = parse_variant(variant)
        combination = (parsed.backend, *(parsed.method(m) for m in ("rotary", "bias", "gate")))
        by_combination.setdefault(combination, {})[parsed.method("absolute")] = variant
    absolutes = (None, "ape", "ape_sincos")
    return [options[absolutes[i % 3]] for i, options in enumerate(by_combination.values())]


def test_every_attention_combination_trains_on_the_meta_device():
    """Forward + backward in train mode on `meta` of every backend × rotary × bias × gate
    combination: a CPU tensor meeting a device tensor, or a host sync (`.item()`, `bool()`,
    `.cpu()`), raises here as on CUDA."""
    failures = {}
    images = torch.empty(2, 1, 8, 8, device=META)
    variants = _attention_combinations()
    for variant in variants:
        try:
            _step(_meta_model(variant).train(), images)
        except Exception as exc:  # collected: one assertion names them all
            failures[variant] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    assert len(variants) == 360 and failures == {}


def _exact_paths(variant: str) -> dict:
    """Model options forcing the non-default exact bias path of a linear backend (FFT; axis by
    axis for a separable bias), so the meta runs below cover them too."""
    from rpevit.core.variants import parse_variant

    parsed = parse_variant(variant)
    if parsed.backend == "softmax" or parsed.method("bias") is None:
        return {}
    path = "axis" if parsed.method("bias") in ("manhattan", "axial_rpe") else "fft"
    return {parsed.backend: {"bias_path": path}}


def test_representatives_on_meta_in_every_mode_make_no_host_to_device_copy():
    """Each backend × positional method on `meta`: train mode twice (the second step records every
    tensor made from host data on the device: none), eval mode on other grids with and without
    position interpolation, the non-default bias paths, and the attention-map path."""
    failures = {}
    for variant in _representatives():
        try:
            options = {"favor": {"redraw_steps": 1}, **_exact_paths(variant)}
            options["favor"] = {"redraw_steps": 1, **options["favor"]}
            model = _meta_model(variant, **options).train()
            _step(model, torch.empty(2, 1, 8, 8, device=META))
            model.count_training_step()  # a FAVOR+ redraw copies its new ω to the device: allowed
            with HostToDevice() as recorder:
                _step(model, torch.empty(3, 1, 8, 8, device=META))
            assert recorder.copies == [], recorder.copies
            model.eval()
            with torch.no_grad():
                model(torch.empty(2, 1, 12, 16, device=META), interpolate=True)
                model(torch.empty(1, 1, 12, 12, device=META))
            maps = model.attention_maps(torch.empty(2, 1, 12, 12, device=META))
            assert maps[0].shape == (2, 2, 10, 10)
        except Exception as exc:
            failures[variant] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    assert len(_representatives()) >= 40 and failures == {}


def test_every_variant_under_bf16_autocast_on_cpu():
    """bf16 autocast (as on a GPU) for every variant: finite logits in bf16, fp32 gradients."""
    from rpevit.core.model import build_model

    failures = {}
    images = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    for variant in _variants():
        torch.manual_seed(0)
        model = build_model(variant, **TINY, num_classes=3).train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(images)
        logits.float().logsumexp(-1).sum().backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if logits.dtype != torch.bfloat16 or not torch.isfinite(logits).all():
            failures[variant] = f"logits {logits.dtype}, finite {bool(torch.isfinite(logits).all())}"
        elif any(g.dtype != torch.float32 or not torch.isfinite(g).all() for g in grads) or not grads:
            failures[variant] = "gradients not finite fp32"
    assert failures == {}


# ------------------------------------------------------------------ graph capture (device-independent)


class _Stack(torch.nn.Module):
    """Absolute methods, then residual attention layers of given (backend, rotary, bias, gate,
    bias path): several backend × mechanism families traced in one graph."""

    def __init__(self, layers):
        from rpevit.core.attention.layer import MultiHeadAttention
        from rpevit.core.config import model_config
        from rpevit.core.position import build_position

        super().__init__()
        base = {"dim": 16, "heads": 2, "mlp_dim": 16, "image_size": 16, "patch_size": 4}
        self.absolute = torch.nn.ModuleList(
            build_position(name, model_config(**base), 16, 2) for name in ("ape", "ape_sincos")
        )
        self.layers = torch.nn.ModuleList(
            MultiHeadAttention.from_config(
                model_config(**base, **({backend: {"bias_path": path}} if path else {})), backend, *methods
            )
            for backend, *methods, path in layers
        )

    def forward(self, x, grid):
        for absolute in self.absolute:
            x = absolute(x, grid)
        for layer in self.layers:
            x = x + layer(x, grid)
        return x


# one layer per backend × family; each linear backend's exact bias paths (FFT, axis, scan)
FAMILIES = [
    ("softmax", "rope_mixed", "krpe", "gate_string", None),
    ("softmax", "string_circulant", "manhattan", "gate_irpe", None),
    ("favor", "string_circulant", "krpe", "gate_irpe", "fft"),
    ("favor", "rope_axial", "manhattan", None, "scan"),
    ("relu", "string_cayley", "axial_rpe", "gate_string", "axis"),
    ("relu", None, "irpe", None, "dense"),
]
# Graph breaks allowed in a training forward: (function, reason fragment) → why. None today;
# add an entry only with the reason it cannot be avoided (each break costs a device round trip).
ALLOWED_BREAKS: dict[tuple[str, str], str] = {}


def test_backend_by_mechanism_families_trace_without_graph_breaks():
    from rpevit.core.grid import Grid

    torch._dynamo.reset()
    model = _Stack(FAMILIES).train()
    explained = torch._dynamo.explain(model)(torch.randn(2, 17, 16), Grid(4, 4, cls=True))
    unexpected = [
        f"{reason.user_stack[-1].name if reason.user_stack else '?'}: {reason.reason[:160]}"
        for reason in explained.break_reasons
        if not any(
            reason.user_stack and reason.user_stack[-1].name == name and fragment in reason.reason
            for name, fragment in ALLOWED_BREAKS
        )
    ]
    assert explained.graph_count >= 1 and unexpected == []


def test_twelve_compiled_training_steps_compile_at_most_two_frames():
    """12 steps with one odd-sized batch (as an epoch's last): the static graph, then at most one
    dynamic-shape recompile (TORCH_LOGS=recompiles shows why when this fails)."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    model = _tiny_model("favor+rope_mixed+krpe+gate_string+ape", favor={"redraw_steps": 3}).train()
    counter = CompileCounter()
    forward = torch.compile(model, backend=counter)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(12):
        images = torch.randn(5 if step == 7 else 4, 1, 8, 8)
        forward(images).logsumexp(-1).sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        model.count_training_step()
    assert counter.frame_count <= 2 and int(model.blocks[0].attn.backend.redraw_counter) == 12


def test_aot_eager_forward_and_backward_equal_eager():
    """AOTAutograd (the graphs inductor would compile) against eager: a rotary, a bias on the FFT
    and on the separable path, a gate."""
    from rpevit.core.grid import Grid

    torch._dynamo.reset()
    layers = [
        ("favor", "rope_mixed", None, None, None),
        ("favor", None, "krpe", None, "fft"),
        ("relu", None, "manhattan", None, "axis"),
        ("softmax", None, None, "gate_string", None),
    ]
    torch.manual_seed(0)
    model = _Stack(layers).train()
    grid, x = Grid(4, 4, cls=True), torch.randn(2, 17, 16)
    results = []
    for forward in (model, torch.compile(model, backend="aot_eager")):
        model.zero_grad(set_to_none=True)
        inputs = x.clone().requires_grad_()
        out = forward(inputs, grid)
        out.square().sum().backward()
        results.append((out.detach(), inputs.grad, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (eager, eager_input, eager_grads), (compiled, compiled_input, compiled_grads) = results
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(compiled_input, eager_input, rtol=1e-5, atol=1e-6)
    assert len(eager_grads) == len(compiled_grads) > 10
    for got, want in zip(compiled_grads, eager_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_doctor_gpu_refuses_without_cuda_in_one_line():
    """`python -m campaign gpu-acceptance` on a machine without CUDA: one line, status 2."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-m", "campaign", "gpu-acceptance"], capture_output=True, text=True, env=env, cwd=root
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: no CUDA device") and len(result.stderr.strip().splitlines()) == 1


def test_bf16_peaks_by_device_name():
    from rpevit.core.metrics import bf16_peak

    assert bf16_peak("NVIDIA H100 80GB HBM3") == 989.4e12
    assert bf16_peak("NVIDIA H100 PCIe") == 756e12
    assert bf16_peak("NVIDIA A100-SXM4-80GB") == 312e12
    assert bf16_peak("NVIDIA L40S") == 362e12 and bf16_peak("NVIDIA L4") == 121e12
    assert bf16_peak("Tesla V100-SXM2-16GB") is None  # no bf16 tensor cores


_FFT_FUNCTIONS = {f for name, f in vars(torch.fft).items() if callable(f) and not name.startswith("_")}


class FFTInputs(TorchFunctionMode):
    """Records the dtype of every torch.fft call's input."""

    def __init__(self):
        super().__init__()
        self.dtypes: list[tuple[str, torch.dtype]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _FFT_FUNCTIONS and args and isinstance(args[0], torch.Tensor):
            self.dtypes.append((func.__name__, args[0].dtype))
        return func(*args, **(kwargs or {}))


def test_no_fft_sees_bf16_under_autocast():
    """cuFFT has no bf16 for these sizes and would lose the features' range: every FFT (Circulant-
    STRING, the FFT bias path) runs in fp32 or wider under bf16 autocast."""
    from rpevit.core.model import build_model

    seen = []
    for variant in _representatives():
        torch.manual_seed(0)
        model = build_model(variant, **TINY, num_classes=3, **_exact_paths(variant)).train()
        with FFTInputs() as recorder, torch.autocast("cpu", dtype=torch.bfloat16):
            model(torch.randn(2, 1, 8, 8)).float().sum().backward()
        seen += [(variant, *call) for call in recorder.dtypes]
    assert {variant.split("+")[1] for variant, *_ in seen} >= {"string_circulant", "krpe"}  # FFTs did run
    assert [call for call in seen if call[2] in (torch.bfloat16, torch.float16)] == []
