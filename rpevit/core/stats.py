"""Statistics that turn run records into claims with verdicts.

Design, in short:

* Per variant, accuracy over training seeds is summarised by its mean and a Student-t interval
  (`t_interval`, `mean_ci_table`); each single run also gets a test-set bootstrap interval of
  its accuracy (`bootstrap_accuracy`, percentile bootstrap via `scipy.stats.bootstrap`).
* Variants are compared by a contrast (a − b, or a difference of differences) computed per
  training seed — the seed is the unit of replication — and analysed with Student's t over seeds
  (`contrast_test`): an interval and two one-sided p-values from the t distribution, one for the
  claim and one against it (equivalence within a margin fixed in advance: TOST, Schuirmann 1987;
  contradiction of an equivalence: beyond the margin). `image_standard_error` gives the share of
  test-image sampling, shown beside the seed-level standard error.
* A family of claims is decided by one symmetric rule (`family_verdicts`): Holm's step-down
  correction over every one-sided p-value, the same for "supported" and "contradicted".
* With one seed only image-level tests exist (`mcnemar_exact`), descriptive, never a verdict.

Arrays go in (numpy or anything `np.asarray` accepts); plain floats, bools and dicts come out.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

SUPPORTED = "supported"
CONTRADICTED = "contradicted"
INCONCLUSIVE = "inconclusive"
CLAIM_KINDS = ("greater", "less", "at_least", "equal")

# scipy >= 1.15 names the generator argument `rng`; older releases call it `random_state`.
_BOOTSTRAP_RNG_ARG = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"
# Resampled values held in memory at once by the bootstraps (float64: 8 bytes each).
_BOOTSTRAP_BATCH_ELEMENTS = 4_000_000


# --------------------------------------------------------------------------- validation helpers


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")


def _check_resamples(n_resamples: int) -> int:
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples}")
    return int(n_resamples)


def _check_margin(margin: float | None, *, allow_zero: bool = False) -> float:
    if margin is None or not math.isfinite(margin) or margin < 0 or (margin == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"margin must be a finite number {bound} (in accuracy points), got {margin}")
    return float(margin)


def _as_correctness(correct: ArrayLike, name: str) -> np.ndarray:
    """`correct` as a float64 array of 0/1 values; raises ValueError on anything else."""
    array = np.asarray(correct)
    if array.size == 0:
        raise ValueError(f"{name} is empty; it needs one 0/1 (or bool) entry per test image")
    if array.dtype != bool and not np.isin(array, (0, 1)).all():
        raise ValueError(f"{name} must hold per-image correctness as bool or 0/1 values only")
    return array.astype(np.float64)


def _paired_correctness(correct_a: ArrayLike, correct_b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Both correctness arrays as float64 (seeds, images), after checking they are paired."""
    a = _as_correctness(correct_a, "correct_a")
    b = _as_correctness(correct_b, "correct_b")
    if a.shape != b.shape:
        raise ValueError(
            "correct_a and correct_b must have the same shape (seeds, images): the same seeds and "
            f"the same test images in the same order; got {a.shape} and {b.shape}"
        )
    if a.ndim not in (1, 2):
        raise ValueError(f"correctness arrays must be 1-D (images) or 2-D (seeds, images), got shape {a.shape}")
    return np.atleast_2d(a), np.atleast_2d(b)


# --------------------------------------------------------------------------- single variants


def t_half_width(sd: float, n: int, confidence: float = 0.95) -> float:
    """Half-width of the Student-t interval of a mean of n values with sample SD `sd`: t_{(1+c)/2,n-1}·sd/√n."""
    _check_confidence(confidence)
    if n < 2:
        raise ValueError(f"a t-interval needs at least 2 values, got {n}")
    return float(stats.t.ppf((1 + confidence) / 2, df=n - 1) * sd / math.sqrt(n))


def t_interval(values: ArrayLike, confidence: float = 0.95) -> dict[str, float]:
    """Mean over seeds with its Student-t confidence interval.

    low/high = mean -/+ t_{(1+confidence)/2, n-1} * s / sqrt(n), with s the sample standard
    deviation (ddof=1). With n = 1 there is no spread to estimate: low = high = nan.
    Returns dict(mean, low, high, n).
    """
    _check_confidence(confidence)
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"t_interval needs a non-empty 1-D array of values, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("t_interval got non-finite values (nan or inf)")
    n = x.size
    mean = float(x.mean())
    if n == 1:
        return {"mean": mean, "low": math.nan, "high": math.nan, "n": 1}
    half_width = t_half_width(float(x.std(ddof=1)), n, confidence)
    return {"mean": mean, "low": float(mean - half_width), "high": float(mean + half_width), "n": n}


def mean_ci_table(
    values_by_group: Mapping[str, Sequence[float]], confidence: float = 0.95
) -> list[dict[str, float | str]]:
    """One row per group: dict(group, mean, low, high, n, std), the interval from `t_interval`.

    std is the sample standard deviation (ddof=1); nan, like the interval, for a single value.
    Rows keep the mapping's order.
    """
    rows: list[dict[str, float | str]] = []
    for group, values in values_by_group.items():
        summary = t_interval(values, confidence)
        std = float(np.std(values, ddof=1)) if summary["n"] > 1 else math.nan
        rows.append({"group": group, **summary, "std": std})
    return rows


def bootstrap_accuracy(
    correct: ArrayLike, confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0
) -> dict[str, float]:
    """Test-set bootstrap interval of one run's accuracy (Efron & Tibshirani percentile bootstrap).

    `correct` is a 1-D bool/0-1 vector of per-image correctness; estimate/low/high are fractions
    in [0, 1]. Computed with `scipy.stats.bootstrap(method="percentile")`, vectorized. Percentile
    rather than BCa: for a mean of 0/1 values on thousands of images the sampling distribution is
    nearly symmetric, so BCa's skew correction buys little; BCa returns nan for a run with all
    images right (or all wrong), and its jackknife costs O(n^2) for n test images; and the
    percentile method matches `paired_difference`, so the intervals in one report agree in kind.
    """
    _check_confidence(confidence)
    n_resamples = _check_resamples(n_resamples)
    x = _as_correctness(correct, "correct")
    if x.ndim != 1:
        raise ValueError(f"correct must be 1-D (one entry per test image), got shape {x.shape}")
    result = stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=n_resamples,
        batch=max(1, _BOOTSTRAP_BATCH_ELEMENTS // x.size),
        vectorized=True,
        axis=-1,
        confidence_level=confidence,
        method="percentile",
        **{_BOOTSTRAP_RNG_ARG: np.random.default_rng(seed)},
    )
    interval = result.confidence_interval
    return {"estimate": float(x.mean()), "low": float(interval.low), "high": float(interval.high)}


# --------------------------------------------------------------------------- paired comparisons


def mcnemar_exact(correct_a: ArrayLike, correct_b: ArrayLike) -> dict[str, float | int]:
    """Exact McNemar test (McNemar 1947) via the binomial distribution, two-sided.

    Only discordant images count: a_only = a right and b wrong, b_only = the reverse. Under
    H0 (equal accuracy) a_only ~ Binomial(a_only + b_only, 1/2); the p-value is
    `scipy.stats.binomtest(a_only, a_only + b_only).pvalue`, and 1 when there is no discordant
    image. A 2-D input (seeds, images) pools its seeds, which ignores training randomness; use
    `paired_difference` for several seeds. Returns dict(p_value, a_only, b_only).
    """
    a, b = _paired_correctness(correct_a, correct_b)
    a_only = int(np.sum((a == 1) & (b == 0)))
    b_only = int(np.sum((a == 0) & (b == 1)))
    discordant = a_only + b_only
    p_value = 1.0 if discordant == 0 else float(stats.binomtest(a_only, discordant, 0.5).pvalue)
    return {"p_value": p_value, "a_only": a_only, "b_only": b_only}


# --------------------------------------------------------------------------- families and verdicts


def time_ratio(times_a: ArrayLike, times_b: ArrayLike, confidence: float = 0.95) -> dict[str, float]:
    """How many times slower a is than b: the ratio of geometric-mean times, exp(mean log a − mean log b),
    with Welch's t-interval on the log times (`scipy.stats.ttest_ind(equal_var=False)`) and its two-sided
    p-value of "ratio = 1". Timings are positive and right-skewed, so logs make the ratio symmetric.
    Returns dict(ratio, low, high, p, n_a, n_b); needs two or more timings of each."""
    _check_confidence(confidence)
    a, b = (np.asarray(t, dtype=np.float64) for t in (times_a, times_b))
    if a.ndim != 1 or b.ndim != 1 or a.size < 2 or b.size < 2:
        raise ValueError("time_ratio needs two or more timings of each side (1-D arrays)")
    if not all(np.isfinite(x).all() and (x > 0).all() for x in (a, b)):
        raise ValueError("time_ratio needs positive, finite timings")
    a, b = np.log(a), np.log(b)
    tested = stats.ttest_ind(a, b, equal_var=False)
    interval = tested.confidence_interval(confidence)
    return {
        "ratio": float(np.exp(a.mean() - b.mean())),
        "low": float(np.exp(interval.low)),
        "high": float(np.exp(interval.high)),
        "p": float(tested.pvalue),
        "n_a": int(a.size),
        "n_b": int(b.size),
    }


def holm(p_values: Sequence[float] | ArrayLike) -> list[float]:
    """Holm-Bonferroni step-down adjusted p-values (Holm 1979), in the input's order.

    With the m non-nan p-values sorted ascending, p_(1) <= ... <= p_(m), the adjusted value of
    p_(k) is max_{j <= k} min(1, (m - j + 1) p_(j)): monotone in p and capped at 1. Rejecting
    where adjusted < alpha controls the family-wise error rate at alpha. nan passes through and
    does not count towards m.
    """
    p = np.asarray(p_values, dtype=np.float64).ravel()
    present = ~np.isnan(p)
    if np.any((p[present] < 0) | (p[present] > 1)):
        raise ValueError(f"p-values must lie in [0, 1], got {p[present].tolist()}")
    adjusted = np.full(p.shape, math.nan)
    positions = np.flatnonzero(present)
    order = positions[np.argsort(p[positions], kind="stable")]
    m = order.size
    scaled = (m - np.arange(m)) * p[order]
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return [float(value) for value in adjusted]


# --------------------------------------------------------------------------- seed-level contrasts and verdicts
# The seed is the unit of replication: a comparison of variants is a contrast Σ c_v · acc_v computed
# per training seed (the same seed number trains every variant with the same data order), and its
# inference is a Student-t analysis of those per-seed values. Test-image sampling enters each
# per-seed value, so the t-interval carries it as well; `image_standard_error` reports its share.

ONE_SIDED_TESTS = ("support", "contradict")


def _one_sided(mean: float, se: float, df: int, theta: float, upper: bool) -> float:
    """p of H0: δ ≤ θ against δ > θ (upper) or H0: δ ≥ θ against δ < θ (lower), t with df."""
    if se == 0.0:
        return 0.0 if (mean > theta if upper else mean < theta) else 1.0
    t = (mean - theta) / se
    return float(stats.t.sf(t, df) if upper else stats.t.cdf(t, df))


def contrast_test(values: ArrayLike, kind: str, margin: float | None = None, alpha: float = 0.05) -> dict:
    """Student-t inference on per-seed contrast values (points) for a claim of `kind`.

    Returns effect (mean), se (s/√S), df (S − 1), the unadjusted interval (low, high) — (1 − α)
    two-sided for greater/less (each bound a one-sided test at α/2), (1 − 2α) for at_least/equal
    (each bound a one-sided test at α) —
    and two one-sided p-values from the t distribution (never floored by a replicate count):

    ========  =========================================  ===========================================
    kind      p_support (H1)                             p_contradict (H1)
    ========  =========================================  ===========================================
    greater   δ > 0                                      δ < 0
    less      δ < 0                                      δ > 0
    at_least  δ > −margin (non-inferiority)              δ < −margin (inferior beyond the margin)
    equal     −margin < δ < margin (TOST: max of the     δ > margin or δ < −margin (min of the two
              two one-sided p, Schuirmann 1987)          one-sided p, ×2 for choosing the side)
    ========  =========================================  ===========================================

    With fewer than two seeds nothing is estimable: every number but the effect is nan.
    """
    if kind not in CLAIM_KINDS:
        raise ValueError(f"unknown claim kind {kind!r}; expected one of {', '.join(CLAIM_KINDS)}")
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must lie strictly between 0 and 0.5, got {alpha}")
    if kind in ("at_least", "equal"):
        margin = _check_margin(margin, allow_zero=(kind == "at_least"))
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or not np.isfinite(x).all():
        raise ValueError(f"contrast_test needs a non-empty 1-D array of finite per-seed values, got {x!r}")
    n, mean = x.size, float(x.mean())
    confidence = 1 - 2 * alpha if kind in ("at_least", "equal") else 1 - alpha
    result = {"effect": mean, "n": n, "df": n - 1, "confidence": confidence}
    if n < 2:
        nan = math.nan
        return {**result, "se": nan, "low": nan, "high": nan, "p_support": nan, "p_contradict": nan}
    se = float(x.std(ddof=1) / math.sqrt(n))
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1) * se)

    def up(theta):
        return _one_sided(mean, se, n - 1, theta, upper=True)

    def down(theta):
        return _one_sided(mean, se, n - 1, theta, upper=False)

    if kind == "greater":
        support, contradict = up(0.0), down(0.0)
    elif kind == "less":
        support, contradict = down(0.0), up(0.0)
    elif kind == "at_least":
        support, contradict = up(-margin), down(-margin)
    else:
        support = max(up(-margin), down(margin))
        contradict = min(1.0, 2 * min(up(margin), down(-margin)))
    return {
        **result,
        "se": se,
        "low": mean - half,
        "high": mean + half,
        "p_support": support,
        "p_contradict": contradict,
    }


def fieller_ratio(numerator: ArrayLike, denominator: ArrayLike, confidence: float = 0.95) -> dict:
    """The ratio ρ = E[a] / E[b] of two per-seed quantities paired by seed, with Fieller's interval
    (Fieller 1954): every ρ for which the per-seed values a_s − ρ·b_s have a mean the two-sided
    Student-t test at `confidence` does not reject, i.e. the ρ with

        (ā − ρ b̄)² ≤ t² (v_aa − 2ρ v_ab + ρ² v_bb),   v_xy = cov(x, y) / n,  t = t_{(1+c)/2, n−1}.

    Exact under normal per-seed errors, and honest when b̄ is small: the set is a bounded interval only
    if b̄ itself is significantly non-zero (b̄² > t² v_bb); otherwise it is unbounded (the whole line, or
    all but a gap) and `bounded` is False, low/high nan. Used for the fraction of a gap closed.
    Returns dict(ratio, low, high, bounded, n, confidence); with n < 2 only the ratio of means.
    """
    _check_confidence(confidence)
    a, b = np.asarray(numerator, dtype=np.float64), np.asarray(denominator, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError(f"fieller_ratio needs two finite 1-D arrays of the same length, got {a!r} and {b!r}")
    n, mean_a, mean_b = a.size, float(a.mean()), float(b.mean())
    result = {"ratio": mean_a / mean_b if mean_b else math.nan, "n": n, "confidence": confidence}
    if n < 2:
        return {**result, "low": math.nan, "high": math.nan, "bounded": False}
    cov = np.cov(np.stack([a, b]), ddof=1) / n
    t2 = float(stats.t.ppf((1 + confidence) / 2, n - 1)) ** 2
    # quadratic q2 ρ² − 2 q1 ρ + q0 ≤ 0
    q2, q1, q0 = mean_b**2 - t2 * cov[1, 1], mean_a * mean_b - t2 * cov[0, 1], mean_a**2 - t2 * cov[0, 0]
    disc = q1 * q1 - q0 * q2
    if q2 <= 0 or disc < 0:
        return {**result, "low": math.nan, "high": math.nan, "bounded": False}
    root = math.sqrt(disc)
    return {**result, "low": (q1 - root) / q2, "high": (q1 + root) / q2, "bounded": True}


def image_standard_error(contrast: ArrayLike) -> float:
    """Standard error (points) of the mean contrast from test-image sampling alone.

    `contrast` is (seeds, images): per image, Σ c_v · 100·correct_v of one seed's runs. Each
    seed's mean has variance var_i/n over its n images; the mean over S seeds has
    Σ_s var_s / (n S²). Compare it with the seed-level se of `contrast_test`: when the seed-level
    one is larger, training randomness dominates and an image-level interval would be too narrow.
    """
    c = np.atleast_2d(np.asarray(contrast, dtype=np.float64))
    seeds, n = c.shape
    if n < 2:
        return math.nan
    return float(math.sqrt(c.var(axis=1, ddof=1).sum() / n) / seeds)


def holm_first_step_t(tests: int, seeds: int, alpha: float = 0.05) -> float:
    """The t statistic a one-sided Student-t test over `seeds` per-seed contrasts must exceed to pass
    Holm's first step over `tests` one-sided p-values (p < α/m): t_{n−1}(1 − α/m) (Holm 1979). Later
    steps relax to α/(m − j) only after j other rejections, so below it a claim of that many seeds is
    decided only when other claims of the table were decided first."""
    if tests < 1 or seeds < 2:
        raise ValueError(f"need at least 1 test and 2 seeds, got {tests} tests and {seeds} seeds")
    return float(stats.t.isf(alpha / tests, seeds - 1))


def family_verdicts(tests: Sequence[Mapping], alpha: float = 0.05) -> list[dict]:
    """One symmetric multiplicity rule for a family of claims: Holm (1979) over all 2m one-sided
    p-values (each claim's p_support and p_contradict); supported when the adjusted p_support is
    below α, contradicted when the adjusted p_contradict is, else inconclusive. The two hypotheses
    of one claim are disjoint, so at most one of them can be rejected. Rows with nan p-values
    (fewer than two seeds) stay inconclusive and do not count towards m.
    Returns per test dict(p_support_holm, p_contradict_holm, verdict)."""
    flat = [float(t[key]) for t in tests for key in ("p_support", "p_contradict")]
    adjusted = holm(flat) if flat else []
    out = []
    for index, _ in enumerate(tests):
        support, contradict = adjusted[2 * index], adjusted[2 * index + 1]
        if support < alpha:
            verdict = SUPPORTED
        elif contradict < alpha:
            verdict = CONTRADICTED
        else:
            verdict = INCONCLUSIVE
        out.append({"p_support_holm": support, "p_contradict_holm": contradict, "verdict": verdict})
    return out
