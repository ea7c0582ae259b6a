"""rpevit.stats on synthetic predictions whose answer is known; every random draw is seeded."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from rpevit import stats

N_IMAGES = 10_000


def _planted_pair(
    rng: np.random.Generator,
    base_accuracy: float = 0.88,
    gained: float = 0.03,
    lost: float = 0.01,
    n_images: int = N_IMAGES,
) -> tuple[np.ndarray, np.ndarray]:
    """b right on a random `base_accuracy` of the images; a = b, then a fraction `gained` of all
    images flipped wrong -> right and `lost` flipped right -> wrong (net +2 points by default,
    with discordant pairs in both directions as between two real models)."""
    b = np.zeros(n_images, dtype=bool)
    b[rng.permutation(n_images)[: round(base_accuracy * n_images)]] = True
    a = b.copy()
    a[rng.permutation(np.flatnonzero(~b))[: round(gained * n_images)]] = True
    a[rng.permutation(np.flatnonzero(b))[: round(lost * n_images)]] = False
    return a, b


# --------------------------------------------------------------------------- identical models


def test_identical_models_show_no_difference_with_one_seed():
    correct = np.random.default_rng(0).random(N_IMAGES) < 0.9
    result = stats.paired_difference(correct, correct.copy())
    assert result["effect"] == 0.0
    assert result["low"] <= 0.0 <= result["high"]
    assert result["p_value"] == 1.0
    assert result["test"] == "mcnemar_exact"
    assert (result["n_seeds"], result["n_images"]) == (1, N_IMAGES)
    assert (
        stats.verdict("greater", result["effect"], result["low"], result["high"], result["p_value"]) == "inconclusive"
    )
    equal = stats.paired_equivalence(correct, correct.copy(), margin=1.0)
    assert equal["equivalent"] is True
    assert (
        stats.verdict("equal", equal["effect"], equal["low"], equal["high"], result["p_value"], margin=1.0)
        == "supported"
    )


def test_identical_models_show_no_difference_with_three_seeds():
    correct = np.random.default_rng(1).random((3, 2_000)) < 0.9
    result = stats.paired_difference(correct, correct.copy(), n_resamples=500)
    assert result["effect"] == 0.0 and result["low"] <= 0.0 <= result["high"]
    assert result["p_value"] == 1.0 and result["test"] == "bootstrap"


def test_close_models_are_equivalent_within_one_point_but_not_within_a_tenth():
    a, b = _planted_pair(np.random.default_rng(2), gained=0.012, lost=0.010)  # +0.2 points
    assert stats.paired_equivalence(a, b, margin=1.0)["equivalent"] is True
    assert stats.paired_equivalence(a, b, margin=0.1)["equivalent"] is False


# --------------------------------------------------------------------------- planted difference


def test_planted_two_point_difference_is_detected_with_one_seed():
    a, b = _planted_pair(np.random.default_rng(3))
    result = stats.paired_difference(a, b)
    assert result["effect"] == pytest.approx(2.0)
    assert result["p_value"] < 0.05 and result["test"] == "mcnemar_exact"
    assert 0.0 < result["low"] < 2.0 < result["high"]
    assert stats.verdict("greater", result["effect"], result["low"], result["high"], result["p_value"]) == "supported"
    assert stats.verdict("less", result["effect"], result["low"], result["high"], result["p_value"]) == "contradicted"
    equal = stats.paired_equivalence(a, b, margin=1.0)
    assert equal["equivalent"] is False
    assert (
        stats.verdict("equal", equal["effect"], equal["low"], equal["high"], result["p_value"], margin=1.0)
        == "contradicted"
    )


def test_planted_two_point_difference_is_detected_with_three_seeds():
    rng = np.random.default_rng(4)
    # Per-seed effects of 1.8, 2.0 and 2.2 points, base accuracies 87.5 %, 88 %, 88.5 %.
    pairs = [
        _planted_pair(rng, base_accuracy=base, gained=0.01 + effect / 100, lost=0.01)
        for base, effect in [(0.875, 1.8), (0.88, 2.0), (0.885, 2.2)]
    ]
    a = np.stack([pair[0] for pair in pairs])
    b = np.stack([pair[1] for pair in pairs])
    result = stats.paired_difference(a, b)
    assert result["effect"] == pytest.approx(2.0)
    assert result["test"] == "bootstrap" and result["n_seeds"] == 3
    assert result["p_value"] < 0.05
    assert 0.0 < result["low"] < 2.0 < result["high"]
    assert stats.verdict("greater", result["effect"], result["low"], result["high"], result["p_value"]) == "supported"


def test_seed_resampling_widens_the_interval_when_seeds_disagree():
    rng = np.random.default_rng(5)
    # Seeds with effects of 0, 2 and 4 points: image resampling alone would miss that spread.
    pairs = [_planted_pair(rng, gained=0.01 + effect / 100, lost=0.01, n_images=5_000) for effect in (0, 2, 4)]
    a = np.stack([pair[0] for pair in pairs])
    b = np.stack([pair[1] for pair in pairs])
    across_seeds = stats.paired_difference(a, b, n_resamples=1000)
    one_seed = stats.paired_difference(a[1], b[1], n_resamples=1000)
    assert across_seeds["effect"] == pytest.approx(2.0) and one_seed["effect"] == pytest.approx(2.0)
    width_across = across_seeds["high"] - across_seeds["low"]
    width_one = one_seed["high"] - one_seed["low"]
    assert width_across > 2 * width_one
    assert across_seeds["high"] > 3.0 and across_seeds["low"] < 1.0


def test_paired_difference_is_deterministic_for_a_seed_and_uses_it():
    a, b = _planted_pair(np.random.default_rng(6), n_images=2_000)
    first = stats.paired_difference(a, b, n_resamples=300, seed=7)
    assert stats.paired_difference(a, b, n_resamples=300, seed=7) == first
    assert stats.paired_difference(a, b, n_resamples=300, seed=8)["low"] != first["low"]


# --------------------------------------------------------------------------- coverage by simulation


def test_t_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(10)
    samples = rng.normal(loc=70.0, scale=2.0, size=(2000, 3))
    covered = [interval["low"] <= 70.0 <= interval["high"] for interval in map(stats.t_interval, samples)]
    # Binomial sd at 2000 draws is 0.005; a normal (z) interval would cover only ~0.81 with n=3.
    assert 0.93 <= np.mean(covered) <= 0.97


def test_bootstrap_accuracy_covers_the_true_accuracy():
    rng = np.random.default_rng(11)
    true_accuracy = 0.9
    test_sets = rng.random((200, 1_000)) < true_accuracy
    intervals = [stats.bootstrap_accuracy(correct, n_resamples=1000, seed=i) for i, correct in enumerate(test_sets)]
    coverage = np.mean([interval["low"] <= true_accuracy <= interval["high"] for interval in intervals])
    assert 0.92 <= coverage <= 0.99
    # The interval width matches the binomial standard error: 2 * 1.96 * sqrt(p(1-p)/n) ~ 0.037.
    widths = [interval["high"] - interval["low"] for interval in intervals]
    assert np.mean(widths) == pytest.approx(2 * 1.96 * math.sqrt(0.09 / 1_000), rel=0.1)


# --------------------------------------------------------------------------- single-variant summaries


def test_t_interval_by_hand_and_single_value():
    result = stats.t_interval([1.0, 2.0, 3.0])
    half_width = 4.302652729911275 * 1.0 / math.sqrt(3)  # t_{0.975, 2} * s / sqrt(n)
    assert result == pytest.approx({"mean": 2.0, "low": 2.0 - half_width, "high": 2.0 + half_width, "n": 3})
    single = stats.t_interval([5.0])
    assert single["mean"] == 5.0 and single["n"] == 1
    assert math.isnan(single["low"]) and math.isnan(single["high"])


def test_mean_ci_table_rows():
    rows = stats.mean_ci_table({"softmax": [80.0, 82.0, 84.0], "performer": [75.0]})
    assert [row["group"] for row in rows] == ["softmax", "performer"]
    assert rows[0]["mean"] == pytest.approx(82.0) and rows[0]["std"] == pytest.approx(2.0)
    assert rows[0]["low"] < 82.0 < rows[0]["high"] and rows[0]["n"] == 3
    assert rows[1]["mean"] == 75.0 and math.isnan(rows[1]["std"]) and math.isnan(rows[1]["low"])


def test_bootstrap_accuracy_of_a_perfect_run_is_a_point():
    result = stats.bootstrap_accuracy(np.ones(500, dtype=bool), n_resamples=200)
    assert result == {"estimate": 1.0, "low": 1.0, "high": 1.0}


# --------------------------------------------------------------------------- McNemar and Holm


def test_mcnemar_matches_binomtest_on_a_known_table():
    # 15 images only a gets right, 5 only b, 70 both, 10 neither.
    a = np.array([1] * 15 + [0] * 5 + [1] * 70 + [0] * 10)
    b = np.array([0] * 15 + [1] * 5 + [1] * 70 + [0] * 10)
    result = stats.mcnemar_exact(a, b)
    assert (result["a_only"], result["b_only"]) == (15, 5)
    assert result["p_value"] == pytest.approx(scipy_stats.binomtest(15, 20, 0.5).pvalue)
    # By hand: 2 * sum_{k>=15} C(20, k) / 2^20 = 2 * 21700 / 1048576.
    assert result["p_value"] == pytest.approx(2 * 21700 / 2**20)
    assert stats.paired_difference(a, b)["p_value"] == pytest.approx(result["p_value"])


def test_holm_against_hand_computed_values():
    # Sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> running max 0.06.
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.6, 0.7]) == [1.0, 1.0]
    adjusted = stats.holm([0.5, math.nan, 0.4])  # m = 2: 0.8, then max(0.5, 0.8)
    assert adjusted[0] == pytest.approx(0.8) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.8)
    assert stats.holm([]) == []
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        stats.holm([0.2, 1.5])


# --------------------------------------------------------------------------- equivalence and verdicts


@pytest.mark.parametrize(
    "low, high, margin, expected",
    [
        (-0.5, 0.8, 1.0, True),
        (-0.99, 0.99, 1.0, True),
        (-0.5, 1.0, 1.0, False),  # touching the margin is not inside it
        (-1.2, 0.3, 1.0, False),
        (1.5, 2.5, 1.0, False),
        (math.nan, 0.5, 1.0, False),
    ],
)
def test_equivalence(low, high, margin, expected):
    assert stats.equivalence(low, high, margin) is expected


@pytest.mark.parametrize(
    "kind, effect, low, high, p, margin, expected",
    [
        ("greater", 2.0, 1.5, 2.5, 0.001, None, "supported"),
        ("greater", -2.0, -2.5, -1.5, 0.001, None, "contradicted"),
        ("greater", 2.0, -0.1, 4.1, 0.08, None, "inconclusive"),
        ("greater", 2.0, 1.5, 2.5, math.nan, None, "inconclusive"),
        ("less", -2.0, -2.5, -1.5, 0.001, None, "supported"),
        ("less", 2.0, 1.5, 2.5, 0.001, None, "contradicted"),
        ("less", -0.5, -1.5, 0.5, 0.3, None, "inconclusive"),
        ("at_least", -0.3, -0.8, 0.2, 0.4, 1.0, "supported"),  # non-inferior within 1 point
        ("at_least", 1.0, 0.5, 1.5, 0.001, 0.0, "supported"),  # zero margin: needs low > 0
        ("at_least", -3.0, -3.5, -2.5, 0.001, 1.0, "contradicted"),
        ("at_least", -3.0, -3.5, -2.5, 0.2, 1.0, "inconclusive"),  # not significant after Holm
        ("at_least", -0.8, -1.2, -0.4, 0.01, 1.0, "inconclusive"),  # worse, but maybe within margin
        ("equal", 0.1, -0.4, 0.6, 0.7, 1.0, "supported"),
        ("equal", 0.1, -1.4, 1.6, 0.9, 1.0, "inconclusive"),
        ("equal", 2.0, 1.5, 2.5, 0.001, 1.0, "contradicted"),
        ("equal", -2.0, -2.5, -1.5, 0.001, 1.0, "contradicted"),
        ("equal", 1.2, 0.7, 1.7, 0.001, 1.0, "inconclusive"),  # significant but straddles the margin
        ("equal", 2.0, 1.5, 2.5, 0.2, 1.0, "inconclusive"),  # outside the band, not significant after Holm
    ],
)
def test_verdict_table(kind, effect, low, high, p, margin, expected):
    assert stats.verdict(kind, effect, low, high, p, alpha=0.05, margin=margin) == expected


def test_verdict_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown claim kind 'better'"):
        stats.verdict("better", 1.0, 0.5, 1.5, 0.01)
    with pytest.raises(ValueError, match="margin"):
        stats.verdict("equal", 0.0, -0.5, 0.5, 1.0)
    with pytest.raises(ValueError, match="margin"):
        stats.verdict("equal", 0.0, -0.5, 0.5, 1.0, margin=0.0)
    with pytest.raises(ValueError, match="low"):
        stats.verdict("greater", 1.0, 2.0, 0.5, 0.01)


# --------------------------------------------------------------------------- input validation


def test_mismatched_shapes_are_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match=r"same shape.*\(3, 100\) and \(3, 99\)"):
        stats.paired_difference(np.ones((3, 100)), np.ones((3, 99)))
    with pytest.raises(ValueError, match="same shape"):
        stats.paired_equivalence(np.ones(100), np.ones((2, 100)), margin=1.0)
    with pytest.raises(ValueError, match="same shape"):
        stats.mcnemar_exact(np.ones(10), np.ones(11))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: stats.paired_difference(np.ones((2, 3, 4)), np.ones((2, 3, 4))), "1-D .* or 2-D"),
        (lambda: stats.paired_difference(np.array([0, 1, 2]), np.array([0, 1, 1])), "0/1"),
        (lambda: stats.paired_difference(np.array([]), np.array([])), "empty"),
        (lambda: stats.paired_difference(np.ones(5), np.ones(5), confidence=95), "confidence"),
        (lambda: stats.paired_difference(np.ones(5), np.ones(5), n_resamples=0), "n_resamples"),
        (lambda: stats.paired_equivalence(np.ones(5), np.ones(5), margin=1.0, alpha=0.5), "alpha"),
        (lambda: stats.bootstrap_accuracy(np.ones((2, 5))), "1-D"),
        (lambda: stats.bootstrap_accuracy(np.array([0.5, 1.0])), "0/1"),
        (lambda: stats.t_interval([]), "non-empty"),
        (lambda: stats.t_interval([1.0, math.nan]), "non-finite"),
        (lambda: stats.equivalence(-0.5, 0.5, -1.0), "margin"),
    ],
)
def test_invalid_inputs_are_rejected(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_time_ratio_finds_a_planted_slowdown_and_covers_it():
    """Log-normal timings, a 1.5× slower: the interval covers 1.5 about 95% of the time and excludes 1."""
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(400):
        b = np.exp(rng.normal(0.0, 0.1, 6))
        a = 1.5 * np.exp(rng.normal(0.0, 0.1, 6))
        result = stats.time_ratio(a, b)
        covered += result["low"] <= 1.5 <= result["high"]
    assert 0.92 <= covered / 400 <= 0.98
    assert result["low"] > 1 and result["p"] < 1e-4 and math.isclose(result["ratio"], 1.5, rel_tol=0.15)


def test_time_ratio_of_equal_timings_is_undecided_and_needs_two_timings():
    rng = np.random.default_rng(4)
    same = stats.time_ratio(np.exp(rng.normal(0, 0.1, 8)), np.exp(rng.normal(0, 0.1, 8)))
    assert same["low"] < 1 < same["high"]
    with pytest.raises(ValueError, match="two or more"):
        stats.time_ratio([1.0], [1.0, 1.1])
    with pytest.raises(ValueError, match="positive"):
        stats.time_ratio([1.0, 0.0], [1.0, 1.1])
