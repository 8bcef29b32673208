"""Device ceilings: the bandwidth, peak FLOP/s per unit and launch floor that price T_sol.

Owns ``DeviceCeilings``, their measurement on the live GPU (``measure_ceilings``: copy bandwidth,
matmul rate per dtype, vector fp32 rate, launch floor), the datasheet fallback
(``datasheet_ceilings``) and the JSON cache keyed by ``device_key``. Times everything with
``aka.hardware.timer.sample_windows``, the primitive the scorer uses too.

Must not import torch or triton at module level, and must not know about candidates. Measuring
needs a GPU and is sized to stay well under a minute on an H200; nothing else here needs one.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import statistics
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from aka.core.progress import ProgressCallback, ProgressEvent, emit
from aka.hardware.device import DeviceInfo, device_key, library_versions
from aka.hardware.profiles import match_profile
from aka.spec.vocab import ComputeUnit

if TYPE_CHECKING:
    import torch

__all__ = [
    "DeviceCeilings",
    "datasheet_ceilings",
    "load_cached_ceilings",
    "load_or_measure_ceilings",
    "measure_ceilings",
    "save_ceilings",
]

logger = logging.getLogger(__name__)

_GIB = 1 << 30
_CLOCK_WARMUP_S = 1.0  # clocks ramp up under load; a cold GPU reads ~30% low (ENVIRONMENT.md)
_COPY_SIZES_BYTES = (_GIB, 2 * _GIB, 4 * _GIB)
_MATMUL_SIZES: dict[ComputeUnit, tuple[int, ...]] = {
    ComputeUnit.TC_BF16: (4096, 8192, 16384),
    ComputeUnit.TC_FP16: (4096, 8192, 16384),
    ComputeUnit.TC_FP8: (4096, 8192, 16384),
    ComputeUnit.TC_TF32: (4096, 8192, 16384),
    ComputeUnit.FP32_MATMUL: (2048, 4096, 8192),
}
_FMA_CONFIGS = ({"n_acc": 8, "block": 1024}, {"n_acc": 4, "block": 512})
_FMA_ELEMENTS = 1 << 22
_FMA_ITERS = 256
_TARGET_WINDOW_S = 2e-3  # batch short calls so one window spans >= 2 ms: launch gaps stay < 1%
_SAMPLES_PER_POINT = 10
_FLOOR_SAMPLES = 300
_FLOOR_MIN_SAMPLES = 50
_FLOOR_BUDGET_S = 1.0
_DEFAULT_L2_BYTES = 64 << 20  # when the driver does not report L2
_MEMORY_SHARE = 0.5  # never allocate more than this share of device memory for one point


class DeviceCeilings(BaseModel):
    """What one device can do at best: the denominators of T_sol."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    device_name: str = Field(description="Device name, e.g. 'NVIDIA H200'.")
    device: DeviceInfo | None = Field(default=None, description="Full device info if detected.")
    source: Literal["measured", "datasheet"]
    bandwidth_bytes_per_s: float = Field(gt=0, description="DRAM bandwidth, read + write bytes/s.")
    rates_flops_per_s: dict[ComputeUnit, float] = Field(
        description="Peak FLOP/s per unit; units the device lacks are absent."
    )
    launch_floor_us: float | None = Field(
        default=None, description="Median stream window of an empty Triton kernel; None if unknown."
    )
    launch_floor_iqr_us: float | None = Field(default=None, description="IQR of that window.")
    measured_at: str | None = Field(default=None, description="ISO time of measurement (UTC).")
    versions: dict[str, str | None] = Field(default_factory=dict, description="Library versions.")
    details: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="Raw measurements per size/dtype, or the datasheet source.",
    )


def datasheet_ceilings(info_or_name: DeviceInfo | str) -> DeviceCeilings | None:
    """Build ceilings from the datasheet table (no launch floor).

    Args:
        info_or_name: A detected device or a device name.

    Returns:
        The datasheet ceilings, or None when the device is not in the table.
    """
    info = info_or_name if isinstance(info_or_name, DeviceInfo) else None
    name = info.name if info is not None else str(info_or_name)
    profile = match_profile(name)
    if profile is None:
        return None
    return DeviceCeilings(
        device_name=name,
        device=info,
        source="datasheet",
        bandwidth_bytes_per_s=profile.bandwidth_bytes_per_s,
        rates_flops_per_s=profile.rates_flops_per_s(),
        details={"profile": profile.key, "source": profile.source},
    )


def measure_ceilings(
    info: DeviceInfo, *, progress: ProgressCallback | None = None
) -> DeviceCeilings:
    """Measure the ceilings of the current CUDA device (warm clocks, best of several sizes).

    Steps: ~1 s of bf16 matmuls to raise clocks; device-to-device copy bandwidth (read + write);
    matmul FLOP/s for bf16, fp16, fp8 (``torch._scaled_mm``), tf32 and fp32 on N(0, 1) data; a
    Triton FMA-bound kernel for vector fp32; the launch floor. A unit that cannot run here (fp8
    before sm_89) is left out.

    Args:
        info: The device, from ``detect_device`` (the current CUDA device).
        progress: Receives one ``ProgressEvent(source="hardware")`` per step.

    Returns:
        Measured ceilings with raw numbers in ``details``.
    """
    steps = ("warmup", "bandwidth", "matmul", "vector", "launch_floor")

    def step(i: int, message: str) -> None:
        emit(progress, ProgressEvent("hardware", steps[i], message, done=i, total=len(steps)))

    step(0, "raising clocks with bf16 matmuls")
    _warm_clocks(_CLOCK_WARMUP_S)
    step(1, "device-to-device copy bandwidth")
    bandwidth, bw_details = _measure_bandwidth(info)
    step(2, "matmul rates (bf16, fp16, fp8, tf32, fp32)")
    rates, mm_details = _measure_matmul_rates(info)
    step(3, "vector fp32 rate (Triton FMA kernel)")
    rates[ComputeUnit.VECTOR_FP32], vec_details = _measure_vector_rate()
    step(4, "launch floor (empty Triton kernel, cold L2)")
    floor_us, floor_iqr_us, floor_details = _measure_launch_floor(info)
    emit(progress, ProgressEvent("hardware", "done", "ceilings measured", done=5, total=5))
    return DeviceCeilings(
        device_name=info.name,
        device=info,
        source="measured",
        bandwidth_bytes_per_s=bandwidth,
        rates_flops_per_s=rates,
        launch_floor_us=floor_us,
        launch_floor_iqr_us=floor_iqr_us,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        versions={**library_versions(), "driver": info.driver_version},
        details={
            "bandwidth_bytes_per_s": bw_details,
            "matmul_flops_per_s": mm_details,
            "vector_fp32": vec_details,
            "launch_floor": floor_details,
        },
    )


def load_cached_ceilings(cache_dir: Path, info: DeviceInfo) -> DeviceCeilings | None:
    """Read the cached measured ceilings of ``info``; None when absent or unreadable (warned)."""
    return _read_cache(_cache_path(cache_dir, info))


def load_or_measure_ceilings(
    cache_dir: Path,
    info: DeviceInfo,
    *,
    remeasure: bool = False,
    progress: ProgressCallback | None = None,
) -> DeviceCeilings:
    """Return cached ceilings for ``info``, measuring (and caching) them when there are none.

    The cache is ``cache_dir / "ceilings" / f"{device_key(info)}.json"``, so a new driver, torch
    or triton measures again. An unreadable cache file is measured again with a warning.

    Args:
        cache_dir: aka's cache directory (``PathsConfig.cache_dir``).
        info: The current CUDA device.
        remeasure: Ignore the cache and measure.
        progress: Receives the measurement's progress events.

    Returns:
        The ceilings.
    """
    path = _cache_path(cache_dir, info)
    if not remeasure:
        cached = _read_cache(path)
        if cached is not None:
            return cached
    ceilings = measure_ceilings(info, progress=progress)
    save_ceilings(cache_dir, info, ceilings)
    return ceilings


def save_ceilings(cache_dir: Path, info: DeviceInfo, ceilings: DeviceCeilings) -> Path:
    """Write ``ceilings`` to the cache of ``info`` atomically; return the file's path.

    Args:
        cache_dir: aka's cache directory (``PathsConfig.cache_dir``).
        info: The device the ceilings were measured on (its ``device_key`` names the file).
        ceilings: What to store.

    Returns:
        ``cache_dir / "ceilings" / f"{device_key(info)}.json"``.
    """
    path = _cache_path(cache_dir, info)
    path.parent.mkdir(parents=True, exist_ok=True)
    # one writer per name: scorers of one process (one per GPU) may save from several threads
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(ceilings.model_dump_json(indent=2), encoding="utf-8")
    tmp.replace(path)  # atomic: a concurrent reader sees the old file or the new one
    return path


def _cache_path(cache_dir: Path, info: DeviceInfo) -> Path:
    return cache_dir / "ceilings" / f"{device_key(info)}.json"


def _read_cache(path: Path) -> DeviceCeilings | None:
    if not path.is_file():
        return None
    try:
        return DeviceCeilings.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValidationError) as err:
        logger.warning("ignoring unreadable cached ceilings %s (%s); measuring again", path, err)
        return None


# --- measurement steps (GPU only) -------------------------------------------------------------


def _median_call_s(op: Callable[[], object], n_samples: int = _SAMPLES_PER_POINT) -> float:
    """Median seconds of one ``op()`` on the stream; short calls are batched into 2 ms windows."""
    from aka.hardware.timer import sample_windows

    probe = sample_windows(lambda _: op(), n_samples=3, flush=None, warmup_s=0.0)
    one_s = statistics.median(probe.stream_us) * 1e-6
    inner = max(1, min(64, math.ceil(_TARGET_WINDOW_S / max(one_s, 1e-9))))

    def batch(_: int) -> None:
        for _ in range(inner):
            op()

    samples = sample_windows(batch, n_samples=n_samples, flush=None, warmup_s=0.0)
    return statistics.median(samples.stream_us) * 1e-6 / inner


def _warm_clocks(duration_s: float) -> None:
    """Run bf16 8192^3 matmuls for ``duration_s`` so the clocks reach their loaded frequency."""
    import time

    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    deadline_s = time.perf_counter() + duration_s
    while time.perf_counter() < deadline_s:
        for _ in range(4):
            torch.mm(a, a, out=c)
        torch.cuda.synchronize()
    del a, c
    torch.cuda.empty_cache()


def _measure_bandwidth(info: DeviceInfo) -> tuple[float, dict[str, JsonValue]]:
    """Best device-to-device copy rate over the sizes that fit; bytes = read + write."""
    import torch

    budget_bytes = _MEMORY_SHARE * info.memory_bytes
    sizes = [s for s in _COPY_SIZES_BYTES if 2 * s <= budget_bytes] or [int(budget_bytes / 2)]
    details: dict[str, JsonValue] = {}
    best = 0.0
    for size_bytes in sizes:
        src = torch.empty(size_bytes, dtype=torch.uint8, device="cuda").random_()
        dst = torch.empty_like(src)
        rate = 2 * size_bytes / _median_call_s(functools.partial(dst.copy_, src))
        details[f"{size_bytes / _GIB:g}GiB"] = rate
        best = max(best, rate)
        del src, dst
        torch.cuda.empty_cache()
    return best, details


def _measure_matmul_rates(
    info: DeviceInfo,
) -> tuple[dict[ComputeUnit, float], dict[str, JsonValue]]:
    """Best FLOP/s over sizes for each matmul unit; units that cannot run are left out."""
    import torch

    rates: dict[ComputeUnit, float] = {}
    details: dict[str, JsonValue] = {}
    for unit, sizes in _MATMUL_SIZES.items():
        per_size: dict[str, JsonValue] = {}
        for n in sizes:
            if 4 * 3 * n * n > _MEMORY_SHARE * info.memory_bytes:  # fp32 staging of a, b, c
                continue
            try:
                per_size[str(n)] = 2.0 * n**3 / _matmul_seconds(unit, n)
            except (RuntimeError, NotImplementedError, TypeError) as err:
                per_size[str(n)] = f"not run: {str(err).splitlines()[0][:200]}"
                logger.info("matmul %s at %d not measured: %s", unit.value, n, err)
            torch.cuda.empty_cache()
        measured = [v for v in per_size.values() if isinstance(v, float)]
        if measured:
            rates[unit] = max(measured)
        details[unit.value] = per_size
    return rates, details


def _matmul_seconds(unit: ComputeUnit, n: int) -> float:
    """Median seconds of one n x n x n matmul on ``unit``."""
    import torch

    if unit is ComputeUnit.TC_FP8:
        return _scaled_mm_seconds(n)
    dtype = {
        ComputeUnit.TC_BF16: torch.bfloat16,
        ComputeUnit.TC_FP16: torch.float16,
    }.get(unit, torch.float32)
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    with _tf32_matmul(unit is ComputeUnit.TC_TF32):
        return _median_call_s(lambda: torch.mm(a, b, out=c))


def _scaled_mm_seconds(n: int) -> float:
    """Median seconds of an fp8 e4m3 ``torch._scaled_mm`` (per-tensor scales, bf16 out)."""
    import torch

    fp8 = torch.float8_e4m3fnuz if getattr(torch.version, "hip", None) else torch.float8_e4m3fn
    a = torch.randn(n, n, device="cuda").to(fp8)
    b = torch.randn(n, n, device="cuda").to(fp8).t()  # column-major, as _scaled_mm requires
    scale = torch.ones((), device="cuda", dtype=torch.float32)

    def run() -> torch.Tensor:
        return torch._scaled_mm(
            a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16, use_fast_accum=True
        )

    run()  # raises here when fp8 is unsupported
    return _median_call_s(run)


@contextmanager
def _tf32_matmul(enabled: bool) -> Iterator[None]:
    """Set cuBLAS tf32 for fp32 matmuls, restoring the previous setting afterwards."""
    import torch

    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def _measure_vector_rate() -> tuple[float, dict[str, JsonValue]]:
    """Best FLOP/s of the Triton FMA kernel over its configurations."""
    import torch

    from aka.hardware._kernels import fma_burn

    x = torch.rand(_FMA_ELEMENTS, device="cuda", dtype=torch.float32)
    out = torch.empty_like(x)
    details: dict[str, JsonValue] = {}
    for cfg in _FMA_CONFIGS:
        flops = fma_burn(x, out, n_iters=_FMA_ITERS, **cfg)  # also compiles
        seconds = _median_call_s(functools.partial(fma_burn, x, out, n_iters=_FMA_ITERS, **cfg))
        details[f"n_acc={cfg['n_acc']},block={cfg['block']}"] = flops / seconds
    return max(float(v) for v in details.values() if isinstance(v, float)), details


def _measure_launch_floor(info: DeviceInfo) -> tuple[float, float, dict[str, JsonValue]]:
    """Median and IQR of the empty kernel's stream window with L2 flushed, in microseconds."""
    from aka.hardware.timer import empty_kernel_fn, make_l2_flusher, sample_windows

    flush = make_l2_flusher(info.l2_bytes or _DEFAULT_L2_BYTES)
    samples = sample_windows(
        empty_kernel_fn(),
        n_samples=_FLOOR_SAMPLES,
        flush=flush,
        budget_s=_FLOOR_BUDGET_S,
        min_samples=_FLOOR_MIN_SAMPLES,
    )
    q1, median_us, q3 = statistics.quantiles(samples.stream_us, n=4, method="inclusive")
    gaps_us = [d - s for s, d in zip(samples.stream_us, samples.device_us, strict=True)]
    details: dict[str, JsonValue] = {
        "n_samples": len(samples.stream_us),
        "stream_median_us": median_us,
        "device_median_us": statistics.median(samples.device_us),
        "device_minus_stream_median_us": statistics.median(gaps_us),
        "min_us": min(samples.stream_us),
    }
    return median_us, q3 - q1, details
