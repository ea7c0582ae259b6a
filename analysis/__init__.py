"""What the numbered notebooks compute from a study's kept records, beside rpevit (which holds the models,
the training loop and the study runner): result tables (`results`), claims with verdicts (`claims/`),
convergence (`convergence`), figures (`plots`, `cost_plots`, `map_figures`, one look per variant in
`styles`), attention-map inspection (`inspection`, `attention_measures`) and, in `report`, everything a
notebook writes into reports/<preset>/ (rpevit.report's store and index with the styles). It imports
rpevit; no rpevit module imports it (tests/test_docs.py)."""

from .results import finished, gap_table, published_results, published_side_by_side, results_table

__all__ = ["finished", "gap_table", "published_results", "published_side_by_side", "results_table"]
