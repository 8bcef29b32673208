"""The one low-level CUDA timing primitive (ARCHITECTURE.md §4, stage 5).

Owns ``sample_windows`` (raw per-call stream and device-wide windows between CUDA events), the L2
flusher and the empty-kernel call whose median window is the launch floor. ``aka.hardware.ceilings``
and the scorer (``aka.bench``) both build on it, so both measure the same way.

Must not compute statistics or verdicts (the scorer's ``stats`` does) and must not import torch or
triton at module level: only the functions need CUDA.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

__all__ = ["WindowSamples", "empty_kernel_fn", "make_l2_flusher", "sample_windows"]


@dataclass(frozen=True)
class WindowSamples:
    """Raw per-call samples in microseconds, one entry per timed call, in call order.

    Attributes:
        stream_us: Window on the launching stream: start event recorded after the L2 flush, end
            event recorded right after ``fn`` returns.
        device_us: From the same start event to an event recorded after
            ``torch.cuda.synchronize()``: the device-wide window, which also covers work ``fn``
            left on other streams.
        host_us: Host wall-clock (``time.perf_counter``) from just before the start event to
            after the device-end event completed: a cross-check on the device's clocks (it covers
            the flush's tail and the host lead too, so it is never shorter than ``device_us``).
    """

    stream_us: list[float]
    device_us: list[float]
    host_us: list[float] = field(default_factory=list)


def sample_windows(
    fn: Callable[[int], object],
    *,
    n_samples: int,
    flush: Callable[[], None] | None,
    warmup_s: float = 0.05,
    budget_s: float | None = None,
    min_samples: int | None = None,
) -> WindowSamples:
    """Time ``fn`` call by call on the current CUDA stream.

    Warm-up runs ``flush(); fn(k); synchronize`` until ``warmup_s`` of wall time has passed (at
    least one call). Then each sample is: ``flush()``; start event; ``fn(i)``; end event;
    ``torch.cuda.synchronize()``; device-end event; wait for it.

    Args:
        fn: The call to time; gets the sample index (callers rotate input sets with it).
        n_samples: The most samples to take.
        flush: Called before each call outside the windows' start (e.g. an L2 flusher); None for
            a warm cache.
        warmup_s: Wall seconds of untimed calls first.
        budget_s: Wall seconds for the timed samples (warm-up excluded); None for no limit.
        min_samples: Samples to take even when ``budget_s`` is spent; None means 1.

    Returns:
        The stream and device-wide windows of each timed call, in microseconds.

    Raises:
        ValueError: ``n_samples`` < 1, ``min_samples`` outside 1..n_samples, or a negative time.
    """
    import torch

    floor = _check_sampling_args(n_samples, warmup_s, budget_s, min_samples)
    stream = torch.cuda.current_stream()
    _warm_up(fn, flush, warmup_s)
    # Events are created before the loop so that their allocation never sits inside a window.
    events = [_event_triple() for _ in range(n_samples)]
    taken = 0
    host_us: list[float] = []
    started_s = time.perf_counter()
    for i, (start, end, device_end) in enumerate(events):
        if budget_s is not None and taken >= floor and time.perf_counter() - started_s >= budget_s:
            break
        if flush is not None:
            flush()
        host_start = time.perf_counter()
        start.record(stream)
        fn(i)
        end.record(stream)
        torch.cuda.synchronize()
        device_end.record(stream)
        device_end.synchronize()
        host_us.append((time.perf_counter() - host_start) * 1e6)
        taken += 1
    done = events[:taken]
    return WindowSamples(
        stream_us=[s.elapsed_time(e) * 1000.0 for s, e, _ in done],
        device_us=[s.elapsed_time(d) * 1000.0 for s, _, d in done],
        host_us=host_us,
    )


def make_l2_flusher(
    l2_bytes: int,
    factor: float = 2.0,
    device: torch.device | str | None = None,
    mode: Literal["read", "write"] = "read",
) -> Callable[[], None]:
    """Allocate a buffer of ``factor`` x L2 once; return a closure that evicts L2 through it.

    ``read`` (default) sums the buffer: L2 is left holding clean lines, so the timed kernel pays
    no write-back of the flush's data (as with Nsight Compute's cache invalidation). ``write``
    zeroes it, leaving dirty lines the next kernel must write back. Either runs on the current
    stream, so it is ordered before the next timed call.

    Args:
        l2_bytes: L2 size of the device (``DeviceInfo.l2_bytes``).
        factor: Buffer size as a multiple of L2; 2 evicts everything an LRU-like L2 held.
        device: Where to allocate; None means the current CUDA device.
        mode: Evict by reading (clean L2) or by writing (dirty L2).

    Returns:
        A function that evicts L2 when called.

    Raises:
        ValueError: ``l2_bytes`` or ``factor`` is not positive.
    """
    import torch

    if l2_bytes <= 0 or factor <= 0:
        raise ValueError(f"l2_bytes ({l2_bytes}) and factor ({factor}) must be positive")
    n_words = max(1, int(l2_bytes * factor) // 4)
    buf = torch.zeros(n_words, dtype=torch.int32, device=device or "cuda")

    def flush() -> None:
        if mode == "read":
            torch.sum(buf)
        else:
            buf.zero_()

    return flush


def empty_kernel_fn(device: torch.device | str | None = None) -> Callable[[int], None]:
    """Return a call that launches a trivial Triton kernel (one program storing one value).

    The median stream window of this call, timed with ``sample_windows`` and an L2 flusher, is
    the launch floor: no kernel launched from Python can take less.

    Args:
        device: Where the kernel runs; None means the current CUDA device (``"cpu"`` works only
            under ``TRITON_INTERPRET=1``).

    Returns:
        ``fn(i)`` that launches the kernel once and ignores ``i``.
    """
    import torch

    from aka.hardware._kernels import launch_empty

    out = torch.zeros(1, dtype=torch.int32, device=device or "cuda")

    def launch(_: int) -> None:
        launch_empty(out)

    launch(0)  # compile now, outside any timing
    return launch


def _event_triple() -> tuple[torch.cuda.Event, torch.cuda.Event, torch.cuda.Event]:
    """Start, stream-end and device-end events of one sample."""
    import torch

    new = torch.cuda.Event
    return new(enable_timing=True), new(enable_timing=True), new(enable_timing=True)  # type: ignore[no-untyped-call]


def _check_sampling_args(
    n_samples: int, warmup_s: float, budget_s: float | None, min_samples: int | None
) -> int:
    """Validate the sampling arguments; return the effective minimum sample count."""
    floor = 1 if min_samples is None else min_samples
    if n_samples < 1 or not 1 <= floor <= n_samples:
        raise ValueError(
            f"need 1 <= min_samples ({min_samples}) <= n_samples ({n_samples}); raise n_samples"
        )
    if warmup_s < 0 or (budget_s is not None and budget_s < 0):
        raise ValueError(f"warmup_s ({warmup_s}) and budget_s ({budget_s}) must be >= 0")
    return floor


def _warm_up(
    fn: Callable[[int], object], flush: Callable[[], None] | None, warmup_s: float
) -> None:
    """Call ``fn`` (after ``flush``) until ``warmup_s`` wall seconds have passed; at least once."""
    import torch

    deadline_s = time.perf_counter() + warmup_s
    k = 0
    while True:
        if flush is not None:
            flush()
        fn(k)
        torch.cuda.synchronize()
        k += 1
        if time.perf_counter() >= deadline_s:
            return
