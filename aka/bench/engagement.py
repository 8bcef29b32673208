"""Stage 4's judgement, in the parent: did the candidate's own kernels do the work?

Reads the facts a candidate worker gathered (``aka.bench.guards``) and decides, per shape:

- **fallback**: the share of the work done by library code. On a GPU it is the profiler's device
  time outside the candidate's kernels (aten, cuBLAS, cuDNN, Inductor-generated, copies) over all
  device time of one warm forward; in the CPU interpreter, where nothing is timed, the bytes touched
  by aten ops that compute (math, copies, casts — allocations and views are free) over those plus
  the bytes of the candidate's kernel arguments. Above ``1 - engagement_min`` the verdict is
  ``fallback``. A small device-to-host read (a length for an output's shape) is set apart from both
  sides; reading more back is ``fallback`` (``READBACK_FREE_BYTES``, ``READBACK_FREE_US``).
- **not_engaged**: no kernel of the candidate's file launched during forward; or none had an
  output's memory among its arguments; or none had a forward input's; or a ghost call (the
  candidate's kernels skipped) produced the same output as a real one. CUDA C++ kernels (built
  with ``load_inline``) are invisible to the launch tracer and the ghost call: for them the
  profiler's split alone decides.

Owns no execution; pure functions over JSON facts and tensors already loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aka.bench.result import Verdict

__all__ = [
    "READBACK_FREE_BYTES",
    "READBACK_FREE_US",
    "EngagementOutcome",
    "fallback_ratio",
    "judge_engagement",
]

#: Device-to-host reads of at most this many bytes per forward call (by the op trace) and this
#: much device time (by the profiler) are neither the candidate's work nor library work: lengths
#: and counts read with ``.item()`` to size data-dependent outputs. A forward that reads more back
#: is ``fallback`` outright: the host can compute from it, unseen by the profiler, a reduction
#: whose small result goes back as kernel arguments. Past the time bound (copies the op trace
#: cannot see, such as ``cudaMemcpy`` called by a CUDA C++ extension; about 1 MB of pageable copy)
#: their device time is library work.
READBACK_FREE_BYTES = 1024
READBACK_FREE_US = 50.0


@dataclass
class EngagementOutcome:
    """The engagement verdict of one shape (``verdict`` None when the gate passes)."""

    verdict: Verdict | None
    message: str = ""
    fallback_ratio: float | None = None
    method: str = ""
    kernels: list[str] = field(default_factory=list)
    library: dict[str, float] = field(default_factory=dict)


def fallback_ratio(
    trace: dict[str, Any], profile: dict[str, Any] | None
) -> tuple[float, str, dict[str, float]]:
    """Share of the work outside the candidate's kernels, how it was measured, top library items.

    Args:
        trace: The worker's trace of the first correctness call (bytes per side, library ops).
        profile: The worker's profiler pass (GPU), or None.

    Returns:
        ``(ratio, method, library items)``; method is ``profiler`` or ``interpreter-bytes``.
    """
    if profile and "own_us" in profile:
        own, library = float(profile["own_us"]), float(profile["library_us"])
        items = {k: float(v) for k, v in profile.get("library_kernels", {}).items()}
        read_us = float(profile.get("readback_us", 0.0))
        if read_us > READBACK_FREE_US:
            library += read_us
            items[f"device-to-host copies ({read_us:.1f} us)"] = read_us
            items = dict(sorted(items.items(), key=lambda kv: -kv[1]))
        if own + library > 0:
            return library / (own + library), "profiler", items
    own_b, lib_b = float(trace.get("own_bytes", 0)), float(trace.get("library_bytes", 0))
    ratio = lib_b / (own_b + lib_b) if own_b + lib_b > 0 else 1.0
    items = {k: float(v) for k, v in (trace.get("library_ops") or {}).items()}
    return ratio, "interpreter-bytes", items


def judge_engagement(
    trace: dict[str, Any] | None,
    profile: dict[str, Any] | None,
    *,
    ghost_same: bool | None,
    engagement_min: float,
) -> EngagementOutcome:
    """Decide stage 4 for one shape.

    Args:
        trace: Launches, covered outputs/inputs and library ops of the traced call.
        profile: The GPU profiler pass, or None (CPU, or it failed).
        ghost_same: Whether the ghost call's output matched the real one (None: no ghost output).
        engagement_min: The problem's minimum share of work in the candidate's own kernels.
    """
    if trace is None:
        return EngagementOutcome(Verdict.NOT_ENGAGED, "no trace of the forward call was recorded")
    ratio, method, library = fallback_ratio(trace, profile)
    kernels = list(trace.get("kernels", []))
    base = EngagementOutcome(None, "", ratio, method, kernels, library)
    read_b = int(trace.get("readback_bytes", 0))
    if read_b > READBACK_FREE_BYTES:
        base.verdict = Verdict.FALLBACK
        base.message = (
            f"forward copied {read_b} bytes from the device to the host; at most "
            f"{READBACK_FREE_BYTES} are allowed (lengths to size outputs) — the host must not "
            "see the data: compute the result in your own kernels"
        )
        return base
    allowed = 1.0 - engagement_min
    if ratio > allowed + 1e-12:
        top = ", ".join(f"{k}" for k in list(library)[:4]) or "no kernel of its own"
        unit = "device time" if method == "profiler" else "bytes touched"
        base.verdict = Verdict.FALLBACK
        base.message = (
            f"{ratio:.0%} of the {unit} is library work ({top}); at most {allowed:.0%} is "
            "allowed (engagement_min) — compute the result in your own kernels"
        )
        return base
    if trace.get("cuda_kernels") and method == "profiler":
        # CUDA C++ launches go through the extension, not Triton's launch path: neither the
        # tracer nor the ghost call can see them, so the profiler's split above decides alone.
        return base
    if not trace.get("launches"):
        base.verdict = Verdict.NOT_ENGAGED
        base.message = "none of the candidate's kernels ran during forward"
        return base
    missing = sorted(set(trace.get("outputs", [])) - set(trace.get("outputs_covered", [])))
    if missing:
        base.verdict = Verdict.NOT_ENGAGED
        base.message = (
            f"outputs {missing} were never handed to one of the candidate's kernels "
            f"(kernels run: {kernels})"
        )
        return base
    if not trace.get("inputs_covered"):
        base.verdict = Verdict.NOT_ENGAGED
        base.message = (
            f"no forward input was handed to one of the candidate's kernels (kernels run: "
            f"{kernels}): a launch on other tensors is for show"
        )
        return base
    if ghost_same:
        base.verdict = Verdict.NOT_ENGAGED
        base.message = (
            "with the candidate's kernels replaced by no-ops the output did not change: "
            "something else computes it"
        )
    return base
