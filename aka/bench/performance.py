"""Stages 5-6 in the parent: judge the worker's raw samples, price the roofline, score.

Owns the torch.compile baseline cache (per problem, shape, device and versions), the ceilings lookup
for the scorer (cached measurement, measured in a worker when missing, or the datasheet) and the
re-check of outputs produced by timed calls.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aka.bench.result import EvalResult, Failure, LatencyStats, Verdict
from aka.bench.score import problem_score, sol_fraction, suspicious_margin
from aka.bench.stats import iqr, latency_stats, median, quantile
from aka.bench.timing import GAP_QUANTILE, judge_windows
from aka.core import BenchError, ProgressCallback, ProgressEvent, emit

if TYPE_CHECKING:
    from aka.bench.pipeline import Scorer
    from aka.bench.run_state import _Reference, _Run
    from aka.bench.sandbox import WorkerOutcome
    from aka.hardware import CostCounts, DeviceCeilings, DeviceInfo
    from aka.spec import ComputeUnit, ProblemSpec, ShapeCase

__all__ = [
    "cached_compile_shapes",
    "dominant_unit",
    "judge_performance",
    "scorer_ceilings",
    "paired_gap_spread",
    "shape_costs",
    "shape_empty_gap",
]

logger = logging.getLogger(__name__)

#: Scorers of one process (the agent's, one per GPU) update the baseline cache from several
#: threads: the read-modify-write below must not interleave.
_BASELINE_CACHE_LOCK = threading.Lock()


def _baseline_cache_path(scorer: Scorer) -> Path:
    return scorer.cache_dir / "baselines" / "torch_compile.json"


def _baseline_key(run: _Run, shape_id: str) -> str:
    device = run.device or {}
    blob = json.dumps(
        [
            run.problem.problem_hash(),
            shape_id,
            device.get("name"),
            device.get("driver_version"),
            run.versions,
        ],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def cached_compile_shapes(scorer: Scorer, run: _Run) -> list[str]:
    """Shape ids whose torch.compile baseline time is already cached (the worker skips them)."""
    if run.device is None:
        return []
    cache = _read_cache(_baseline_cache_path(scorer))
    return [s.id for s in run.shapes if _baseline_key(run, s.id) in cache]


def _store_compile_times(scorer: Scorer, run: _Run, times: dict[str, LatencyStats]) -> None:
    if not times:
        return
    path = _baseline_cache_path(scorer)
    with _BASELINE_CACHE_LOCK:
        cache = _read_cache(path)
        cache.update({_baseline_key(run, sid): stats.model_dump() for sid, stats in times.items()})
        path.parent.mkdir(parents=True, exist_ok=True)
        # a name of this process alone: another process may be writing the same cache
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=1))
        tmp.replace(path)


def scorer_ceilings(scorer: Scorer, info: DeviceInfo) -> DeviceCeilings:
    """Return the ceilings that price T_sol: cached measurement, else measured now, else datasheet.

    Raises:
        BenchError: Neither a measurement nor a datasheet entry exists for the device.
    """
    from aka.hardware import datasheet_ceilings, load_cached_ceilings, save_ceilings

    if scorer.config.ceilings == "measured":
        cached = load_cached_ceilings(scorer.cache_dir, info)
        if cached is not None:
            return cached
        measured = _measure_in_worker(scorer)
        if measured is not None:
            save_ceilings(scorer.cache_dir, info, measured)
            return measured
        logger.warning(
            "measuring the ceilings of %s failed; pricing T_sol from its datasheet", info.name
        )
    sheet = datasheet_ceilings(info)
    if sheet is None:
        raise BenchError(
            f"no ceilings for '{info.name}': measurement failed and no datasheet entry exists; "
            "run `aka hardware measure` and check its error"
        )
    return sheet


def _measure_in_worker(scorer: Scorer) -> DeviceCeilings | None:
    from aka.bench.sandbox import start_worker
    from aka.hardware import DeviceCeilings

    handle = start_worker(
        {"role": "ceilings"},
        {},
        config=scorer.config,
        interpret=False,
        gpu_index=scorer.gpu_index,
        timeout_s=600.0,
    )
    try:
        outcome = handle.finish()
    finally:
        handle.cleanup()
    result = outcome.result or {}
    if not result.get("ok"):
        logger.warning(
            "ceilings worker failed: %s",
            (result.get("error") or {}).get("message", outcome.log_tail[-500:]),
        )
        return None
    return DeviceCeilings.model_validate(result["ceilings"])


def _empty_gap(windows: dict[str, list[float]]) -> float:
    """(device-wide - stream) window of an empty call at ``GAP_QUANTILE``; 0 when not measured."""
    pairs = list(zip(windows.get("stream_us", []), windows.get("device_us", []), strict=True))
    return quantile([d - s for s, d in pairs], GAP_QUANTILE) if pairs else 0.0


def shape_empty_gap(start_gap_us: float, candidate: dict[str, list[float]]) -> float:
    """The empty call's gap one shape's candidate gap is judged against.

    The empty kernel timed between this shape's own samples (``empty_stream_us`` and
    ``empty_device_us``, from ``worker_timing._sample_paired``) is the baseline, so the drift of
    the host's wake-up over the worker's life cancels; never below the gap measured at the
    worker's start (``start_gap_us``).
    """
    paired = {
        "stream_us": candidate.get("empty_stream_us") or [],
        "device_us": candidate.get("empty_device_us") or [],
    }
    return max(start_gap_us, _empty_gap(paired))


def paired_gap_spread(candidate: dict[str, list[float]]) -> float:
    """Interquartile range of the empty call's gaps timed between one shape's samples (0: none)."""
    pairs = zip(
        candidate.get("empty_stream_us") or [], candidate.get("empty_device_us") or [], strict=True
    )
    gaps = [d - s for s, d in pairs]
    return iqr(gaps) if len(gaps) >= 4 else 0.0


def judge_performance(
    scorer: Scorer,
    run: _Run,
    ref: _Reference,
    outcome: WorkerOutcome,
    progress: ProgressCallback | None,
) -> EvalResult:
    """Fill each shape's times, baselines, T_sol and S from the worker's samples; score."""
    from aka.bench.run_state import _load_tensors
    from aka.hardware import DeviceInfo, device_key, t_sol

    timing = (outcome.result or {}).get("timing")
    if not timing or run.device is None:
        raise BenchError("the candidate worker returned no timing although the parent asked for it")
    info = DeviceInfo.model_validate(run.device)
    floor = latency_stats(timing["launch_floor"]["stream_us"])
    empty_gap = max(
        _empty_gap(timing["launch_floor"]), _empty_gap(timing.get("empty_unflushed") or {})
    )
    ceilings = scorer_ceilings(scorer, info).model_copy(
        update={"launch_floor_us": floor.median, "launch_floor_iqr_us": floor.iqr}
    )
    margin = suspicious_margin(floor.median, floor.iqr, scorer.config.suspicious_min_margin)
    cached = _read_cache(_baseline_cache_path(scorer))
    raw: dict[str, dict[str, list[float]]] = {
        "launch_floor": timing["launch_floor"],
        "empty_unflushed": timing.get("empty_unflushed") or {},
    }
    new_compile: dict[str, LatencyStats] = {}
    for i, item in enumerate(timing["shapes"]):
        sid = item["shape_id"]
        emit(progress, ProgressEvent("bench", "score", sid, i, len(timing["shapes"])))
        row = run.rows[sid]
        windows = judge_windows(
            item["candidate"]["stream_us"],
            item["candidate"]["device_us"],
            empty_gap_us=shape_empty_gap(empty_gap, item["candidate"]),
            empty_spread_us=paired_gap_spread(item["candidate"]),
            abs_us=scorer.config.mismatch_abs_us,
            rel=scorer.config.mismatch_rel,
        )
        raw[sid] = item["candidate"]
        baselines = {name: latency_stats(s["stream_us"]) for name, s in item["baselines"].items()}
        new_compile.update(
            {sid: baselines["torch_compile"]} if "torch_compile" in baselines else {}
        )
        if "torch_compile" not in baselines and _baseline_key(run, sid) in cached:
            baselines["torch_compile"] = LatencyStats.model_validate(
                cached[_baseline_key(run, sid)]
            )
        shape = next(s for s in run.shapes if s.id == sid)
        costs = shape_costs(run.problem, shape, ref.rows[sid]["costs"])
        sol = t_sol(costs, ceilings)
        t_sol_us = sol.t_sol_s * 1e6
        s_frac, flags = sol_fraction(t_sol_us, windows.stream.median, margin)
        flags += host_flags(item["candidate"], timing["launch_floor"], windows.device.median)
        update: dict[str, Any] = {
            "latency_us": windows.stream,
            "device_window_us": windows.device,
            "baselines_us": baselines,
            "t_sol_us": t_sol_us,
            "bound": sol.bound,
            "bytes": costs.bytes_total,
            "flops": costs.flops_total,
            "compute_unit": dominant_unit(costs, ceilings),
            "sol_fraction": s_frac,
            "flags": [*row.flags, *flags],
            "speedup_vs": {k: v.median / windows.stream.median for k, v in baselines.items()},
        }
        recheck = _recheck_timed(scorer, run, ref, outcome.workdir, item, _load_tensors)
        if windows.mismatch:
            update |= {
                "verdict": Verdict.TIMING_MISMATCH,
                "sol_fraction": None,
                "failure": Failure(
                    kind=Verdict.TIMING_MISMATCH,
                    message=f"shape {sid}: device-wide window exceeds the stream window "
                    f"by {windows.gap_us:.1f} us (allowed {windows.allowed_gap_us:.1f} us): "
                    "work escaped the stream",
                ),
            }
        elif recheck is not None:
            update |= {"verdict": recheck.kind, "sol_fraction": None, "failure": recheck}
        run.rows[sid] = row.model_copy(update=update)
    _store_compile_times(scorer, run, new_compile)
    rows = [run.rows[s.id] for s in run.shapes]
    bad = next((r for r in rows if r.verdict is not Verdict.ACCEPTED), None)
    extra = {
        "raw": raw,
        "ceilings": ceilings.model_dump(mode="json"),
        "device_key": device_key(info),
        "clocks": {"before": timing.get("clocks_before"), "after": timing.get("clocks_after")},
    }
    run.sandbox["persisting_l2_reset"] = timing.get("persisting_l2_reset")
    run.sandbox["persisting_l2_calls"] = timing.get("persisting_l2_calls")
    if timing.get("baseline_errors"):
        run.notes.append(f"baselines that failed to build: {timing['baseline_errors']}")
    if bad is not None:
        return scorer._finish(run, bad.verdict, bad.failure, measured=True, extra=extra)
    return scorer._finish(
        run, Verdict.ACCEPTED, None, measured=True, score=problem_score(rows), extra=extra
    )


#: A host wall-clock longer than the device-wide window by more than the empty call's gap plus
#: max(HOST_GAP_ABS_US, HOST_GAP_REL x the window) is flagged ``host_gap``.
HOST_GAP_ABS_US = 50.0
HOST_GAP_REL = 0.5


def host_flags(
    samples: dict[str, list[float]], floor: dict[str, list[float]], device_median_us: float
) -> list[str]:
    """Cross-check the host's wall-clock against the device's windows of the same calls.

    ``host_clock_below_device``: the host measured less time than the device says passed (the
    clocks disagree: a patched timer or a broken event). ``host_gap``: the host waited much
    longer than the device worked (CPU work hidden from the device's windows, or a stalled host).
    Flags only: the device's window stays the time that is scored.

    Args:
        samples: The candidate's raw samples (``host_us``, ``device_us``).
        floor: The empty kernel's raw samples, measured the same way.
        device_median_us: Median device-wide window of the candidate.
    """
    host = samples.get("host_us") or []
    if not host:
        return []
    host_median = median(host)
    pairs = zip(floor.get("host_us") or [], floor.get("device_us") or [], strict=False)
    floor_gap = median([h - d for h, d in pairs] or [0.0])
    if host_median < 0.9 * device_median_us:
        return ["host_clock_below_device"]
    if host_median - device_median_us > floor_gap + max(
        HOST_GAP_ABS_US, HOST_GAP_REL * device_median_us
    ):
        return ["host_gap"]
    return []


def shape_costs(
    problem: ProblemSpec, shape: ShapeCase, counted: dict[str, Any] | None
) -> CostCounts:
    """One shape's costs: the reference's counted costs (or none) with the problem's overrides."""
    from aka.hardware import CostCounts, apply_overrides

    return apply_overrides(
        CostCounts.model_validate(counted) if counted else CostCounts(),
        problem.roofline_overrides_for(shape.id),
        {**shape.init_kwargs, **shape.input_kwargs},
    )


def dominant_unit(costs: CostCounts, ceilings: DeviceCeilings) -> ComputeUnit | None:
    """The compute unit whose FLOPs take the longest at its peak rate (None: no FLOPs)."""
    rates = ceilings.rates_flops_per_s
    times = {u: f / rates[u] for u, f in costs.flops_by_unit.items() if f > 0 and u in rates}
    return max(times, key=lambda u: times[u]) if times else None


def _recheck_timed(
    scorer: Scorer, run: _Run, ref: _Reference, workdir: Path, item: dict[str, Any], load: Any
) -> Failure | None:
    """Outputs of timed calls must still be right (no caching keyed on the first call).

    Problems with ``in_place`` inputs are skipped: repeated calls legitimately change their state.
    """
    if run.problem.in_place:
        return None
    for info in item.get("timed_files", {}).values():
        cand = load(workdir / info["file"])
        outcome = scorer._compare(
            run,
            ref,
            item["shape_id"],
            int(info["seed"]),
            cand,
            scorer._override(run),
            with_extra=False,
        )
        if not outcome.ok:
            return Failure(
                kind=outcome.verdict,
                message=f"shape {item['shape_id']}: output of a timed call is "
                f"wrong: {outcome.message}",
            )
    return None
