"""Statistics that turn run records into claims with verdicts.

Design, in short:

* Per variant, accuracy over training seeds is summarised by its mean and a Student-t interval
  (`t_interval`, `mean_ci_table`); each single run also gets a test-set bootstrap interval of
  its accuracy (`bootstrap_accuracy`, percentile bootstrap via `scipy.stats.bootstrap`).
* Two variants are compared *paired*: on the same training seeds and the same test images
  (`paired_difference`). The effect is the accuracy difference a - b in percentage points. Its
  interval is a percentile bootstrap over a crossed seeds x images design: each replicate draws
  seeds with replacement and, independently, test images with replacement, the same image
  indices for a and b and for every seed, so the interval reflects both test-set sampling and
  training randomness. The p-value is the exact McNemar test with one seed, and the bootstrap
  p-value (the inverted percentile interval) with two or more seeds.
* A family of comparisons in one table is corrected with Holm's step-down method (`holm`).
* Equality claims are equivalence tests within a margin fixed in advance (TOST, Schuirmann
  1987): supported only when the whole (1 - 2 alpha) interval lies inside (-margin, +margin)
  (`equivalence`, `paired_equivalence`). `verdict` maps a claim kind and its numbers to
  "supported", "contradicted" or "inconclusive".

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
    half_width = stats.t.ppf((1 + confidence) / 2, df=n - 1) * x.std(ddof=1) / math.sqrt(n)
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


def _bootstrap_resample_counts(rng: np.random.Generator, batch: int, n: int) -> np.ndarray:
    """(batch, n) float counts: how often each of n items appears in each resample of size n."""
    indices = rng.integers(0, n, size=(batch, n)) + n * np.arange(batch)[:, None]
    return np.bincount(indices.ravel(), minlength=batch * n).reshape(batch, n).astype(np.float64)


def _paired_bootstrap_effects(difference: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Bootstrap replicates of 100 * mean(difference) over a crossed (seeds, images) design.

    Each replicate draws seeds with replacement (weights w, summing to S) and, independently,
    images with replacement (counts c, summing to n), the image draw shared by every seed. The
    replicate is 100 * sum_s sum_i w_s c_i d[s, i] / (S n). With one seed w = 1 and this is the
    ordinary paired bootstrap over test images.
    """
    n_seeds, n_images = difference.shape
    rng = np.random.default_rng(seed)
    batch = max(1, _BOOTSTRAP_BATCH_ELEMENTS // n_images)
    effects = np.empty(n_resamples)
    for start in range(0, n_resamples, batch):
        size = min(batch, n_resamples - start)
        seed_weights = _bootstrap_resample_counts(rng, size, n_seeds)
        image_counts = _bootstrap_resample_counts(rng, size, n_images)
        per_seed = image_counts @ difference.T  # (size, seeds)
        effects[start : start + size] = (per_seed * seed_weights).sum(axis=1)
    return 100.0 * effects / (n_seeds * n_images)


def _percentile_interval(effects: np.ndarray, confidence: float) -> tuple[float, float]:
    low, high = np.quantile(effects, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


def _bootstrap_p_value(effects: np.ndarray) -> float:
    """Two-sided p of 'effect = 0' from the inverted percentile interval.

    2 * min(fraction of replicates <= 0, fraction >= 0), floored at 1/(B + 1) and capped at 1:
    roughly the smallest alpha at which the (1 - alpha) percentile interval excludes 0.
    """
    fraction_low = np.mean(effects <= 0)
    fraction_high = np.mean(effects >= 0)
    return float(min(1.0, max(2 * min(fraction_low, fraction_high), 1 / (effects.size + 1))))


def paired_difference(
    correct_a: ArrayLike, correct_b: ArrayLike, confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0
) -> dict[str, float | int | str]:
    """Paired comparison of two variants on the same seeds and the same test images.

    correct_a, correct_b: bool/0-1 arrays of shape (seeds, images), row s of both trained with
    seed s, column i the same test image (1-D: one seed).

    * effect: mean accuracy of a minus b, in percentage points (accuracy x 100).
    * low/high: percentile bootstrap interval (Efron & Tibshirani) at `confidence`. Each replicate
      resamples test images with replacement, the same image indices for a and b and for every
      seed; with >= 2 seeds it also resamples seeds with replacement (crossed two-factor
      bootstrap), so the interval carries training randomness as well as test-set sampling.
      Resampling both factors counts the seed x image interaction twice, so the interval errs
      wide (in simulation with fully independent per-seed errors, 3 seeds: ~99 % coverage at
      nominal 95 %); with few seeds the seed part is coarse (3 seeds: 10 distinct draws).
    * p_value / test: one seed -> "mcnemar_exact" (McNemar 1947, exact binomial on discordant
      pairs); >= 2 seeds -> "bootstrap" (2 * min(P*(effect* <= 0), P*(effect* >= 0)), floored
      at 1/(n_resamples + 1)), the p-value that matches the interval. McNemar is not used with
      several seeds because pooling seeds would treat training randomness as absent.

    Returns dict(effect, low, high, p_value, test, n_seeds, n_images). Deterministic for a seed.
    """
    _check_confidence(confidence)
    n_resamples = _check_resamples(n_resamples)
    a, b = _paired_correctness(correct_a, correct_b)
    n_seeds, n_images = a.shape
    difference = a - b
    effects = _paired_bootstrap_effects(difference, n_resamples, seed)
    low, high = _percentile_interval(effects, confidence)
    if n_seeds == 1:
        p_value, test = float(mcnemar_exact(a, b)["p_value"]), "mcnemar_exact"
    else:
        p_value, test = _bootstrap_p_value(effects), "bootstrap"
    return {
        "effect": float(100.0 * difference.mean()),
        "low": low,
        "high": high,
        "p_value": p_value,
        "test": test,
        "n_seeds": n_seeds,
        "n_images": n_images,
    }


def equivalence(low: float, high: float, margin: float) -> bool:
    """True when the interval [low, high] lies strictly inside (-margin, +margin).

    With the (1 - 2 alpha) interval this is the two one-sided tests procedure (TOST, Schuirmann
    1987) at level alpha: both 'effect <= -margin' and 'effect >= +margin' are rejected.
    A nan bound gives False.
    """
    margin = _check_margin(margin)
    return bool(-margin < low <= high < margin)


def paired_equivalence(
    correct_a: ArrayLike,
    correct_b: ArrayLike,
    margin: float,
    alpha: float = 0.05,
    n_resamples: int = 2000,
    seed: int = 0,
) -> dict[str, float | bool]:
    """Equivalence of two variants within +-margin points (TOST, Schuirmann 1987).

    Uses the (1 - 2 alpha) interval of `paired_difference` (same bootstrap, same arguments);
    equivalent = that interval lies inside (-margin, +margin). The margin must be chosen before
    looking at the results. Returns dict(effect, low, high, margin, equivalent).
    """
    margin = _check_margin(margin)
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must lie strictly between 0 and 0.5, got {alpha}")
    result = paired_difference(correct_a, correct_b, confidence=1 - 2 * alpha, n_resamples=n_resamples, seed=seed)
    return {
        "effect": result["effect"],
        "low": result["low"],
        "high": result["high"],
        "margin": margin,
        "equivalent": equivalence(result["low"], result["high"], margin),
    }


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


def verdict(
    kind: str,
    effect: float,
    low: float,
    high: float,
    p_adjusted: float,
    alpha: float = 0.05,
    margin: float | None = None,
) -> str:
    """ "supported", "contradicted" or "inconclusive" for a claim about a versus b.

    effect/low/high are in points (a - b, as from `paired_difference`); p_adjusted is the
    Holm-adjusted two-sided p-value of 'no difference'; "significant" means p_adjusted < alpha.
    For "at_least" and "equal" pass the (1 - 2 alpha) interval (as `paired_equivalence` gives),
    so that a bound beyond the margin is a one-sided test at level alpha; those two kinds need a
    margin (points, fixed in advance; "at_least" accepts 0, "equal" needs > 0).

    ========  ===============================  =====================================  ==============
    kind      supported                        contradicted                           else
    ========  ===============================  =====================================  ==============
    greater   significant and effect > 0       significant and effect < 0             inconclusive
    less      significant and effect < 0       significant and effect > 0             inconclusive
    at_least  low > -margin (non-inferior,     significant and high < -margin (a is   inconclusive
              a >= b - margin)                 worse than b by more than the margin)
    equal     -margin < low and high < margin  significant and (low > margin or       inconclusive
              (equivalent, TOST)               high < -margin): outside the band
    ========  ===============================  =====================================  ==============

    "greater"/"less" do not use low/high; a nan number makes its rule false (inconclusive).
    For "at_least"/"equal" the interval is not Holm-adjusted: widen it (e.g. confidence
    1 - 2 alpha/m) if those claims form a family.
    """
    if kind not in CLAIM_KINDS:
        raise ValueError(f"unknown claim kind {kind!r}; expected one of {', '.join(CLAIM_KINDS)}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha}")
    if low > high:
        raise ValueError(f"interval low ({low}) is above high ({high})")
    significant = p_adjusted < alpha
    if kind in ("greater", "less"):
        sign = 1.0 if kind == "greater" else -1.0
        if significant and sign * effect > 0:
            return SUPPORTED
        if significant and sign * effect < 0:
            return CONTRADICTED
        return INCONCLUSIVE
    margin = _check_margin(margin, allow_zero=(kind == "at_least"))
    if kind == "at_least":
        if low > -margin:
            return SUPPORTED
        if significant and high < -margin:
            return CONTRADICTED
        return INCONCLUSIVE
    if -margin < low and high < margin:
        return SUPPORTED
    if significant and (low > margin or high < -margin):
        return CONTRADICTED
    return INCONCLUSIVE
