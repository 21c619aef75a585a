"""Paired task bootstrap (docs/PROTOCOL.md §13): resample tasks, the same indices for both arms."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, n_resamples: int = 10_000, seed: int = 0,
                     confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean of a - b, lower, upper): a percentile bootstrap of the mean paired difference.

    `a[i]` and `b[i]` are the two arms' results on task i; each resample draws tasks with
    replacement and takes both arms' results on the drawn tasks. Vectorized: one index matrix
    [n_resamples, n_tasks]. Identical arms give (0.0, 0.0, 0.0).
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0:
        raise ValueError(f"paired_bootstrap: need two equal-length, non-empty 1-D samples "
                         f"(got {x.shape} and {y.shape})")
    if not 0 < confidence < 1 or n_resamples < 1:
        raise ValueError(f"paired_bootstrap: confidence {confidence} must lie in (0, 1) and "
                         f"n_resamples {n_resamples} be >= 1")
    diff = x - y
    if not diff.any():
        return 0.0, 0.0, 0.0
    idx = np.random.default_rng(seed).integers(0, diff.size, size=(n_resamples, diff.size))
    means = diff[idx].mean(axis=1)
    alpha = (1 - confidence) / 2
    lower, upper = np.percentile(means, [100 * alpha, 100 * (1 - alpha)])
    return float(diff.mean()), float(lower), float(upper)


def minimum_detectable_effect(a: Sequence[float], b: Sequence[float], *, confidence: float = 0.95,
                              power: float = 0.8) -> float:
    """The smallest true mean paired difference that the comparison's two-sided `confidence`
    interval excludes 0 for with probability `power`, under the normal approximation and the
    observed spread of the paired differences: (z[1 - alpha/2] + z[power]) * sd(a - b) / sqrt(n).

    With binary outcomes sd(a - b) <= sqrt(share of discordant tasks), so the figure is a planning
    value for this number of tasks at this arm's spread, not a property of the true effect."""
    from statistics import NormalDist

    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if diff.ndim != 1 or diff.size < 2:
        raise ValueError(f"minimum_detectable_effect: need two equal-length 1-D samples of >= 2 (got {diff.shape})")
    z = NormalDist().inv_cdf
    return float((z(1 - (1 - confidence) / 2) + z(power)) * diff.std(ddof=1) / np.sqrt(diff.size))
