"""Robust statistics over timing samples: median, IQR, geometric mean."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from aka.bench.result import LatencyStats

__all__ = ["geomean", "iqr", "latency_stats", "median", "quantile"]


def median(values: Sequence[float]) -> float:
    """Return the median; raises ValueError on an empty sequence."""
    if not values:
        raise ValueError("median of no samples")
    return float(statistics.median(values))


def quantile(values: Sequence[float], q: float) -> float:
    """Return the ``q`` quantile (0..1, linear interpolation); raises ValueError when empty."""
    if not values:
        raise ValueError("quantile of no samples")
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))


def iqr(values: Sequence[float]) -> float:
    """Return the inter-quartile range (Q3 - Q1), 0 for fewer than 2 samples."""
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return float(q[2] - q[0])


def latency_stats(samples_us: Sequence[float]) -> LatencyStats:
    """Summarise samples (microseconds) as median, IQR and count."""
    return LatencyStats(median=median(samples_us), iqr=iqr(samples_us), n=len(samples_us))


def geomean(values: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """Weighted geometric mean of positive values; 0 if any value is 0; raises on empty input."""
    if not values:
        raise ValueError("geometric mean of nothing")
    w = list(weights) if weights is not None else [1.0] * len(values)
    if any(v <= 0 for v in values):
        return 0.0
    total = sum(w)
    if total <= 0:
        raise ValueError("weights sum to zero")
    return math.exp(sum(wi * math.log(v) for v, wi in zip(values, w, strict=True)) / total)
