"""Drawing attention maps: a map over an image or on its own colour scale (`show_map`, `as_picture`),
the explorer's figure of one query's attention (`query_figure`, on the fixed `uniform_scale`) and
the name of a token (`describe_query`). The notebooks' other figures are in `plots`."""

from __future__ import annotations

import numpy as np
import torch


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
