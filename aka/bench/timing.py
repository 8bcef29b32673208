"""Stage 5's judgement, in the parent: turn a worker's raw samples into times and flags.

Owns the ``timing_mismatch`` rule (ARCHITECTURE.md §4 stage 5): a device-wide window longer than the
stream window by more than the empty call's gap + max(5 us, 10% of T) means work escaped the
launching stream (a side stream, deferred work). Gaps are compared at a low quantile of the samples
(``GAP_QUANTILE``), not the median, so that interference in some samples does not count. The empty
call's gap is the one timed between the shape's own samples (``worker_timing._sample_paired``,
``performance.shape_empty_gap``): the gap is mostly the host's wake-up from the synchronize, which
drifts by several microseconds over a worker's life on a shared machine, so a baseline taken only
at the worker's start falsely failed honest microsecond kernels on the H200.
"""

from __future__ import annotations

from dataclasses import dataclass

from aka.bench.result import LatencyStats
from aka.bench.stats import latency_stats, quantile

__all__ = ["GAP_QUANTILE", "SPREAD_K", "WindowVerdict", "judge_windows"]

#: The gap between the windows is judged at this quantile of the samples, for the candidate and the
#: empty call alike: work left on a side stream widens every sample's gap, while another process
#: sharing the GPU (or a late host wake-up) widens only some, and must not fail an honest kernel.
GAP_QUANTILE = 0.2

#: The allowance is at least this many interquartile ranges of the empty call's gaps timed beside
#: the candidate's: when the host's wake-up is noisy (the H200's empty gap went from 11 to 19 us at
#: its 20th percentile while other jobs ran), a fixed 5 us falsely failed an honest kernel.
SPREAD_K = 2.0


@dataclass(frozen=True)
class WindowVerdict:
    """Statistics of one timed callable and whether its two windows disagree."""

    stream: LatencyStats
    device: LatencyStats
    gap_us: float
    allowed_gap_us: float
    mismatch: bool


def judge_windows(
    stream_us: list[float],
    device_us: list[float],
    *,
    empty_gap_us: float,
    abs_us: float,
    rel: float,
    empty_spread_us: float = 0.0,
) -> WindowVerdict:
    """Compute stream/device-window statistics and apply the mismatch rule.

    Args:
        stream_us: Per-sample stream windows.
        device_us: Per-sample device-wide windows (same samples).
        empty_gap_us: (device - stream) of the empty kernel at ``GAP_QUANTILE``, measured the
            same way.
        abs_us: The absolute allowance (5 us by default).
        rel: The relative allowance (10% of T by default).
        empty_spread_us: Interquartile range of the empty call's gaps timed beside these samples;
            the allowance is at least ``SPREAD_K`` times it (0: not measured).
    """
    stream, device = latency_stats(stream_us), latency_stats(device_us)
    gap = quantile([d - s for s, d in zip(stream_us, device_us, strict=True)], GAP_QUANTILE)
    allowed = empty_gap_us + max(abs_us, rel * stream.median, SPREAD_K * empty_spread_us)
    return WindowVerdict(
        stream=stream, device=device, gap_us=gap, allowed_gap_us=allowed, mismatch=gap > allowed
    )
