"""Analysis and reporting, above the lab: result tables (`results`), claims with verdicts
(`claims/`), convergence and gap-pilot reports, figures (`plots`, `cost_plots`, `map_figures`),
attention-map inspection, report folders (`report/`) and the notebooks that narrate them
(`notebooks`). It reads the lab's kept records and benchmark files; nothing below imports it."""

from .results import finished, gap_table, published_results, published_side_by_side, results_table

__all__ = ["finished", "gap_table", "published_results", "published_side_by_side", "results_table"]
