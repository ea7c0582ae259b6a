"""Single attention layers as probes of the relative property (docs/methods.md §5): one layer with
at most one positional method on identical tokens (`layer_attention`), the cases of the check
(`relative_property_cases`, `premap_cases`, `case_label`), the ratios by offset Δ (`offset_maps`),
and which methods and rotary sites each mechanism and backend has (`methods_of`, `rotation_sites`)."""

from __future__ import annotations

import dataclasses
import typing

import numpy as np
import torch

from .attention import BACKENDS, computing_backends
from .attention.layer import MultiHeadAttention
from .checks import offset_ratios
from .position import POSITIONS, build_position


def methods_of(mechanism: str) -> list[str]:
    """The positional methods of one mechanism, in registry order."""
    return [name for name, method in POSITIONS.items() if method.mechanism == mechanism]


def rotation_sites(backend: str) -> tuple[str, ...]:
    """Where a backend can apply a rotary method: the values of its options' `rotation_site`
    ("pre": q, k; "post": the feature maps), or ("pre",) when it has no such option."""
    options = BACKENDS[backend].Options
    if not any(f.name == "rotation_site" for f in dataclasses.fields(options)):
        return ("pre",)
    return typing.get_args(typing.get_type_hints(options)["rotation_site"]) or ("pre",)


def with_rotation_site(config, backend: str, site: str = "auto"):
    """The model config with backend's rotary site set to `site` ("auto": its default)."""
    if site == "auto" or rotation_sites(backend) == ("pre",):
        return config
    options = dataclasses.replace(config.options_for(backend), rotation_site=site)
    return dataclasses.replace(config, options={**config.options, backend: options})


def perturb_parameters(module: torch.nn.Module, scale: float, seed: int = 0) -> torch.nn.Module:
    """Add scale·N(0, 1) to every parameter of `module` (reproducibly): trained-looking, not the init."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.add_(scale * torch.randn(param.shape, generator=generator, dtype=param.dtype).to(param.device))
    return module


def layer_attention(
    config,
    grid,
    backend: str,
    method: str | None = None,
    site: str = "auto",
    dtype=torch.float64,
    seed: int = 0,
    perturb_scale: float = 0.3,
) -> torch.Tensor:
    """The attention matrix (heads, T, T) of one layer with at most one positional method, for
    identical token content (so q_i = q, k_j = k before positions enter); parameters perturbed by
    perturb_scale·N(0, 1). An absolute method is added to the tokens first; the others are consumed
    inside the layer. Raises NotImplementedError for a mechanism the backend does not consume."""
    config = with_rotation_site(config, backend, site)
    torch.manual_seed(seed)
    kwargs, absolute = {}, None
    if method is not None:
        mechanism = POSITIONS[method].mechanism
        if mechanism not in BACKENDS[backend].mechanisms:
            raise NotImplementedError(f"backend {backend} does not consume {mechanism} methods")
        if mechanism == "absolute":
            absolute = perturb_parameters(
                build_position(method, config, config.dim, config.heads).to(dtype), perturb_scale, seed + 1
            )
        else:
            kwargs[mechanism] = method
    layer = perturb_parameters(MultiHeadAttention.from_config(config, backend, **kwargs).to(dtype), perturb_scale, seed)
    x = torch.randn(1, 1, config.dim, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    x = x.expand(1, grid.num_tokens, config.dim)
    with torch.no_grad():
        if absolute is not None:
            x = absolute(x, grid)
        return layer.attention_matrix(x, grid)[0]


def relative_property_cases() -> list[tuple[str, str | None, str]]:
    """(backend, method or None, rotation site) of the relative-property check: every method with
    softmax; with each linear backend a no-position control, every rotary method at the post-map
    site (where it is exactly relative) and every relative-bias method."""
    cases = [("softmax", None, "pre")] + [("softmax", m, "pre") for m in POSITIONS]
    for backend in computing_backends():  # favor_redraw computes as favor: its checks are favor's
        cls = BACKENDS[backend]
        if backend == "softmax":
            continue
        cases.append((backend, None, "auto"))
        if "post" in rotation_sites(backend) and "rotary" in cls.mechanisms:
            cases += [(backend, m, "post") for m in methods_of("rotary")]
        if "bias" in cls.mechanisms:
            cases += [(backend, m, "auto") for m in methods_of("bias")]
    return cases


def premap_cases() -> list[tuple[str, str, str]]:
    """(backend, rotary method, "pre") for every linear backend that can rotate before its feature map."""
    return [
        (b, m, "pre")
        for b in computing_backends()
        if b != "softmax" and "pre" in rotation_sites(b) and "rotary" in BACKENDS[b].mechanisms
        for m in methods_of("rotary")
    ]


def case_label(backend: str, method: str | None, site: str) -> str:
    return (
        f"{backend}+{method or 'none'}"
        + (" (post-map)" if site == "post" else "")
        + (" (pre-map)" if site == "pre" and backend != "softmax" else "")
    )


def offset_maps(weights: torch.Tensor, grid):
    """Head 0 of weights (heads, T, T), by offset Δ: (mean over queries of log A[i,i+Δ]/A[i,i] — the
    ratio itself if weights are signed —, log10 of its spread across queries (relative to the
    largest |ratio| if signed), signed), each map (2H−1, 2W−1) indexed [Δrow + H−1, Δcol + W−1]."""
    groups = offset_ratios(weights[0], grid)
    signed = bool((weights[0] <= 0).any())
    values = {delta: (v if signed else v.log()) for delta, v in groups.items()}
    scale = max(float(v.abs().max()) for v in values.values()) if signed else 1.0
    mean = np.full((2 * grid.height - 1, 2 * grid.width - 1), np.nan)
    spread = np.full_like(mean, np.nan)
    for (dr, dc), v in values.items():
        mean[dr + grid.height - 1, dc + grid.width - 1] = v.mean().item()
        spread[dr + grid.height - 1, dc + grid.width - 1] = np.log10(max((v.max() - v.min()).item() / scale, 1e-17))
    return mean, spread, signed
