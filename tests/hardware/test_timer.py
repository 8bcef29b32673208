from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from aka.hardware import WindowSamples, empty_kernel_fn, make_l2_flusher, sample_windows


def _never_called(i: int) -> None:
    raise AssertionError(f"fn must not run when the arguments are invalid (got {i})")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_samples": 0},
        {"n_samples": 5, "min_samples": 6},
        {"n_samples": 5, "min_samples": 0},
        {"n_samples": 5, "warmup_s": -1.0},
        {"n_samples": 5, "budget_s": -0.5},
    ],
)
def test_sample_windows_rejects_bad_arguments_before_touching_cuda(
    kwargs: dict[str, float],
) -> None:
    with pytest.raises(ValueError):
        sample_windows(_never_called, flush=None, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("l2_bytes", "factor"), [(0, 2.0), (-1, 2.0), (1024, 0.0)])
def test_make_l2_flusher_rejects_non_positive_sizes(l2_bytes: int, factor: float) -> None:
    with pytest.raises(ValueError):
        make_l2_flusher(l2_bytes, factor)


def test_window_samples_is_frozen() -> None:
    samples = WindowSamples(stream_us=[1.0], device_us=[2.0])

    with pytest.raises(AttributeError):
        samples.stream_us = []  # type: ignore[misc]


_INTERPRETED_KERNELS = textwrap.dedent(
    """
    import torch
    from aka.hardware import empty_kernel_fn
    from aka.hardware._kernels import fma_burn, launch_empty

    out = torch.zeros(1, dtype=torch.int32)
    launch_empty(out)
    assert out.item() == 1, out
    empty_kernel_fn("cpu")(0)

    x = torch.randn(100)
    got = torch.empty(100)
    flops = fma_burn(x, got, n_iters=5, n_acc=4, block=64)
    acc = x[:, None] + torch.arange(4.0)[None, :]
    for _ in range(5):
        acc = acc * 0.999 + 0.001
    assert flops == 2 * 100 * 4 * 5, flops
    torch.testing.assert_close(got, acc.sum(1))
    print("ok")
    """
)


@pytest.mark.slow
@pytest.mark.integration
def test_kernels_compute_what_they_claim_in_the_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _INTERPRETED_KERNELS],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"


@pytest.mark.gpu
def test_sample_windows_calls_fn_with_indices_and_returns_positive_windows() -> None:
    import torch

    a = torch.randn(1024, 1024, device="cuda")
    seen: list[int] = []

    def fn(i: int) -> None:
        seen.append(i)
        torch.mm(a, a)

    flushes: list[int] = []

    def flush() -> None:
        flushes.append(1)

    samples = sample_windows(fn, n_samples=20, flush=flush, warmup_s=0.0)

    assert seen[-20:] == list(range(20))
    assert len(flushes) == len(seen)  # one flush before every call, warm-up included
    assert len(samples.stream_us) == len(samples.device_us) == 20
    assert all(s > 0 for s in samples.stream_us)
    assert all(d >= s for s, d in zip(samples.stream_us, samples.device_us, strict=True))


@pytest.mark.gpu
def test_sample_windows_budget_stops_early_but_keeps_min_samples() -> None:
    fn = empty_kernel_fn()

    samples = sample_windows(fn, n_samples=1000, flush=None, budget_s=0.0, min_samples=7)

    assert len(samples.stream_us) == 7


@pytest.mark.gpu
def test_sample_windows_warms_up_by_time() -> None:
    import time

    calls: list[float] = []
    fn = empty_kernel_fn()

    def counted(i: int) -> None:
        calls.append(time.perf_counter())
        fn(i)

    sample_windows(counted, n_samples=1, flush=None, warmup_s=0.2)

    assert calls[-1] - calls[0] >= 0.2
    assert len(calls) > 2


@pytest.mark.gpu
def test_device_window_sees_side_stream_work_the_stream_window_misses() -> None:
    import torch

    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()

    def fn(_: int) -> None:
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000)  # ~1 ms of spinning at ~2 GHz

    samples = sample_windows(fn, n_samples=10, flush=None, warmup_s=0.0)

    gaps_us = sorted(d - s for s, d in zip(samples.stream_us, samples.device_us, strict=True))
    assert gaps_us[len(gaps_us) // 2] > 300.0
    assert sorted(samples.stream_us)[5] < 100.0


@pytest.mark.gpu
def test_launch_floor_of_empty_kernel_with_cold_l2_is_a_few_microseconds() -> None:
    import statistics

    import torch

    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    samples = sample_windows(
        empty_kernel_fn(), n_samples=200, flush=make_l2_flusher(l2_bytes), warmup_s=0.05
    )

    floor_us = statistics.median(samples.stream_us)
    assert 0.5 < floor_us < 30.0, floor_us
