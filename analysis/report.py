"""What a notebook imports to write its report, in one name: three concerns, the first two from rpevit.report
(which the `notebooks` command also uses) and the third from this package:

- `store`: figures (PNG for matplotlib, offline HTML for plotly), tables (CSV + Markdown) and texts
  written into reports/<preset>/ with a per-notebook manifest (`Report`, `show`, `report_dir`);
- `index`: the index reports/<preset>/README.md (headline, guide, every output);
- `styles`: one look per variant (colour, marker, line, fill) shared by every figure.

The figures themselves are drawn by `analysis.plots`. Every name is importable from `analysis.report`.
"""

from rpevit.report import index, store
from rpevit.report.index import headline, report_texts, write_index
from rpevit.report.store import (
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

from .styles import (
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

__all__ = [
    "index",
    "store",
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
    "tracked_files",
    "variant_legend",
    "variant_style",
    "variant_styles",
    "write_index",
    "write_manifest",
]
