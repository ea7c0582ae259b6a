"""Report outputs of the notebooks, in three concerns:

- `store`: figures (PNG for matplotlib, offline HTML for plotly), tables (CSV + Markdown) and texts
  written into reports/<preset>/ with a per-notebook manifest (`Report`, `show`, `report_dir`);
- `index` and `findings`: the index reports/<preset>/README.md (headline, guide, every output) and
  the Findings block of docs/results.md copied from a preset's report;
- `styles`: one look per variant (colour, marker, line, fill) shared by every figure.

The figures themselves are drawn by `rpevit.analysis.plots`. Every name is importable from `rpevit.analysis.report`.
"""

from ..styles import (
    METHOD_COLOURS,
    added_methods,
    backend_colour,
    encoding_legend,
    leading_method,
    method_colour,
    method_names,
    plain_log_ticks,
    plotly_style,
    positions_key,
    variant_legend,
    variant_style,
    variant_styles,
)
from .findings import (
    FINDINGS_END,
    FINDINGS_PRESET,
    findings_begin,
    findings_markdown,
    study_status,
    sync_findings,
)
from .index import headline, report_texts, write_index
from .store import (
    MANIFEST,
    NO_ROWS,
    PLOTLY_JS,
    PROTECTED,
    Report,
    begin_notebook,
    columns_of,
    ensure_plotly_js,
    figure_png,
    markdown_table,
    plotly_bundle,
    prune,
    read_manifest,
    report_dir,
    show,
    tracked_files,
    write_manifest,
)

__all__ = [
    "FINDINGS_END",
    "FINDINGS_PRESET",
    "MANIFEST",
    "METHOD_COLOURS",
    "NO_ROWS",
    "PLOTLY_JS",
    "PROTECTED",
    "Report",
    "added_methods",
    "begin_notebook",
    "columns_of",
    "encoding_legend",
    "ensure_plotly_js",
    "figure_png",
    "findings_begin",
    "findings_markdown",
    "headline",
    "leading_method",
    "markdown_table",
    "method_colour",
    "method_names",
    "backend_colour",
    "plain_log_ticks",
    "plotly_bundle",
    "plotly_style",
    "positions_key",
    "prune",
    "read_manifest",
    "report_dir",
    "report_texts",
    "show",
    "study_status",
    "sync_findings",
    "tracked_files",
    "variant_legend",
    "variant_style",
    "variant_styles",
    "write_index",
    "write_manifest",
]
