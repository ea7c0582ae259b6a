"""Report outputs of the notebooks: figures (PNG for matplotlib, offline HTML for plotly), tables
(CSV + Markdown), the per-notebook manifest and the index reports/<preset>/README.md.

A notebook makes one `Report(report_dir, notebook)`. When it is executed as part of the report,
`python -m rpevit notebooks <preset>` passes `report_dir` (reports/<preset>/): every figure and
table is shown and written there, and the outputs of the notebook's previous execution are
removed first, so the folder and its manifest list only what the latest execution of each notebook
produced. Interactive runs (JupyterLab, an ad-hoc `papermill nb.ipynb out.ipynb`) keep
`report_dir = None`: the same calls only show. Nothing here types a number by hand: every table
and figure passed in is computed at execution time.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import time
import uuid
from pathlib import Path

from . import records, tables
from .errors import UserError
from .params import PROJECT_ROOT
from .paths import inside

MANIFEST = "manifest.json"
PLOTLY_JS = "plotly.min.js"
# written by other steps than the notebooks (the study runner; the index itself): never removed here
PROTECTED = frozenset({"summary.csv", "summary.md", "README.md", MANIFEST, PLOTLY_JS})
NO_ROWS = "no runs yet"


def reports_root() -> Path:
    """reports/ (or $RPEVIT_REPORTS)."""
    return Path(os.environ.get("RPEVIT_REPORTS", PROJECT_ROOT / "reports"))


def report_dir(preset: str, root=None) -> Path:
    """reports/<preset>/ (created)."""
    path = inside(root or reports_root(), preset)
    path.mkdir(parents=True, exist_ok=True)
    return path


# --------------------------------------------------------------------------- manifest


def read_manifest(directory: Path) -> dict:
    """{"notebooks": {notebook: {"executed": time, "outputs": [output, …]}}}; an output is
    {"name", "kind" (figure | table), "caption", "files"}. A manifest of the older flat form
    ({file: {caption, notebook, kind}}) is read into this form."""
    path = Path(directory) / MANIFEST
    data = json.loads(path.read_text()) if path.is_file() else {}
    if "notebooks" in data:
        return data
    notebooks: dict = {}
    for file, entry in data.items():  # legacy: one entry per file
        outputs = notebooks.setdefault(entry.get("notebook", ""), {"executed": None, "outputs": []})["outputs"]
        name = Path(file).stem
        match = next((o for o in outputs if o["name"] == name and o["kind"] == entry["kind"]), None)
        if match is None:
            outputs.append({"name": name, "kind": entry["kind"], "caption": entry["caption"], "files": [file]})
        else:
            match["files"].append(file)
    return {"notebooks": notebooks}


def write_manifest(directory: Path, manifest: dict) -> None:
    manifest = {"notebooks": dict(sorted(manifest["notebooks"].items()))}
    records.write_json(Path(directory) / MANIFEST, manifest)


def tracked_files(manifest: dict, notebook: str | None = None) -> set[str]:
    """Every file the manifest lists (for one notebook, or for all)."""
    entries = manifest["notebooks"].items()
    return {f for name, entry in entries if notebook in (None, name) for o in entry["outputs"] for f in o["files"]}


def _remove(directory: Path, files) -> list[str]:
    removed = []
    for name in sorted(files):
        path = directory / name
        if name not in PROTECTED and path.is_file():
            path.unlink()
            removed.append(name)
    return removed


def begin_notebook(directory: Path, notebook: str) -> list[str]:
    """Start a notebook's execution into `directory`: remove the outputs its previous execution
    listed, and files named like its outputs (its NN_ prefix) that no notebook lists (leftovers of
    older executions); reset its manifest entry. Returns the removed file names."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    others = tracked_files({"notebooks": {k: v for k, v in manifest["notebooks"].items() if k != notebook}})
    prefix = notebook.split("_", 1)[0] + "_"
    leftovers = {
        p.name
        for p in directory.iterdir()
        if p.is_file() and p.name.startswith(prefix) and p.suffix in (".png", ".html", ".csv", ".md")
    } - others
    removed = _remove(directory, (tracked_files(manifest, notebook) | leftovers) - others)
    manifest["notebooks"][notebook] = {"executed": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "outputs": []}
    write_manifest(directory, manifest)
    return removed


def prune(directory: Path, notebooks: list[str]) -> list[str]:
    """After a whole report was executed: drop the manifest entries of notebooks not in
    `notebooks` and remove every file that is neither listed, nor an executed notebook of
    `notebooks`, nor written by another step (PROTECTED). Returns the removed file names."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    manifest["notebooks"] = {k: v for k, v in manifest["notebooks"].items() if k in notebooks}
    write_manifest(directory, manifest)
    keep = tracked_files(manifest) | {f"{n}.ipynb" for n in notebooks}
    return _remove(directory, {p.name for p in directory.iterdir() if p.is_file()} - keep)


def _register(directory: Path, notebook: str, output: dict) -> None:
    manifest = read_manifest(directory)
    entry = manifest["notebooks"].setdefault(notebook, {"executed": None, "outputs": []})
    entry["outputs"] = [o for o in entry["outputs"] if not set(o["files"]) & set(output["files"])] + [output]
    write_manifest(directory, manifest)


# --------------------------------------------------------------------------- figures and tables


def figure_png(fig, dpi: int = 110) -> bytes:
    """A matplotlib figure as PNG bytes (tight bounding box: no clipped labels)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def _offline_html(fig) -> str:
    """An HTML fragment that draws a plotly figure with the plotly.min.js beside the page (no CDN);
    an AMD loader (require.js in exported notebooks) is set aside while the script loads."""
    div = f"plotly-{uuid.uuid4().hex[:12]}"
    spec = fig.to_json().replace("</", "<\\/")  # no '</script>' inside the script
    height = fig.layout.height or 450
    return (
        f'<div id="{div}" style="width:100%;height:{height}px"></div>\n<script>\n(function () {{\n'
        f"  var spec = {spec};\n"
        f'  function draw() {{ window.Plotly.newPlot("{div}", spec.data, spec.layout, {{responsive: true}}); }}\n'
        f"  if (window.Plotly) {{ draw(); return; }}\n"
        f"  var amd = window.define; window.define = undefined;\n"
        f'  var script = document.createElement("script");\n'
        f'  script.src = "{PLOTLY_JS}";\n'
        f"  script.onload = function () {{ window.define = amd; draw(); }};\n"
        f'  script.onerror = function () {{ window.define = amd; document.getElementById("{div}").textContent = '
        f'"{PLOTLY_JS} is not beside this page: open the copy in the report folder."; }};\n'
        f"  document.head.appendChild(script);\n}})();\n</script>"
    )


def plotly_bundle(fig) -> dict:
    """Display data for a plotly figure: plotly's own mimetype (JupyterLab renders it offline with
    the bundled extension) and an HTML fallback that loads the local plotly.min.js (exported HTML)."""
    import plotly.io as pio

    bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict())
    bundle["text/html"] = _offline_html(fig)
    return bundle


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def show(obj) -> None:
    """Display a plotly figure (offline bundle), PNG bytes, Markdown text or anything else in a
    notebook; outside IPython do nothing."""
    if not _in_ipython():
        return
    from IPython.display import Image, Markdown, display

    if hasattr(obj, "to_plotly_json"):
        display(plotly_bundle(obj), raw=True)
    elif isinstance(obj, bytes):
        display(Image(data=obj))
    elif isinstance(obj, str):
        display(Markdown(obj))
    else:
        display(obj)


def ensure_plotly_js(directory: Path) -> Path:
    """plotly.min.js of the installed plotly beside the HTML pages (written when missing or stale)."""
    from plotly.offline import get_plotlyjs

    path = Path(directory) / PLOTLY_JS
    script = get_plotlyjs()
    if not path.is_file() or path.stat().st_size != len(script.encode()):
        records.write_text(path, script)
    return path


def columns_of(rows: list[dict]) -> list[str]:
    """Every key of the rows, in first-seen order."""
    return list(dict.fromkeys(key for row in rows for key in row))


def markdown_table(rows: list[dict], digits: int = 2, empty: str = NO_ROWS) -> str:
    """Rows (dicts) as a Markdown table; no rows: `(empty)`."""
    if not rows:
        return f"({empty})\n"
    return tables.markdown_table(rows, columns_of(rows), digits)


class Report:
    """Figures and tables of one notebook execution: shown, and written into `directory` when one is
    given (relative paths are taken from the project root)."""

    def __init__(self, directory, notebook: str):
        self.notebook = notebook
        self.directory = None if directory in (None, "") else Path(PROJECT_ROOT, directory)
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            begin_notebook(self.directory, notebook)

    @property
    def writes(self) -> bool:
        return self.directory is not None

    def figure(self, fig, name: str, caption: str, display: bool = True) -> None:
        """Show a matplotlib figure (as its PNG, rendered once; then closed) or a plotly figure, and
        write <name>.png / <name>.html when the report has a folder."""
        path = None
        if hasattr(fig, "savefig"):  # matplotlib
            import matplotlib.pyplot as plt

            png = figure_png(fig)
            plt.close(fig)
            if self.writes:
                path = self.directory / f"{name}.png"
                records.write_bytes(path, png)
            if display:
                show(png)
        else:  # plotly: one shared plotly.min.js beside the pages keeps each page small and offline
            if self.writes:
                path = self.directory / f"{name}.html"
                records.write_text(path, fig.to_html(include_plotlyjs="directory", full_html=True))
            if display:
                show(fig)
        if self.writes:
            if path.suffix == ".html":
                ensure_plotly_js(self.directory)
            _register(
                self.directory,
                self.notebook,
                {"name": name, "kind": "figure", "caption": caption, "files": [path.name]},
            )

    def table(
        self, rows: list[dict], name: str, caption: str, digits: int = 2, empty: str = NO_ROWS, display: bool = True
    ) -> None:
        """Show rows as Markdown and write <name>.csv (full precision) + <name>.md (rounded) when the
        report has a folder. No rows: nothing is written; the caption with the note `(empty)` is shown."""
        markdown = markdown_table(rows, digits, empty)
        if rows and self.writes:
            columns = columns_of(rows)
            records.write_csv(self.directory / f"{name}.csv", [{c: row.get(c) for c in columns} for row in rows])
            records.write_text(self.directory / f"{name}.md", f"{caption}\n\n{markdown}")
            _register(
                self.directory,
                self.notebook,
                {"name": name, "kind": "table", "caption": caption, "files": [f"{name}.md", f"{name}.csv"]},
            )
        if display:
            show(markdown if rows else f"*{caption}* — ({empty})")

    def text(self, markdown: str, name: str, caption: str, display: bool = True) -> None:
        """Show generated Markdown prose and write <name>.md when the report has a folder; the index
        (write_index) quotes it under its headline — the report's answer in sentences drawn from tables."""
        if self.writes:
            records.write_text(self.directory / f"{name}.md", markdown.rstrip() + "\n")
            _register(
                self.directory,
                self.notebook,
                {"name": name, "kind": "text", "caption": caption, "files": [f"{name}.md"]},
            )
        if display:
            show(markdown)


# --------------------------------------------------------------------------- index


def headline(found: list[dict], preset: str = "<preset>") -> list[str]:
    """Markdown lines: per dataset, the best variant of each backend (mean test top-1 over seeds),
    the gap of the best Performer to the best softmax variant (with a Student-t interval over the
    seeds both share, when rpevit.stats is available and there are ≥ 2), and the runs' dates and devices."""
    from .attention import exact_backends
    from .variants import parse_variant

    done = [r for r in found if r.get("status") == "finished"]
    if not done:
        return [
            f"No finished runs yet: run `make study PRESET={preset}` (`python -m rpevit study {preset}`, then "
            f"`python -m rpevit notebooks {preset}`)."
        ]
    lines = []
    for dataset in dict.fromkeys(r["dataset"] for r in done):
        by_variant: dict[str, dict[int, float]] = {}
        for r in done:
            if r["dataset"] == dataset:
                by_variant.setdefault(r["variant"], {})[r["seed"]] = 100 * r["top1"]
        best: dict[str, tuple[str, float, int]] = {}
        for variant, seeds in by_variant.items():
            backend = parse_variant(variant).backend
            accuracy = statistics.fmean(seeds.values())
            if backend not in best or accuracy > best[backend][1]:
                best[backend] = (variant, accuracy, len(seeds))
        parts = [
            f"{backend}: `{v}` {a:.1f}%" + (f" (mean of {n} seeds)" if n > 1 else "")
            for backend, (v, a, n) in best.items()
        ]
        lines.append(f"- **{dataset}** — best test top-1 per backend: " + "; ".join(parts) + ".")
        exact = next((b for b in exact_backends() if b in best), None)
        performers = {b: v for b, v in best.items() if b not in exact_backends()}
        if exact and performers:
            reference = best[exact][0]
            performer = max(performers.values(), key=lambda item: item[1])[0]
            shared = sorted(set(by_variant[reference]) & set(by_variant[performer]))
            gaps = [by_variant[performer][s] - by_variant[reference][s] for s in shared]
            gap = statistics.fmean(by_variant[performer].values()) - statistics.fmean(by_variant[reference].values())
            direction = "the Performer ahead" if gap > 0 else "the Performer behind"
            lines.append(
                f"  Performer − {exact}, best Performer `{performer}` − best {exact} `{reference}`: {gap:+.1f}".replace(
                    "-", "−"
                )
                + f" points ({direction})"
                + _interval(gaps)
                + "."
            )
    finished_at = sorted(r.get("finished_at", "")[:10] for r in done if r.get("finished_at"))
    devices = sorted({r.get("device_name") or r.get("device", "?") for r in done})
    when = (
        (finished_at[0] if finished_at[0] == finished_at[-1] else f"{finished_at[0]} … {finished_at[-1]}")
        if finished_at
        else "date not recorded"
    )
    lines.append(f"- {len(done)} finished runs, trained {when} on {', '.join(devices)}.")
    return lines


def _interval(gaps: list[float]) -> str:
    if len(gaps) < 2:
        return "; one seed, so no interval"
    try:
        from .stats import t_interval
    except ImportError:
        return f"; {len(gaps)} paired seeds"
    ci = t_interval(gaps)
    return f"; 95% t-interval over {ci['n']} paired seeds [{ci['low']:+.1f}, {ci['high']:+.1f}]"


def _title(directory: Path, notebook: str) -> str:
    """The first Markdown heading of an executed notebook, else its name."""
    try:
        cells = json.loads((directory / f"{notebook}.ipynb").read_text())["cells"]
        source = "".join(next(c for c in cells if c["cell_type"] == "markdown")["source"])
        return source.lstrip("# ").splitlines()[0].strip()
    except (OSError, ValueError, KeyError, StopIteration, IndexError):
        return notebook


def report_texts(directory: Path, notebooks: list[str] | None = None) -> list[tuple[dict, str]]:
    """(manifest entry, Markdown) of every text a report's notebooks wrote (Report.text), in order."""
    entries = read_manifest(directory)["notebooks"]
    return [
        (output, (directory / output["files"][0]).read_text().rstrip())
        for notebook in (entries if notebooks is None else notebooks)
        for output in entries.get(notebook, {"outputs": []})["outputs"]
        if output["kind"] == "text" and (directory / output["files"][0]).is_file()
    ]


FINDINGS_PRESET = "fmnist_converged"
FINDINGS_END = "<!-- /findings -->"


def findings_begin(preset: str) -> str:
    return (
        f"<!-- findings: copied from reports/{preset}/ by `python -m rpevit findings {preset}`; do not edit by hand -->"
    )


def findings_markdown(preset: str = FINDINGS_PRESET, root=None) -> str:
    """The README's Findings block: the texts a preset's report generated from its tables (notebook 45's
    answer and speed claim), each with a link to its report and the claims table."""
    directory = report_dir(preset, root)
    texts = report_texts(directory)
    if not texts and _designed(preset):
        return "\n".join([findings_begin(preset), study_status(preset, root), FINDINGS_END])
    if not texts:
        raise UserError(
            f"reports/{preset}/ has no generated texts yet; run `make study PRESET={preset}` "
            f"(or `python -m rpevit notebooks {preset}`) first."
        )
    link = f"reports/{preset}"
    lines = [
        findings_begin(preset),
        f"From [{link}/]({link}/README.md) — the [claims table]({link}/45_claims.md) (effects, intervals, "
        f"Holm-adjusted p, verdicts) and its [forest plot]({link}/45_forest.png).",
    ]
    for output, body in texts:
        lines += ["", f"**{output['caption']}** ([{output['files'][0]}]({link}/{output['files'][0]})):", "", body]
    return "\n".join([*lines, FINDINGS_END])


def _designed(preset: str) -> bool:
    from .params import load_params

    try:
        return load_params(preset).design.active
    except UserError:
        return False


def study_status(preset: str, root=None) -> str:
    """Markdown: how far a designed study is (finished runs of its primary and secondary variants, from
    the kept records) while its report has not been generated yet."""
    from .params import load_params
    from .study import grid, study_records

    params = load_params(preset)
    found = [r for r in study_records(params, reports_root=root) if r.get("status") == "finished"]
    primary = set(params.design.primary)
    done_primary = sum(r["variant"] in primary for r in found)
    seeds = params.design.stopping
    hours = sum(r.get("train_seconds_per_epoch", 0) * r.get("epochs", 0) for r in found) / 3600
    return (
        f"**The converged study `{preset}` is in progress** ([params/{preset}.yaml](params/{preset}.yaml): design, "
        f"recipe and stopping rule fixed before its first run): {done_primary} primary runs finished "
        f"({len(primary)} variants × {seeds.min_seeds}–{seeds.max_seeds} seeds by the stopping rule), "
        f"{len(found) - done_primary} secondary, of at most {len(grid(params))} runs; {hours:.1f} training hours so "
        f"far. Its answer — the Performer–softmax gap at convergence and whether RoPE closes it, with intervals — "
        f"appears here when `make study PRESET={preset}` regenerates its report. The recipe's pilot: "
        f"[reports/fmnist_pilot/](reports/fmnist_pilot/README.md)." + _early_study_note(root)
    )


def _early_study_note(root=None, preset: str = "cpu_claims") -> str:
    """One sentence on the early-training claims study, computed from its kept records."""
    from .params import load_params
    from .study import study_records

    try:
        found = [r for r in study_records(load_params(preset), reports_root=root) if r.get("status") == "finished"]
    except UserError:
        return ""
    if not found:
        return ""
    last = sum(r.get("best_epoch") == r.get("epochs") for r in found)
    return (
        f" The earlier claims study ([reports/{preset}/](reports/{preset}/README.md), "
        f"{found[0]['epochs']} epochs) is an early-training study: {last} of its {len(found)} runs had their best "
        "validation epoch at the last one, so it measures how fast variants start, not the converged gap."
    )


def sync_findings(readme: Path, preset: str = FINDINGS_PRESET, root=None) -> bool:
    """Replace the Findings block of `readme` by findings_markdown(preset); True if it changed."""
    text = readme.read_text()
    start, end = text.find("<!-- findings:"), text.find(FINDINGS_END)
    if start < 0 or end < start:
        raise UserError(f"{readme} has no Findings block (<!-- findings: … --> … {FINDINGS_END}) to fill.")
    new = text[:start] + findings_markdown(preset, root) + text[end + len(FINDINGS_END) :]
    if new != text:
        records.write_text(readme, new)
    return new != text


def write_index(preset: str, notebooks: list[str], root=None, found: list[dict] | None = None) -> Path:
    """reports/<preset>/README.md: the headline result, a short guide, then every executed
    notebook with its figures and tables (each table once: its Markdown and CSV on one line)."""
    directory = report_dir(preset, root)
    manifest = read_manifest(directory)
    names = [Path(n).stem for n in notebooks]
    executed = [n for n in names if (directory / f"{n}.ipynb").is_file()]
    texts = report_texts(directory, executed)
    lines = (
        [f"# Report: {preset}", "", "## Headline", ""]
        + headline(found or [], preset)
        + [line for output, body in texts for line in ("", f"### {output['caption']}", "", body)]
        + [
            "",
            "## Guide",
            "",
            f"Regenerated by `make study PRESET={preset}` "
            f"(the notebooks alone: `python -m rpevit notebooks {preset}`). "
            "Every figure and table is computed from the run records in `runs/` or by rpevit calls when the "
            "notebooks execute; nothing is typed by hand. Each section below is one executed notebook (open it "
            "for the narrative and the code), followed by what it produced: figures as PNG, interactive figures "
            f"as HTML pages (offline: they load `{PLOTLY_JS}` from this folder), tables as Markdown with the "
            "full-precision CSV beside them.",
        ]
    )
    if (directory / "summary.md").is_file():
        lines += [
            "",
            "- [summary.md](summary.md) · [summary.csv](summary.csv) — one row per run, every metric "
            "(written by the study runner).",
        ]
    for notebook in executed:
        entry = manifest["notebooks"].get(notebook, {"outputs": []})
        lines += ["", f"## [{_title(directory, notebook)}]({notebook}.ipynb)", ""]
        outputs = [o for o in entry["outputs"] if all((directory / f).is_file() for f in o["files"])]
        if not outputs:
            lines.append("No figures or tables (see the notebook for why).")
        for output in outputs:
            links = " · ".join(f"[{Path(f).suffix.lstrip('.')}]({f})" for f in output["files"])
            lines.append(f"- {output['kind']} **{output['name']}** ({links}) — {output['caption']}")
    path = directory / "README.md"
    records.write_text(path, "\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------- styles per variant

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


def _palette(count: int) -> list:
    """`count` distinct colours: tab10, then tab20 (dark shades first), then evenly spaced hues
    (computed, not read from a 256-entry colormap, so any count stays distinct), alternating two
    brightness levels so neighbours differ."""
    from matplotlib import colormaps
    from matplotlib.colors import hsv_to_rgb

    if count <= 10:
        return [colormaps["tab10"](i) for i in range(count)]
    if count <= 20:
        order = list(range(0, 20, 2)) + list(range(1, 20, 2))
        return [colormaps["tab20"](i) for i in order[:count]]
    return [(*hsv_to_rgb((i / count, 0.85, 0.95 if i % 2 else 0.7)), 1.0) for i in range(count)]


def positions_key(variant: str) -> str:
    """The positional part of a variant name ('none' without positions)."""
    from .variants import parse_variant

    return "+".join(parse_variant(variant).positions) or "none"


def _position_order(key: str) -> tuple:
    from .position import POSITIONS

    names = ["none"] + list(POSITIONS)
    return tuple(names.index(p) for p in key.split("+"))


def variant_styles(variants) -> dict[str, dict]:
    """A distinct matplotlib style per variant: colour by its positional methods (distinct among the
    position sets of `variants`, in registry order), marker and line style by backend (registry
    order of rpevit.attention.BACKENDS). Keys: canonical variant names."""
    from .attention import BACKENDS
    from .variants import parse_variant

    names = list(dict.fromkeys(parse_variant(v).name for v in variants))
    keys = sorted({positions_key(v) for v in names}, key=_position_order)
    colours = dict(zip(keys, _palette(len(keys))))
    backends = list(BACKENDS)
    styles = {}
    for variant in names:
        index = backends.index(parse_variant(variant).backend)
        styles[variant] = {
            "color": colours[positions_key(variant)],
            "marker": MARKERS[index % len(MARKERS)],
            "linestyle": LINESTYLES[index % len(LINESTYLES)],
        }
    return styles


def variant_style(variant: str, variants=None) -> dict:
    """The style of one variant within the set `variants` (default: every single-method variant of
    every backend, so a lone call is still consistent)."""
    from .attention import BACKENDS
    from .position import POSITIONS
    from .variants import parse_variant

    name = parse_variant(variant).name
    if variants is None:
        variants = [
            f"{b}+{p}"
            for b in BACKENDS
            for p in ["none", *POSITIONS]
            if p == "none" or POSITIONS[p].mechanism in BACKENDS[b].mechanisms
        ]
    return variant_styles([*variants, name])[name]


def plotly_style(style: dict) -> dict:
    """A matplotlib style from `variant_styles` as plotly marker/line settings."""
    from matplotlib.colors import to_hex

    colour = to_hex(style["color"])
    dash = PLOTLY_DASHES.get(style["linestyle"], "longdashdot") if isinstance(style["linestyle"], str) else "dot"
    return {
        "marker": {"color": colour, "symbol": PLOTLY_SYMBOLS.get(style["marker"], "circle")},
        "line": {"color": colour, "dash": dash},
    }


def encoding_legend(target, variants, lines: bool = True, extra=(), **kwargs):
    """A legend that explains the encoding instead of listing every variant: one colour patch per
    position set, one black marker (and line style) per backend, then the (handle, label) pairs of
    `extra`. `target` is an Axes or a Figure (with layout='constrained', loc='outside right upper'
    keeps it off the data)."""
    from matplotlib.lines import Line2D

    from .attention import BACKENDS
    from .variants import parse_variant

    styles = variant_styles(variants)
    colours = {positions_key(v): s["color"] for v, s in styles.items()}
    handles, labels = [], []
    for key, colour in sorted(colours.items(), key=lambda item: _position_order(item[0])):
        handles.append(Line2D([], [], color=colour, lw=6 if lines else 0, marker=None if lines else "o", markersize=8))
        labels.append(key)
    for backend in [b for b in BACKENDS if any(parse_variant(v).backend == b for v in styles)]:
        style = next(s for v, s in styles.items() if parse_variant(v).backend == backend)
        handles.append(
            Line2D([], [], color="black", marker=style["marker"], linestyle=style["linestyle"] if lines else "none")
        )
        labels.append(backend)
    for handle, label in extra:
        handles.append(handle)
        labels.append(label)
    kwargs.setdefault("title", "colour: positions · marker/line: backend")
    kwargs.setdefault("fontsize", 7)
    kwargs.setdefault("title_fontsize", 7)
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
