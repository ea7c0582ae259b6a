"""A study's pre-registered design: contrasts, margins, seeds, stopping rule and budget, fixed in
the preset (its `design:` block) before the first run trains, and the order in which the study
runner trains its runs.

Order: the primary variants seed-major (every primary variant's seed k before any seed k + 1), so a
study interrupted at any point stays balanced; then the secondary variants, seed-major too.
Stopping rule (evaluated after each complete block of primary seeds, from `min_seeds` on): stop
adding primary seeds when every primary contrast's 95 % t-interval over per-seed values has a
half-width ≤ `half_width` points, or at `max_seeds`. Secondary variants train `secondary_seeds`
seeds. Budget (summed training time: finished runs' epochs × seconds per epoch): a primary seed is
trained whole — a new one starts only while `budget_hours` covers the mean cost of the complete
seeds —, secondary runs stop at `budget_hours`, or at `secondary_budget_hours` when that is set
(then `budget_hours` counts primary runs only); secondary variants give way first because they
come last. The analysis uses the complete primary seeds (complete_seed_records).
A longer-budget check (`plateau_check`: another preset training the primary variants for more epochs
on some of the study's seeds) trains before the secondary variants: they are skipped while it wants runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import UserError


@dataclass(frozen=True)
class Contrast:
    """A pre-registered comparison: Σ coefficient · test top-1 (points) of the named variants, per seed.

    kind: `equal` (within ±margin_points: a negligible gap), `greater` / `less` (> 0 / < 0) or
    `at_least` (> −margin_points); see rpevit.core.stats.contrast_test."""

    name: str
    kind: str
    terms: dict = field(default_factory=dict)


@dataclass(frozen=True)
class StoppingRule:
    """Seeds of the primary variants: at least `min_seeds`, more until every primary contrast's
    `confidence` t-interval half-width is ≤ `half_width` points, at most `max_seeds`."""

    min_seeds: int = 3
    max_seeds: int = 10
    half_width: float = 0.5
    confidence: float = 0.95

    @property
    def fixed(self) -> bool:
        """True when min_seeds == max_seeds: a fixed number of seeds, no half-width to stop on."""
        return self.min_seeds == self.max_seeds


@dataclass(frozen=True)
class Design:
    """The pre-registered design of a study preset (empty: no design, every run of the grid)."""

    primary: tuple[str, ...] = ()
    secondary: tuple[str, ...] = ()
    contrasts: tuple[Contrast, ...] = ()
    margin_points: float = 1.0
    margin_time_pct: float = 20.0
    alpha: float = 0.05
    stopping: StoppingRule = field(default_factory=StoppingRule)
    secondary_seeds: int = 3
    budget_hours: float | None = None
    secondary_budget_hours: float | None = None  # set: budget_hours counts primary runs only
    plateau_check: str | None = None  # a preset: the primary variants trained longer, before the secondary ones

    @property
    def active(self) -> bool:
        return bool(self.primary)


def contrast_shape(contrast: Contrast) -> tuple[str, str, str | None, str | None, float]:
    """(a, b, c, d, w) of a contrast written as terms: a − b (coefficients +1, −1; c, d None) or the
    difference of differences (a − b) − w·(c − d) (coefficients +1, −1, −w, +w with w > 0; with w = 1 the
    first positive and first negative term are a and b). One UserError for any other shape."""
    terms = contrast.terms
    plus = [v for v, c in terms.items() if c > 0]
    minus = [v for v, c in terms.items() if c < 0]
    wrong = UserError(
        f"design.contrasts ({contrast.name}): terms {dict(terms)} are neither a − b (+1, −1) nor a weighted "
        "difference of differences (a − b) − w·(c − d) (+1, −1, −w, +w, w > 0)."
    )
    if len(terms) == 2 and len(plus) == 1 and terms[plus[0]] == 1.0 and terms[minus[0]] == -1.0:
        return plus[0], minus[0], None, None, 1.0
    if len(terms) != 4 or len(plus) != 2:
        raise wrong
    unit = [v for v in plus if terms[v] == 1.0]
    if not unit:
        raise wrong
    a = unit[0]
    d = next(v for v in plus if v != a)
    weight = float(terms[d])
    b = next((v for v in minus if terms[v] == -1.0), None)
    c = next((v for v in minus if v != b), None)
    if b is None or c is None or terms[c] != -weight:
        raise wrong
    return a, b, c, d, weight


def check_design(design: Design, variants, seeds) -> None:
    """Reject a design that names variants outside the grid or asks for impossible numbers."""
    from ..core.stats import CLAIM_KINDS
    from ..core.variants import parse_variant

    if not design.active:
        if design.contrasts or design.secondary:
            raise UserError("design: list the primary variants (design.primary) before contrasts or secondary ones.")
        return
    grid = {parse_variant(v).name for v in variants}

    def named(where, names):
        canonical = []
        for name in names:
            try:
                variant = parse_variant(name).name
            except UserError as exc:
                raise UserError(f"design.{where}: {exc}") from None
            if variant not in grid:
                raise UserError(f"design.{where}: {name} is not one of this preset's variants; add it to variants.")
            canonical.append(variant)
        return canonical

    primary, secondary = named("primary", design.primary), named("secondary", design.secondary)
    if set(primary) & set(secondary):
        raise UserError("design: a variant is listed as both primary and secondary; list it once.")
    stray = grid - set(primary) - set(secondary)
    if stray:
        raise UserError(f"design: {', '.join(sorted(stray))} in variants but neither primary nor secondary.")
    for contrast in design.contrasts:
        if contrast.kind not in CLAIM_KINDS:
            raise UserError(
                f"design.contrasts ({contrast.name}): kind {contrast.kind!r}; allowed: {', '.join(CLAIM_KINDS)}."
            )
        named(f"contrasts ({contrast.name})", contrast.terms)
        if not contrast.terms or not all(isinstance(c, (int, float)) for c in contrast.terms.values()):
            raise UserError(f"design.contrasts ({contrast.name}): terms map variants to numeric coefficients.")
        if abs(sum(contrast.terms.values())) > 1e-9:
            raise UserError(f"design.contrasts ({contrast.name}): coefficients must sum to 0 (a contrast).")
        contrast_shape(contrast)
    rule = design.stopping
    if not 2 <= rule.min_seeds <= rule.max_seeds <= len(seeds):
        raise UserError(
            f"design.stopping: need 2 ≤ min_seeds ({rule.min_seeds}) ≤ max_seeds ({rule.max_seeds}) ≤ the "
            f"{len(seeds)} seeds listed in seeds."
        )
    if design.secondary and not 1 <= design.secondary_seeds <= len(seeds):
        raise UserError(f"design.secondary_seeds: {design.secondary_seeds}; it must be 1…{len(seeds)}.")
    if not (rule.half_width > 0 and 0 < rule.confidence < 1 and 0 < design.alpha < 0.5):
        raise UserError("design: half_width > 0, 0 < confidence < 1 and 0 < alpha < 0.5 are required.")
    if design.margin_points <= 0 or design.margin_time_pct <= 0:
        raise UserError("design: margins must be > 0.")
    for name in ("budget_hours", "secondary_budget_hours"):
        hours = getattr(design, name)
        if hours is not None and not (isinstance(hours, (int, float)) and hours > 0):
            raise UserError(f"design.{name}: {hours!r}; give a number of training hours > 0, or leave it out.")
    if design.secondary_budget_hours is not None and design.budget_hours is None:
        raise UserError("design.secondary_budget_hours needs budget_hours (the primary runs' budget) beside it.")


def ordered_runs(params) -> list[tuple[str, str, int]]:
    """Every run the design may train, in training order: primary seed-major (an interrupted grid
    stays balanced), then secondary variant by variant in the order listed, each with all its seeds
    (a budget that runs out leaves the last-listed variants untrained, not every variant short of seeds)."""
    design = params.design
    primary, secondary = list(design.primary), list(design.secondary)
    runs = []
    for dataset in params.datasets:
        runs += [(dataset, v, s) for s in params.seeds for v in primary]  # spare seeds stand in for lost ones
        runs += [(dataset, v, s) for v in secondary for s in params.seeds[: design.secondary_seeds]]
    return runs


def grid(params) -> list[tuple[str, str, int]]:
    """The (dataset, canonical variant, seed) triples of a preset, in training order (a preset with a
    design: every run it may train, primary seed-major first; design.ordered_runs)."""
    if params.design.active:
        return ordered_runs(params)
    if params.order == "seed":
        return [(d, v, s) for d in params.datasets for s in params.seeds for v in params.variants]
    return [(d, v, s) for d in params.datasets for v in params.variants for s in params.seeds]
