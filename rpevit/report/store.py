"""The output store of the notebooks: figures (PNG for matplotlib, offline HTML for plotly), tables
(CSV + Markdown) and texts, each written into reports/<preset>/ and listed in its per-notebook manifest.

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
import time
import uuid
from pathlib import Path

from ..lab import tables
from ..lab.params import PROJECT_ROOT
from ..lab.paths import inside
from ..lab.store import records

MANIFEST = "manifest.json"
PLOTLY_JS = "plotly.min.js"
# written by other steps than the notebooks (the study runner; the index itself): never removed here
PROTECTED = frozenset({"summary.csv", "summary.md", "README.md", MANIFEST, PLOTLY_JS})
NO_ROWS = "no runs yet"


def report_dir(preset: str, root=None) -> Path:
    """reports/<preset>/ (created)."""
    path = inside(root or records.reports_root(), preset)
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

    def __init__(self, directory, notebook: str, show_only: bool = False):
        """`show_only`: this execution shows its outputs but writes none into `directory` (its earlier
        outputs there are still removed: the report holds what its last execution wrote)."""
        self.notebook = notebook
        self.directory = None if directory in (None, "") else Path(PROJECT_ROOT, directory)
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            begin_notebook(self.directory, notebook)
            if show_only:
                self.directory = None

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
