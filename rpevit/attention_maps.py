"""Attention inspection: the dense attention matrices of trained (or untrained) models and of
single layers, and what the notebooks compute from them.

- Runs to inspect (`inspection_targets`, `MapSource`): a preset's finished runs whose weights are
  on this machine (one per variant and dataset), or — before any — its variants at their untrained
  init; their datasets, models and per-image maps.
- Maps of a model (`query_maps`, `mean_attention_distance`, `attention_distance`): the CLS row
  (or the mean attention each patch receives) on the patch grid, and Dosovitskiy et al.'s mean
  attention distance. Performer backends never form the N×N matrix when they run; these are the
  matrices they imply (`ViT.attention_maps`), exactly what multiplies v.
- Single layers (`layer_attention`, `relative_property_cases`, `offset_maps`): one attention layer
  with one positional method on identical tokens, the cases of the relative-property check and
  the attention ratios by offset Δ (docs/methods.md §5).
- FAVOR+ as an estimator (`favor_estimator_error`) and an independent dense reference for the
  relative bias in linear attention (`dense_biased_linear_reference`).
- Drawing (`show_map`, `as_picture`, `describe_query`, `query_figure`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing

import numpy as np
import torch

from .attention import BACKENDS
from .attention.features import favor_features, orthogonal_gaussian_matrix
from .attention.layer import MultiHeadAttention
from .checks import offset_ratios
from .data import normalize
from .errors import UserError
from .position import POSITIONS, build_position
from .run import Run
from .variants import parse_variant

F64 = torch.float64


# --------------------------------------------------------------------------- registries


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


# --------------------------------------------------------------------------- runs to inspect


def inspection_targets(params, found: list[dict], seed: int = 0, has_weights=None) -> list[dict]:
    """What to inspect: one finished run per variant and dataset (its lowest seed) among `found`
    whose weights are on this machine (`has_weights(record)`, default runs.weights_here), or — when
    there is none — every variant × dataset of the preset at init (seed `seed`). Each target:
    variant, dataset, seed, record (None: untrained) and a label naming it."""
    from .runs import inspectable

    first = inspectable(params, found, has_weights)
    if first:
        return [
            {
                "variant": r["variant"],
                "dataset": r["dataset"],
                "seed": r["seed"],
                "record": r,
                "label": f"{r['variant']} · {r['dataset']} · seed {r['seed']} "
                f"(test top-1 {100 * r['top1']:.1f}%, {r['epochs']} ep)",
            }
            for r in first
        ]
    return [
        {
            "variant": parse_variant(v).name,
            "dataset": d,
            "seed": seed,
            "record": None,
            "label": f"{parse_variant(v).name} · {d} (untrained, seed {seed})",
        }
        for d in params.datasets
        for v in params.variants
    ]


def test_images(dataset, start: int, count: int):
    """(normalised images (B, C, H, W), raw images in [0, 1], labels) of test images start … start+count−1."""
    split = dataset.test
    index = torch.arange(start, min(start + count, len(split)))
    raw = split.images[index].float().cpu() / 255
    return normalize(raw, dataset.info), raw, split.labels[index].cpu()


class MapSource:
    """The runs of a preset to inspect, with their datasets, models and attention maps (cached).

    `targets` maps each label to its target (see `inspection_targets`); targets whose dataset is not
    available on this machine are left out, with a message naming it.
    """

    def __init__(self, params, found: list[dict], seed: int = 0, device="cpu", max_models: int = 8):
        from . import runs

        self.params, self.device, self._runs = params, torch.device(device), runs
        self.datasets = {}
        for name in dict.fromkeys(t["dataset"] for t in inspection_targets(params, found, seed)):
            try:
                self.datasets[name] = runs.dataset_for(params, name, device="cpu")
            except UserError as exc:
                print(f"Dataset {name} is not available here, so its runs are left out.\n{exc}")
        self.targets = {t["label"]: t for t in inspection_targets(params, found, seed) if t["dataset"] in self.datasets}
        self.note = runs.weightless_note(params, found)
        self.trained = any(t["record"] is not None for t in self.targets.values())
        self.model = functools.lru_cache(maxsize=max_models)(self._model)
        self.image_maps = functools.lru_cache(maxsize=64)(self._image_maps)

    def _model(self, label: str):
        """The trained model of a finished run (best-validation weights), or the variant at init."""
        target = self.targets[label]
        run = Run(self.params, target["dataset"], target["variant"], target["seed"])
        if target["record"] is not None:
            model, _ = self._runs.trained_model(run, device=self.device)
            return model
        return self._runs.untrained_model(run, device=self.device)

    def dataset(self, label: str):
        return self.datasets[self.targets[label]["dataset"]]

    def images(self, label: str, start: int, count: int):
        """Test images of the target's dataset, as `test_images`."""
        return test_images(self.dataset(label), start, count)

    @torch.no_grad()
    def maps(self, label: str, images):
        """(per-layer attention maps (B, heads, T, T) on the CPU, the token grid, predictions (B,))."""
        model = self.model(label)
        images = images.to(self.device)
        maps = [m.float().cpu() for m in model.attention_maps(images)]
        return maps, model.grid_for(images), model(images).argmax(-1).cpu()

    def _image_maps(self, label: str, index: int) -> dict:
        """One test image: maps per layer (heads, T, T) as numpy, grid, RGB picture (H, W, 3) uint8,
        label and prediction."""
        images, raw, labels = self.images(label, index, 1)
        maps, grid, predictions = self.maps(label, images)
        picture = (raw[0] * 255).round().to(torch.uint8).permute(1, 2, 0).expand(-1, -1, 3).numpy()
        info = self.dataset(label).info
        return {
            "maps": [m[0].numpy() for m in maps],
            "grid": grid,
            "picture": picture,
            "truth": int(labels[0]),
            "prediction": int(predictions[0]),
            "truth_name": info.class_name(int(labels[0])),
            "prediction_name": info.class_name(int(predictions[0])),
            "trained": self.targets[label]["record"] is not None,
        }

    def banner(self, label: str) -> str:
        """HTML for the explorer's widget area: a red UNTRAINED banner when the run's weights are its
        init (nothing once trained weights are shown)."""
        if self.targets[label]["record"] is not None:
            return ""
        return (
            '<div style="background:#b00020;color:white;font-weight:bold;padding:6px 10px;border-radius:4px">'
            "UNTRAINED: random init weights (no finished run with its checkpoint here) — these maps show the "
            "architecture's prior, not what a model learned.</div>"
        )


# --------------------------------------------------------------------------- maps of a model


def query_maps(maps: list[torch.Tensor], grid) -> list[torch.Tensor]:
    """Per layer (B, heads, H, W): the CLS query's row over the patches, or (no CLS) the mean
    attention each patch receives."""
    p = grid.prefix
    out = []
    for weights in maps:  # (B, h, T, T)
        rows = weights[:, :, 0, p:] if p else weights.mean(dim=2)
        out.append(rows.reshape(*rows.shape[:2], grid.height, grid.width))
    return out


def mean_attention_distance(weights: torch.Tensor, grid) -> torch.Tensor:
    """(B, heads): mean over patch queries of Σ_j w_ij ‖r_i − r_j‖ (in patches), w = |A| over the
    patch keys, renormalised per row (|A| because post-map rotations give signed weights)."""
    p = grid.prefix
    patches = weights[:, :, p:, p:].abs()  # (B, h, N, N)
    patches = patches / patches.sum(-1, keepdim=True).clamp_min(1e-30)
    distance = grid.offsets().double().norm(dim=-1).to(patches.dtype)  # (N, N)
    return (patches * distance).sum(-1).mean(-1)


def uniform_attention_distance(grid) -> float:
    """The mean attention distance of uniform attention over the patches of `grid`."""
    return grid.offsets().double().norm(dim=-1).mean().item()


def attention_distance(maps: list[torch.Tensor], grid) -> tuple[torch.Tensor, bool]:
    """((layers, heads) mean attention distance averaged over the images, whether any weight is negative)."""
    per_head = torch.stack([mean_attention_distance(w, grid).mean(0) for w in maps])
    return per_head, any(bool((w < 0).any()) for w in maps)


# --------------------------------------------------------------------------- single layers


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
    dtype=F64,
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
    layer = perturb_parameters(MultiHeadAttention(config, backend, **kwargs).to(dtype), perturb_scale, seed)
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
    for backend, cls in BACKENDS.items():
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
        for b, cls in BACKENDS.items()
        if b != "softmax" and "pre" in rotation_sites(b) and "rotary" in cls.mechanisms
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


# --------------------------------------------------------------------------- FAVOR+ and the FFT path


def favor_estimator_error(
    d: int, multipliers, pairs: int = 2000, draws: int = 8, qk_scale: float = 0.5, seed: int = 0
) -> list[dict]:
    """The FAVOR+ estimate φ(q)ᵀφ(k) of exp(qᵀk/√d) without stabilizer or ε, for m = multiplier·d
    features, orthogonal vs i.i.d. ω: per (kind, m) the mean relative error over `pairs` random
    (q, k) pairs and `draws` ω draws, the mean signed error (bias) and its standard error (over draws)."""
    generator = torch.Generator().manual_seed(seed)
    q = qk_scale * torch.randn(pairs, d, generator=generator, dtype=F64)
    k = qk_scale * torch.randn(pairs, d, generator=generator, dtype=F64)
    exact = torch.exp((q * k).sum(-1) / math.sqrt(d))
    rows = []
    for multiplier in multipliers:
        m = multiplier * d
        for kind in ("orthogonal", "iid"):
            signed = []
            for _ in range(draws):
                omega = (
                    orthogonal_gaussian_matrix(m, d, generator=generator, dtype=F64)
                    if kind == "orthogonal"
                    else torch.randn(m, d, generator=generator, dtype=F64)
                )
                estimate = (favor_features(q, omega, None, eps=0.0) * favor_features(k, omega, None, eps=0.0)).sum(-1)
                signed.append(estimate / exact - 1)
            signed = torch.stack(signed)  # (draws, pairs)
            rows.append(
                {
                    "features": kind,
                    "m": m,
                    "m/d": multiplier,
                    "mean relative error": signed.abs().mean(dim=1).mean().item(),
                    "mean signed error (bias)": signed.mean().item(),
                    "bias standard error": (signed.mean(dim=1).std() / math.sqrt(draws)).item(),
                }
            )
    return rows


def loglog_slope(rows: list[dict], kind: str) -> float:
    """Fitted slope of log(mean relative error) against log(m) for one ω kind."""
    sub = [r for r in rows if r["features"] == kind]
    return float(np.polyfit(np.log([r["m"] for r in sub]), np.log([r["mean relative error"] for r in sub]), 1)[0])


def dense_biased_linear_reference(q_num, k_num, q_den, k_den, table, cls_terms, grid) -> torch.Tensor:
    """Attention weights A_ij = c_ij ψ(q_i)·ψ(k_j) / Σ_l c_il φ(q_i)·φ(k_l), c = exp(B), with B built
    from scratch (row-major index arithmetic, CLS border by hand: cls_terms[:, 0] CLS query → patch
    keys, [:, 1] patch queries → CLS key, [:, 2] CLS → CLS) — independent of rpevit.attention.toeplitz.
    table: (heads, 2H−1, 2W−1) indexed by key − query; grid with CLS."""
    height, width, n_patch = grid.height, grid.width, grid.num_patches
    index = torch.arange(n_patch)
    row, col = index // width, index % width
    d_row = row[None, :] - row[:, None]  # key − query
    d_col = col[None, :] - col[:, None]
    heads = table.shape[0]
    bias = torch.empty(heads, n_patch + 1, n_patch + 1, dtype=table.dtype)
    bias[:, 1:, 1:] = table[:, d_row + height - 1, d_col + width - 1]
    bias[:, 0, 1:] = cls_terms[:, 0, None]
    bias[:, 1:, 0] = cls_terms[:, 1, None]
    bias[:, 0, 0] = cls_terms[:, 2]
    c = torch.exp(bias)
    numerator = (q_num @ k_num.mT) * c
    denominator = ((q_den @ k_den.mT) * c).sum(-1, keepdim=True)
    return numerator / denominator


def fft_vs_dense(
    grid, heads: int, head_dim: int, num_features: int, seed: int = 0, dtypes=(torch.float64, torch.float32)
) -> list[dict]:
    """The FFT path of a relative bias in linear attention (toeplitz.biased_linear_attention) against
    the dense matrix it implies (biased_linear_weights @ v) and against the independent float64
    `dense_biased_linear_reference`, on `grid` (with CLS), an asymmetric random table and random CLS
    terms; for ψ = φ (positive features) and ψ ≠ φ (a signed numerator, as after a post-map
    rotation), in each dtype. Errors are max |Δ| / max |reference|."""
    from .attention.toeplitz import biased_linear_attention, biased_linear_weights

    g = torch.Generator().manual_seed(seed)
    table = torch.randn(heads, 2 * grid.height - 1, 2 * grid.width - 1, generator=g, dtype=F64)
    cls_terms = torch.randn(heads, 3, generator=g, dtype=F64)
    shape = (2, heads, grid.num_tokens)
    q_den = torch.exp(0.5 * torch.randn(*shape, num_features, generator=g, dtype=F64))
    k_den = torch.exp(0.5 * torch.randn(*shape, num_features, generator=g, dtype=F64))
    v = torch.randn(*shape, head_dim, generator=g, dtype=F64)
    q_rot = torch.randn(*shape, num_features, generator=g, dtype=F64)
    k_rot = torch.randn(*shape, num_features, generator=g, dtype=F64)
    rows = []
    for features, (q_num, k_num) in (("ψ = φ", (q_den, k_den)), ("ψ ≠ φ (rotated numerator)", (q_rot, k_rot))):
        reference = dense_biased_linear_reference(q_num, k_num, q_den, k_den, table, cls_terms, grid) @ v
        for dtype in dtypes:
            args = [t.to(dtype) for t in (q_num, k_num, q_den, k_den)]
            with torch.no_grad():
                fft = biased_linear_attention(*args, v.to(dtype), grid, table.to(dtype), cls_terms.to(dtype))
                dense = biased_linear_weights(*args, grid, table.to(dtype), cls_terms.to(dtype)) @ v.to(dtype)
            rows.append(
                {
                    "features": features,
                    "dtype": str(dtype).replace("torch.", ""),
                    "vs dense": ((fft - dense).abs().max() / dense.abs().max()).item(),
                    "vs independent": ((fft.to(F64) - reference).abs().max() / reference.abs().max()).item(),
                }
            )
    return rows


# --------------------------------------------------------------------------- drawing


def as_picture(raw: torch.Tensor) -> np.ndarray:
    """(C, H, W) in [0, 1] → (H, W) or (H, W, 3) for imshow."""
    return raw[0].numpy() if raw.shape[0] == 1 else raw.permute(1, 2, 0).numpy()


def show_map(
    ax, values: np.ndarray, image: np.ndarray | None = None, signed: bool | None = None, colorbar: bool | None = None
):
    """imshow a map on its own colour scale (min … max), over the image if given. Signed maps (`signed`,
    default: any value < 0) use a diverging scale centred at 0 and get a colour bar unless
    colorbar=False. Returns the image artist."""
    signed = bool(values.min() < 0) if signed is None else signed
    limit = float(np.abs(values).max()) or 1.0
    kwargs = dict(cmap="RdBu_r", vmin=-limit, vmax=limit) if signed else dict(cmap="inferno")
    if image is None:
        artist = ax.imshow(values, **kwargs)
    else:
        height, width = image.shape[:2]
        ax.imshow(image, cmap="gray" if image.ndim == 2 else None)
        artist = ax.imshow(
            values, alpha=0.55, extent=(-0.5, width - 0.5, height - 0.5, -0.5), interpolation="bilinear", **kwargs
        )
    if colorbar or (colorbar is None and signed):
        bar = ax.figure.colorbar(artist, ax=ax, fraction=0.046, pad=0.03)
        bar.ax.tick_params(labelsize=5)
    return artist


def describe_query(grid, query: int) -> str:
    """'CLS' or 'patch n (row r, col c)' for a token index."""
    if query < grid.prefix:
        return "CLS"
    row, col = divmod(query - grid.prefix, grid.width)
    return f"patch {query - grid.prefix} (row {row}, col {col})"


UNIFORM_OCTAVES = 4  # the colour scale of attention spans 1/N × 2^±this (uniform attention 1/N in the middle)


def uniform_scale(num_keys: int, octaves: int = UNIFORM_OCTAVES) -> dict:
    """A fixed colour scale for non-negative attention weights, centred on uniform attention 1/N
    (N keys): log₂(weight · N) from −octaves to +octaves, white at 0 (= 1/N), with the colour bar's
    ticks in weights and the uniform level named. The same for every model, trained or not, so a
    near-uniform map reads as near-uniform."""
    ticks = list(range(-octaves, octaves + 1, 2))
    labels = [f"{2.0**t / num_keys:.2g}" + (f" = 1/{num_keys} (uniform)" if t == 0 else "") for t in ticks]
    return dict(
        colorscale="RdBu",
        reversescale=True,
        zmin=-octaves,
        zmax=octaves,
        colorbar=dict(title="weight", tickvals=ticks, ticktext=labels),
    )


def query_figure(view: dict, layer: int, head: int, query: int, title: str = "", image_index: int | None = None):
    """Plotly figure: the image (query patch outlined) beside the query's attention over the patch
    grid, for one `MapSource.image_maps` view. Non-negative weights on the fixed `uniform_scale`
    (log ratio to 1/N); signed weights (post-map rotations) on a linear scale centred at 0 that
    reaches at least ±2/N, with 1/N marked. An untrained view says UNTRAINED in its title."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    maps, grid, picture = view["maps"], view["grid"], view["picture"]
    weights = maps[layer][head, query]  # (T,)
    patches = weights[grid.prefix :].reshape(grid.height, grid.width)
    signed = bool((maps[layer][head] < 0).any())
    uniform = 1.0 / grid.num_tokens
    if signed:
        limit = max(float(np.abs(patches).max()), 2 * uniform)
        z = patches
        colours = dict(
            colorscale="RdBu",
            reversescale=True,
            zmid=0,
            zmin=-limit,
            zmax=limit,
            colorbar=dict(
                title="weight",
                tickvals=[-limit, 0, uniform, limit],
                ticktext=[f"{-limit:.2g}", "0", f"1/{grid.num_tokens} (uniform)", f"{limit:.2g}"],
            ),
        )
        hover = "row %{y}, col %{x}<br>weight %{z:.4f}<extra></extra>"
    else:
        z = np.log2(np.maximum(patches, uniform * 2.0**-UNIFORM_OCTAVES) / uniform)
        colours = uniform_scale(grid.num_tokens)
        hover = "row %{y}, col %{x}<br>weight %{customdata:.4f}<br>log₂(weight · N) %{z:.2f}<extra></extra>"
    which = f"test #{image_index}: " if image_index is not None else ""
    truth, prediction = view.get("truth_name", view["truth"]), view.get("prediction_name", view["prediction"])
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.08,
        subplot_titles=(
            f"{which}true {truth}, predicted {prediction}",
            f"layer {layer}, head {head}, query {describe_query(grid, query)}",
        ),
    )
    fig.add_trace(go.Image(z=picture, hoverinfo="skip"), row=1, col=1)
    fig.add_trace(
        go.Heatmap(z=z, customdata=patches, hovertemplate=hover, **colours),
        row=1,
        col=2,
    )
    if query >= grid.prefix:
        row, col = divmod(query - grid.prefix, grid.width)
        size = picture.shape[0] / grid.height
        fig.add_shape(
            type="rect",
            x0=col * size - 0.5,
            x1=(col + 1) * size - 0.5,
            y0=row * size - 0.5,
            y1=(row + 1) * size - 0.5,
            line=dict(color="cyan", width=2),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=[col],
                y=[row],
                mode="markers",
                marker=dict(symbol="x", color="cyan", size=10),
                hoverinfo="skip",
                showlegend=False,
            ),
            row=1,
            col=2,
        )
    fig.update_yaxes(autorange="reversed", scaleanchor="x2", row=1, col=2)
    fig.update_xaxes(constrain="domain", row=1, col=2)
    fig.update_xaxes(title_text="patch column", row=1, col=2)
    fig.update_yaxes(title_text="patch row", row=1, col=2)
    extra = f"; weight on the CLS key {weights[0]:.4f}" if grid.prefix else ""
    untrained = "" if view.get("trained", True) else '<span style="color:#b00020"><b>UNTRAINED</b></span> '
    fig.update_layout(
        title=dict(text=f"{untrained}{title}{extra}", font=dict(size=13)),
        width=900,
        height=460,
        margin=dict(l=20, r=20, t=90, b=40),
    )
    return fig
