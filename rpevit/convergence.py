"""Has a run converged? The plateau rule of the converged study (issue 18): the best validation top-1
gains less than `tolerance` points over the last `fraction` of the epochs."""

from __future__ import annotations

import math

PLATEAU_FRACTION = 0.2
PLATEAU_TOLERANCE = 0.2  # points of validation top-1


def plateau_gain(val_acc: list[float], fraction: float = PLATEAU_FRACTION) -> float:
    """Points the best validation top-1 gained over the last ⌈fraction · epochs⌉ epochs:
    100 · (best over all epochs − best before that window). nan with fewer than two epochs."""
    epochs = len(val_acc)
    if epochs < 2:
        return math.nan
    window = max(1, math.ceil(fraction * epochs))
    if window >= epochs:
        window = epochs - 1
    return 100 * (max(val_acc) - max(val_acc[:-window]))


def plateau_met(val_acc: list[float], tolerance: float = PLATEAU_TOLERANCE, fraction: float = PLATEAU_FRACTION) -> bool:
    """True when the best validation top-1 gained less than `tolerance` points over the last epochs."""
    gain = plateau_gain(val_acc, fraction)
    return math.isfinite(gain) and gain < tolerance
