"""Drawing attention maps: a map over an image or on a given colour scale (`show_map`, `as_picture`),
notebook 30's grid of every head with one colour scale per row (`attention_grid`) and two variants'
maps side by side on one shared scale (`side_by_side`), the explorer's figure of one query's
attention (`query_figure`, on the fixed `uniform_scale`) and the name of a token (`describe_query`).
The notebooks' other figures are in `plots`."""

from __future__ import annotations

import numpy as np
import torch


def as_picture(raw: torch.Tensor) -> np.ndarray:
    """(C, H, W) in [0, 1] → (H, W) or (H, W, 3) for imshow."""
    return raw[0].numpy() if raw.shape[0] == 1 else raw.permute(1, 2, 0).numpy()


def show_map(
    ax,
    values: np.ndarray,
    image: np.ndarray | None = None,
    signed: bool | None = None,
    colorbar: bool | None = None,
    limit: float | None = None,
):
    """imshow a map, over the image if given: on 0 … `limit` (default: its own maximum), or for signed
    maps (`signed`, default: any value < 0) on a diverging scale −limit … limit centred at 0, with a
    colour bar unless colorbar=False (default: signed maps only). Returns the image artist."""
    signed = bool(values.min() < 0) if signed is None else signed
    limit = (float(np.abs(values).max()) or 1.0) if limit is None else limit
    kwargs = dict(cmap="RdBu_r", vmin=-limit, vmax=limit) if signed else dict(cmap="inferno", vmin=0.0, vmax=limit)
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


def _bar(fig, artist, axes, label: str):
    bar = fig.colorbar(artist, ax=axes, fraction=0.03, pad=0.01, aspect=12)
    bar.ax.tick_params(labelsize=5)
    bar.set_label(label, fontsize=6)


def _clean(axes) -> None:
    for ax in np.ravel(axes):
        ax.set_xticks([])
        ax.set_yticks([])


def attention_grid(pictures, captions, per_layer: dict, heads: int, title: str):
    """Rows: each image × each layer of `per_layer` ({layer: (images, heads, H, W) weights}); columns:
    the image (captioned), each head's map, the mean of the heads over the image. One colour scale
    per row — 0 … the row's largest weight, or −m … m centred at 0 when any weight of the figure is
    negative (post-map rotations) — with its colour bar, so heads of a row compare by colour."""
    import matplotlib.pyplot as plt

    layers = sorted(per_layer)
    signed = any(bool((np.asarray(per_layer[layer]) < 0).any()) for layer in layers)
    nrows, ncols = len(pictures) * len(layers), heads + 2
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(1.8 * ncols + 0.6, 1.7 * nrows), squeeze=False, layout="constrained"
    )
    for i, picture in enumerate(pictures):
        for j, layer in enumerate(layers):
            row = axes[i * len(layers) + j]
            values = np.asarray(per_layer[layer][i])  # (heads, H, W)
            limit = float(np.abs(values[:heads]).max()) or 1.0
            row[0].imshow(picture, cmap="gray" if picture.ndim == 2 else None)
            row[0].set_title(captions[i], fontsize=6.5)
            row[0].set_ylabel(f"layer {layer}", fontsize=8)
            for h in range(heads):
                artist = show_map(row[1 + h], values[h], signed=signed, colorbar=False, limit=limit)
                row[1 + h].set_title(f"head {h}", fontsize=7)
            show_map(row[-1], values[:heads].mean(0), image=picture, signed=signed, colorbar=False, limit=limit)
            row[-1].set_title("mean of heads", fontsize=7)
            _bar(fig, artist, list(row[1:]), "weight")
    _clean(axes)
    fig.suptitle(title, fontsize=9)
    return fig


def side_by_side(pictures, captions, maps: dict, layer: int, title: str):
    """Two (or more) variants' head-averaged maps of one layer for the same images, on one colour
    scale shared by every map panel (one colour bar): rows are images; columns the image and each
    variant of `maps` ({variant: (images, H, W) weights}) over it, then each variant's map alone."""
    import matplotlib.pyplot as plt

    names = list(maps)
    values = {name: np.asarray(maps[name]) for name in names}
    signed = any(bool((v < 0).any()) for v in values.values())
    limit = max(float(np.abs(v).max()) for v in values.values()) or 1.0
    ncols = 1 + 2 * len(names)
    fig, axes = plt.subplots(
        len(pictures), ncols, figsize=(1.9 * ncols + 0.6, 1.8 * len(pictures)), squeeze=False, layout="constrained"
    )
    for i, picture in enumerate(pictures):
        row = axes[i]
        row[0].imshow(picture, cmap="gray" if picture.ndim == 2 else None)
        row[0].set_title(captions[i], fontsize=6.5)
        for k, name in enumerate(names):
            show_map(row[1 + k], values[name][i], image=picture, signed=signed, colorbar=False, limit=limit)
            artist = show_map(row[1 + len(names) + k], values[name][i], signed=signed, colorbar=False, limit=limit)
            if i == 0:
                row[1 + k].set_title(f"{name}\nover the image", fontsize=7)
                row[1 + len(names) + k].set_title(name, fontsize=7)
    _bar(fig, artist, list(axes[:, 1:].ravel()), f"weight (layer {layer}, mean of heads; one scale)")
    _clean(axes)
    fig.suptitle(title, fontsize=9)
    return fig


def caption(index: int, truth: str, prediction: str) -> str:
    """A test image's caption: its index, true class and the model's prediction (✗ when wrong)."""
    return f"test #{index}: {truth}" + ("" if truth == prediction else f"\npredicted {prediction} ✗")


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
    labels[0], labels[-1] = f"≤ {labels[0]}", f"≥ {labels[-1]} (saturated)"  # the ends hold everything beyond
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
    z, colours, hover = _heatmap_scale(patches, grid.num_tokens, signed=bool((maps[layer][head] < 0).any()))
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
        _mark_query(fig, grid, query, picture.shape[0])
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


def _heatmap_scale(patches, num_tokens: int, *, signed: bool):
    """(z, colour settings, hover template) of a query's weights over the patch grid: signed weights on
    a linear scale centred at 0 reaching at least ±2/N; others as log₂(weight · N) on `uniform_scale`."""
    uniform = 1.0 / num_tokens
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
                ticktext=[f"{-limit:.2g}", "0", f"1/{num_tokens} (uniform)", f"{limit:.2g}"],
            ),
        )
        hover = "row %{y}, col %{x}<br>weight %{z:.4f}<extra></extra>"
    else:
        z = np.log2(np.maximum(patches, uniform * 2.0**-UNIFORM_OCTAVES) / uniform)
        colours = uniform_scale(num_tokens)
        hover = "row %{y}, col %{x}<br>weight %{customdata:.4f}<br>log₂(weight · N) %{z:.2f}<extra></extra>"
    return z, colours, hover


def _mark_query(fig, grid, query: int, picture_size: int) -> None:
    """Outline the query's patch on the image (left) and cross it on the weights (right)."""
    import plotly.graph_objects as go

    row, col = divmod(query - grid.prefix, grid.width)
    size = picture_size / grid.height
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
