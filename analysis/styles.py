"""One look per variant, the same in every figure, notebook and preset (matplotlib and plotly).

A variant's look depends on the variant alone, never on which other variants share the figure
(one exception below):

- colour: its leading positional method — the first in canonical order (rotary, bias, gate,
  absolute), `none` without positions — by that method's place in the fixed list
  `("none", *POSITIONS)` (registry order), which indexes `METHOD_COLOURS`;
- marker and line style: its backend, by its place in `BACKENDS` (registry order);
- fill: a filled marker for one method, a hollow one when methods are added to the leading one
  (e.g. `favor+rope_mixed+ape` is `favor+rope_mixed`'s colour and marker, hollow).

The exception: in a figure whose variants all share one positional encoding and differ by backend (the
pilots: softmax, FAVOR+ and ReLU, each + ape) a colour by encoding would draw every line alike, so there
the colour is the backend's (`BACKEND_COLOURS`, the same in every such figure); marker and line style
are unchanged (`figure_styles`).

`plotly_style` turns the same style into plotly marker/line settings, so interactive pages match.
"""

from __future__ import annotations

from rpevit.core.attention import BACKENDS
from rpevit.core.position import POSITIONS
from rpevit.core.variants import parse_variant

NONE = "none"
# one colour per entry of ("none", *POSITIONS), in that order: none, ape, krpe, alibi2d, irpe,
# manhattan, axial_rpe, ape_sincos, gate_irpe, gate_string, rope_axial, rope_mixed,
# string_circulant, string_cayley; methods registered later get evenly spread hues (_colour)
METHOD_COLOURS = (
    "#7f7f7f",
    "#1f77b4",
    "#d62728",
    "#8c564b",
    "#bcbd22",
    "#e377c2",
    "#17becf",
    "#393b79",
    "#637939",
    "#7b4173",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#e7ba52",
)
# figures whose lines are backends alone (same positions on every line, e.g. the speed sweeps): one
# colour per entry of BACKENDS, in registry order, apart from the method colours above
BACKEND_COLOURS = ("#000000", "#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e")
HOLLOW = "white"  # the face of a marker whose variant adds methods to its leading one
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 3)))
PLOTLY_SYMBOLS = {
    "o": "circle",
    "s": "square",
    "^": "triangle-up",
    "D": "diamond",
    "v": "triangle-down",
    "P": "cross",
    "X": "x",
    "*": "star",
}
PLOTLY_DASHES = {"-": "solid", "--": "dash", ":": "dot", "-.": "dashdot"}


def method_names() -> list[str]:
    """The fixed list colours are taken from: `none`, then every positional method in registry order."""
    return [NONE, *POSITIONS]


def _colour(index: int) -> str:
    """METHOD_COLOURS[index]; past its end, hues spread by the golden angle (distinct, deterministic)."""
    if index < len(METHOD_COLOURS):
        return METHOD_COLOURS[index]
    from matplotlib.colors import hsv_to_rgb, to_hex

    return to_hex(hsv_to_rgb(((index * 0.618034) % 1.0, 0.8, 0.75)))


def method_colour(method: str) -> str:
    """The colour of a positional method (or `none`), as a hex string."""
    return _colour(method_names().index(method))


def backend_colour(backend: str) -> str:
    """The colour of a backend in figures whose lines differ by backend alone, the same in every one."""
    return BACKEND_COLOURS[list(BACKENDS).index(backend) % len(BACKEND_COLOURS)]


def positions_key(variant: str) -> str:
    """The positional part of a variant name ('none' without positions)."""
    return "+".join(parse_variant(variant).positions) or NONE


def leading_method(variant: str) -> str:
    """The method that gives a variant its colour: its first in canonical order, or 'none'."""
    positions = parse_variant(variant).positions
    return positions[0] if positions else NONE


def added_methods(variant: str) -> tuple[str, ...]:
    """The methods a variant adds to its leading one (drawn hollow)."""
    return parse_variant(variant).positions[1:]


def variant_style(variant: str) -> dict:
    """The matplotlib style of one variant (color, marker, linestyle, markerfacecolor): pass it to
    `plot`/`errorbar` as **style. Depends on the variant only (see the module docstring)."""
    index = list(BACKENDS).index(parse_variant(variant).backend)
    colour = method_colour(leading_method(variant))
    return {
        "color": colour,
        "marker": MARKERS[index % len(MARKERS)],
        "linestyle": LINESTYLES[index % len(LINESTYLES)],
        "markerfacecolor": HOLLOW if added_methods(variant) else colour,
    }


def variant_styles(variants) -> dict[str, dict]:
    """{canonical variant name: variant_style} for every variant of `variants`."""
    return {name: variant_style(name) for name in dict.fromkeys(parse_variant(v).name for v in variants)}


def figure_styles(variants) -> dict[str, dict]:
    """{variant as given: its style in a figure of these variants}: `variant_style`, except that where they
    share one positional encoding and differ by backend each takes its backend's colour (module docstring)."""
    variants = list(dict.fromkeys(variants))
    parsed = {v: parse_variant(v) for v in variants}
    by_backend = len({p.positions for p in parsed.values()}) == 1 and len({p.backend for p in parsed.values()}) > 1
    styles = {}
    for variant, p in parsed.items():
        style = variant_style(variant)
        if by_backend:
            colour = backend_colour(p.backend)
            style = {**style, "color": colour, "markerfacecolor": HOLLOW if added_methods(variant) else colour}
        styles[variant] = style
    return styles


def plotly_style(style: dict) -> dict:
    """A matplotlib style from `variant_style` as plotly marker/line settings (hollow: '-open' symbol)."""
    from matplotlib.colors import to_hex

    colour = to_hex(style["color"])
    dash = PLOTLY_DASHES.get(style["linestyle"], "longdashdot") if isinstance(style["linestyle"], str) else "dot"
    symbol = PLOTLY_SYMBOLS.get(style["marker"], "circle")
    if style.get("markerfacecolor", colour) == HOLLOW:
        symbol += "-open"
    return {"marker": {"color": colour, "symbol": symbol}, "line": {"color": colour, "dash": dash}}


def encoding_legend(target, variants, lines: bool = True, extra=(), **kwargs):
    """A legend that explains the encoding instead of listing every variant: one colour patch per
    leading method, one black marker (and line style) per backend, one hollow marker per set of
    added methods, then the (handle, label) pairs of `extra`. `target` is an Axes or a Figure (with
    layout='constrained', loc='outside right upper' keeps it off the data)."""
    from matplotlib.lines import Line2D

    names = list(variant_styles(variants))
    handles, labels = [], []
    for method in [m for m in method_names() if any(leading_method(v) == m for v in names)]:
        colour = method_colour(method)
        handles.append(Line2D([], [], color=colour, lw=6 if lines else 0, marker=None if lines else "o", markersize=8))
        labels.append(method)
    for backend in [b for b in BACKENDS if any(parse_variant(v).backend == b for v in names)]:
        style = variant_style(f"{backend}+{NONE}")
        handles.append(
            Line2D([], [], color="black", marker=style["marker"], linestyle=style["linestyle"] if lines else "none")
        )
        labels.append(backend)
    for added in dict.fromkeys(added_methods(v) for v in names if added_methods(v)):
        handles.append(Line2D([], [], color="black", marker="o", markerfacecolor=HOLLOW, linestyle="none"))
        labels.append("hollow: + " + " + ".join(added))
    for handle, label in extra:
        handles.append(handle)
        labels.append(label)
    kwargs.setdefault("title", "colour: positions · marker/line: backend")
    kwargs.setdefault("fontsize", 7)
    kwargs.setdefault("title_fontsize", 7)
    return target.legend(handles, labels, **kwargs)


def variant_legend(target, variants, extra=(), **kwargs):
    """A legend with one entry per variant, drawn in its own style (every marker shown), then the
    (handle, label) pairs of `extra`; for figures with a handful of variants."""
    from matplotlib.lines import Line2D

    styles = figure_styles([parse_variant(v).name for v in variants])
    handles = [Line2D([], [], markersize=6, **style) for style in styles.values()]
    labels = list(styles)
    for handle, label in extra:
        handles.append(handle)
        labels.append(label)
    kwargs.setdefault("fontsize", 7)
    return target.legend(handles, labels, **kwargs)


def plain_log_ticks(axis, which: str = "y") -> None:
    """Label a log-scale axis with plain numbers (2, 5, 10, 20 …) instead of 2×10⁰: majors at the
    decades, minors at 2 and 5 times them."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    target = axis.yaxis if which == "y" else axis.xaxis
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    target.set_major_formatter(plain)
    target.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
    target.set_minor_formatter(plain)
