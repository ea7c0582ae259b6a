"""The pilot's plateau rule and its generated decision."""

from __future__ import annotations

import math

from analysis.convergence import plateau_gain, plateau_met
from campaign.recipe_pilot import decision_text


def test_plateau_gain_is_the_best_validation_gain_over_the_last_fifth():
    rising = [0.80, 0.85, 0.87, 0.88, 0.885, 0.888, 0.889, 0.890, 0.893, 0.897]
    assert abs(plateau_gain(rising) - 100 * (0.897 - 0.890)) < 1e-9  # last 2 of 10 epochs
    assert not plateau_met(rising)
    flat = [0.80, 0.85, 0.87, 0.88, 0.889, 0.890, 0.891, 0.8915, 0.891, 0.8905]
    assert plateau_gain(flat) == 0.0 and plateau_met(flat)  # the best epoch lies before the window
    assert plateau_gain([0.9, 0.8, 0.85]) == 0.0  # a late dip gains nothing
    assert math.isnan(plateau_gain([0.9])) and not plateau_met([0.9])


def _row(preset, top1, gain, epochs=20, seconds=60.0, variant="softmax+ape"):
    return {
        "preset": preset,
        "variant": variant,
        "recipe": preset,
        "status": "finished",
        "epochs": epochs,
        "best epoch": epochs - 1,
        "test top-1 %": top1,
        "val gain over last 20% (points)": gain,
        "median s/epoch": seconds,
        "last train top-1 %": 92.0,
    }


def test_decision_picks_the_cheapest_recipe_that_meets_the_bar_at_a_plateau():
    rows = [_row("long", 90.6, 0.1, epochs=30), _row("short", 90.2, 0.05), _row("rising", 90.9, 0.6, epochs=10)]
    text = decision_text(rows)
    assert text.startswith("**The cheapest recipe that meets the bar: `short`.**")
    assert "still rising" in text and text.count("- `") == 3


def test_decision_falls_back_to_the_best_converged_recipe_and_states_the_distance():
    text = decision_text([_row("a", 89.4, 0.1), _row("b", 89.1, 0.0), _row("c", 89.9, 0.5)])
    assert text.startswith(
        "**No pilot recipe reaches 90 % at a plateau; the best converged one is `a` at 89.40 %, 0.60"
    )
    assert decision_text([_row("x", 85.0, 0.1)]).startswith("**No pilot recipe has reached the plateau rule at ≥ 89")
    assert decision_text([]) == "No finished `softmax+ape` pilot run yet."


def test_choice_names_the_pilot_run_of_the_chosen_recipe_and_its_longer_twin():
    from campaign.recipe_pilot import choice_text

    rows = [
        dict(_row("fmnist_pilot_flip_erase", 90.11, 0.62, epochs=26), **{"seed": 0}),
        dict(_row("fmnist_pilot_flip_erase_long", 91.01, 0.24, epochs=40), **{"seed": 0}),
        dict(_row("fmnist_pilot_flip", 89.81, 0.48, epochs=24), **{"seed": 0}),  # another recipe: not named
    ]
    text = choice_text(rows, "fmnist_converged")
    assert text.startswith("`fmnist_converged` trains the recipe of `fmnist_pilot_flip_erase` (26 epochs)")
    assert "over 40 epochs (`fmnist_pilot_flip_erase_long`) reached 91.01 % (+0.90 points" in text
    assert "fmnist_pilot_flip`" not in text.replace("fmnist_pilot_flip_erase", "")
