"""The seeds' published claims and a study's pre-registered contrasts, each tested on our run records
with an interval and a verdict (notebook 45_claims; docs/statistics.md).

- registry:   Claim, Comparison and Source; margins, α and the verdict words; the seeds' claims and a
              preset's `design:` contrasts
- evaluation: one row per (claim, dataset) from per-seed contrasts (rpevit.core.stats), one Holm family
- speed:      time claims from the side-by-side speed benchmark, seed 000's speed crossover
- narration:  effects and verdicts in words, the protocol and the answer
- tables:     the report's tables (claims and details, missing runs, speed claim, protocol, seeds, runs)
- design_answer: a designed study's pre-registered answer (scope, gaps, closing, cost, limits) in words
- figures:    the forest plot, the answer figure and the time-vs-softmax sweep

The margins and α of the seeds' claims: `analysis.claims.registry` (ALPHA, MARGIN_POINTS, MARGIN_TIME_PCT).
"""

from rpevit.lab.store.costs import read_speed

from .design_answer import design_answer_text
from .evaluation import RULED_OUT, correctness, evaluate_claims, family_size, mark_unplanned, missing_runs
from .figures import VERDICT_STYLES, answer_figure, forest_figure, time_ratio_figure
from .narration import (
    EFFECT_HEADER,
    SIGN,
    answer_text,
    baseline_text,
    busy_text,
    effect_words,
    family_text,
    interval_reading,
    protocol_text,
    speed_text,
    verdict_counts,
    verdict_text,
)
from .registry import (
    CLAIMS,
    CONTRADICTED,
    INCONCLUSIVE,
    NO_DATA,
    NOT_PLANNED,
    NOT_TESTABLE,
    S000,
    S000_SPEED,
    S001,
    S002,
    S003,
    SUPPORTED,
    TIME,
    TOP1,
    UNDECIDED,
    VERDICTS,
    Claim,
    Comparison,
    Source,
    claims_for,
    design_claims,
)
from .speed import BUSY, CROSSOVER_TOKENS, TIME_X, crossover_rows, time_ratios
from .tables import claims_details, claims_table, crossover_table, missing_table, protocol_rows, run_table, seed_table

__all__ = [
    "BUSY",
    "CLAIMS",
    "CONTRADICTED",
    "CROSSOVER_TOKENS",
    "EFFECT_HEADER",
    "INCONCLUSIVE",
    "NOT_PLANNED",
    "NOT_TESTABLE",
    "NO_DATA",
    "RULED_OUT",
    "S000",
    "S000_SPEED",
    "S001",
    "S002",
    "S003",
    "SIGN",
    "SUPPORTED",
    "TIME",
    "TIME_X",
    "TOP1",
    "UNDECIDED",
    "VERDICTS",
    "VERDICT_STYLES",
    "Claim",
    "Comparison",
    "Source",
    "answer_text",
    "baseline_text",
    "busy_text",
    "claims_details",
    "claims_for",
    "claims_table",
    "correctness",
    "crossover_rows",
    "crossover_table",
    "design_answer_text",
    "design_claims",
    "effect_words",
    "evaluate_claims",
    "family_size",
    "family_text",
    "forest_figure",
    "answer_figure",
    "interval_reading",
    "mark_unplanned",
    "missing_runs",
    "missing_table",
    "protocol_rows",
    "protocol_text",
    "read_speed",
    "run_table",
    "seed_table",
    "speed_text",
    "time_ratio_figure",
    "time_ratios",
    "verdict_counts",
    "verdict_text",
]
