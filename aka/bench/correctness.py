"""Stage 3's judgement, in the parent: compare a candidate's outputs with the reference's.

Owns the tolerance policy (one table, below) and every comparison rule: structure, dtype, shape and
device first; then, for float outputs, an elementwise check |out - ref| <= atol + rtol*|ref| AND a
whole-output check ||out - ref||_2 / ||ref||_2 <= rtol, so a zero or constant output fails at any
scale; integer, bool and index outputs match exactly; fp8 outputs are compared after dequantising
with their scales; NaN fails where the reference is finite and +-Inf must match.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from aka.bench.result import Verdict

__all__ = ["TOLERANCES", "CheckOutcome", "Tolerance", "compare_outputs", "tolerance_for"]


@dataclass(frozen=True)
class Tolerance:
    """Absolute and relative tolerance (rtol also bounds the whole-output relative L2 error)."""

    atol: float
    rtol: float
    #: ``rms``: atol is relative to the reference's RMS (tf32 errors scale with the operands).
    atol_scale: str = "absolute"


#: The policy table. fp32 = (1e-4, 1e-4), fp16 = (1e-3, 1e-3), bf16 = (1e-2, 1e-2);
#: tf32 applies to fp32 outputs of problems whose dtype_policy allows tf32: its 10-bit mantissa
#: makes errors proportional to the operands, so its atol is a share of the reference's RMS.
TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(1e-4, 1e-4),
    "float64": Tolerance(1e-7, 1e-7),
    "float16": Tolerance(1e-3, 1e-3),
    "bfloat16": Tolerance(1e-2, 1e-2),
    "tf32": Tolerance(5e-3, 5e-3, atol_scale="rms"),
}
#: Reductions longer than this may widen fp32/fp16 tolerances, by at most the factor below.
LONG_REDUCTION = 4096
LONG_REDUCTION_WIDEN = 2.0
#: fp8 (e4m3) after dequantisation: one e4m3 ulp elementwise (2^-3 relative) plus its subnormal
#: step times the scale; the whole-output relative L2 error must stay below 5%.
FP8_ELEMENT_RTOL = 0.125
FP8_SUBNORMAL = 2.0**-9
FP8_NORM_RTOL = 0.05
#: CPU interpreter: ~3% of fp8 casts round wrongly, so up to 5% of elements may be off by <= 2x.
CPU_FP8_MAX_SHARE = 0.05
CPU_FP8_MAX_RATIO = 2.0


@dataclass
class CheckOutcome:
    """The comparison's result for one (shape, seed)."""

    verdict: Verdict
    message: str = ""
    max_abs_err: float = 0.0
    rel_l2_err: float = 0.0
    flags: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the outputs are accepted."""
        return self.verdict is Verdict.ACCEPTED

    def combined(self, other: CheckOutcome) -> CheckOutcome:
        """Two accepted outcomes as one: the worst errors and every flag."""
        return CheckOutcome(
            Verdict.ACCEPTED,
            "",
            max(self.max_abs_err, other.max_abs_err),
            max(self.rel_l2_err, other.rel_l2_err),
            sorted({*self.flags, *other.flags}),
        )


def tolerance_for(
    dtype_name: str,
    *,
    allow_tf32: bool = False,
    reduction_len: int = 0,
    override: Tolerance | None = None,
) -> Tolerance:
    """Pick the tolerance of an output dtype (``torch.float32`` -> ``float32``)."""
    key = dtype_name.replace("torch.", "")
    if override is not None:
        return override
    if key == "float32" and allow_tf32:
        key = "tf32"
    tol = TOLERANCES.get(key, TOLERANCES["float32"])
    if reduction_len > LONG_REDUCTION and key in ("float32", "float16", "tf32"):
        tol = Tolerance(
            tol.atol * LONG_REDUCTION_WIDEN, tol.rtol * LONG_REDUCTION_WIDEN, tol.atol_scale
        )
    return tol


def _is_fp8(t: Any) -> bool:
    return "float8" in str(t.dtype)


def _expand_scale(scale: Any, like: Any) -> Any:
    """Broadcast a per-token/per-group/per-block scale to ``like``'s shape by repeating blocks."""
    s = scale.float()
    # a scale with fewer dims is per leading index when its shape matches like's leading dims
    # (per-token (T,) for a (T, H) output), otherwise broadcast from the left as usual
    leading = s.dim() > 0 and tuple(s.shape) == tuple(like.shape[: s.dim()])
    while s.dim() < like.dim():
        s = s.unsqueeze(-1) if leading else s.unsqueeze(0)
    for d in range(like.dim()):
        if s.shape[d] not in (1, like.shape[d]):
            block = math.ceil(like.shape[d] / s.shape[d])
            s = s.repeat_interleave(block, dim=d).narrow(d, 0, like.shape[d])
    return s.expand(like.shape)


def _float_check(out: Any, ref: Any, tol: Tolerance, name: str) -> CheckOutcome:
    import torch

    o, r = out.double(), ref.double()
    ref_nan, out_nan = torch.isnan(r), torch.isnan(o)
    if bool((out_nan & ~ref_nan).any()):
        n = int((out_nan & ~ref_nan).sum())
        return CheckOutcome(
            Verdict.NON_FINITE, f"output {name!r}: {n} NaN where the reference is finite"
        )
    ref_inf, out_inf = torch.isinf(r), torch.isinf(o)
    if bool((ref_inf != out_inf).any()) or bool((o[ref_inf] != r[ref_inf]).any()):
        verdict = Verdict.NON_FINITE if bool((out_inf & ~ref_inf).any()) else Verdict.WRONG_OUTPUT
        return CheckOutcome(verdict, f"output {name!r}: +-Inf does not match the reference")
    finite = torch.isfinite(r)
    o, r = o[finite], r[finite]
    diff = (o - r).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    ref_norm = float(torch.linalg.vector_norm(r)) if r.numel() else 0.0
    err_norm = float(torch.linalg.vector_norm(o - r)) if r.numel() else 0.0
    rel_l2 = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else math.inf)
    atol = tol.atol * (
        ref_norm / math.sqrt(r.numel()) if tol.atol_scale == "rms" and r.numel() else 1.0
    )
    bad = diff > atol + tol.rtol * r.abs()
    if bool(bad.any()):
        idx = int(bad.nonzero()[0][0])
        return CheckOutcome(
            Verdict.WRONG_OUTPUT,
            f"output {name!r}: {int(bad.sum())}/{bad.numel()} elements outside "
            f"atol={tol.atol:g} rtol={tol.rtol:g} (first at flat index {idx}: "
            f"{float(o[idx]):.6g} vs {float(r[idx]):.6g}); max |err| {max_abs:.3g}",
            max_abs,
            rel_l2,
        )
    if ref_norm > 0 and rel_l2 > tol.rtol:
        return CheckOutcome(
            Verdict.WRONG_OUTPUT,
            f"output {name!r}: relative L2 error {rel_l2:.3g} > {tol.rtol:g}",
            max_abs,
            rel_l2,
        )
    if ref_norm == 0 and err_norm > tol.atol * math.sqrt(max(1, r.numel())):
        return CheckOutcome(
            Verdict.WRONG_OUTPUT,
            f"output {name!r}: reference is zero, output is not",
            max_abs,
            rel_l2,
        )
    return CheckOutcome(Verdict.ACCEPTED, "", max_abs, rel_l2)


def _fp8_check(
    out: Any, ref: Any, out_scale: Any, ref_scale: Any, name: str, *, cpu: bool
) -> CheckOutcome:
    import torch

    scale = _expand_scale(ref_scale, ref).double()
    o = out.float().double() * _expand_scale(out_scale, out).double()
    r = ref.float().double() * scale
    if bool(torch.isnan(o).any()):
        return CheckOutcome(
            Verdict.NON_FINITE, f"fp8 output {name!r} holds NaN after dequantisation"
        )
    diff = (o - r).abs()
    bad = diff > FP8_ELEMENT_RTOL * r.abs() + FP8_SUBNORMAL * scale
    ref_norm = float(torch.linalg.vector_norm(r))
    rel_l2 = float(torch.linalg.vector_norm(o - r)) / ref_norm if ref_norm > 0 else 0.0
    max_abs = float(diff.max()) if diff.numel() else 0.0
    flags: list[str] = []
    n_bad = int(bad.sum())
    if n_bad and cpu:
        ratio = (o[bad].abs() + 1e-30) / (r[bad].abs() + 1e-30)
        within = bool(((ratio <= CPU_FP8_MAX_RATIO) & (ratio >= 1 / CPU_FP8_MAX_RATIO)).all())
        if n_bad <= CPU_FP8_MAX_SHARE * bad.numel() and within:
            flags.append("cpu_fp8_approximate")
            n_bad = 0
    if n_bad:
        return CheckOutcome(
            Verdict.WRONG_OUTPUT,
            f"fp8 output {name!r}: {n_bad}/{bad.numel()} dequantised "
            f"elements off by more than one e4m3 step",
            max_abs,
            rel_l2,
        )
    if rel_l2 > FP8_NORM_RTOL and not flags:
        return CheckOutcome(
            Verdict.WRONG_OUTPUT,
            f"fp8 output {name!r}: dequantised relative L2 error {rel_l2:.3g} > {FP8_NORM_RTOL}",
            max_abs,
            rel_l2,
        )
    return CheckOutcome(Verdict.ACCEPTED, "", max_abs, rel_l2, flags)


def _exact_check(out: Any, ref: Any, name: str) -> CheckOutcome:
    import torch

    if torch.equal(out, ref):
        return CheckOutcome(Verdict.ACCEPTED)
    n = int((out != ref).sum())
    return CheckOutcome(
        Verdict.WRONG_OUTPUT,
        f"output {name!r}: {n}/{ref.numel()} values differ (exact match required)",
    )


def _structure_check(
    cand: dict[str, Any], ref: dict[str, Any], match_dtype: bool
) -> CheckOutcome | None:
    cs, rs = cand["structure"], ref["structure"]
    if cs["kind"] != rs["kind"] or cs["keys"] != rs["keys"]:
        return CheckOutcome(
            Verdict.BAD_STRUCTURE,
            f"output is a {cs['kind']} with keys {cs['keys']}; "
            f"the reference returns a {rs['kind']} with keys {rs['keys']}",
        )
    for key in rs["keys"]:
        o, r = cand["tensors"][key], ref["tensors"][key]
        if tuple(o.shape) != tuple(r.shape):
            return CheckOutcome(
                Verdict.BAD_STRUCTURE,
                f"output {key!r} has shape {tuple(o.shape)}, expected {tuple(r.shape)}",
            )
        if match_dtype and o.dtype != r.dtype:
            return CheckOutcome(
                Verdict.BAD_STRUCTURE, f"output {key!r} is {o.dtype}, expected {r.dtype}"
            )
        if cs.get("devices", {}).get(key) != rs.get("devices", {}).get(key):
            return CheckOutcome(
                Verdict.BAD_STRUCTURE,
                f"output {key!r} is on {cs.get('devices', {}).get(key)}, "
                f"expected {rs.get('devices', {}).get(key)}",
            )
    return None


def compare_outputs(
    cand: dict[str, Any],
    ref: dict[str, Any],
    *,
    fp8_scales: dict[str, str],
    allow_tf32: bool = False,
    reduction_len: int = 0,
    override: Tolerance | None = None,
    match_dtype: bool = True,
    cpu: bool = False,
) -> CheckOutcome:
    """Compare one (shape, seed)'s candidate outputs with the reference's.

    Args:
        cand: ``{"structure", "tensors", "extra"}`` as the worker saved it (extra: in-place inputs).
        ref: The same from the reference worker.
        fp8_scales: fp8 output key -> key of its scale output.
        allow_tf32: Use tf32's tolerance for fp32 outputs.
        reduction_len: Longest reduction in the problem (widens fp32/fp16 past 4096).
        override: The problem's tolerance override.
        match_dtype: Require reference dtypes.
        cpu: Interpreter mode (fp8 rounding is approximate there).
    """
    bad = _structure_check(cand, ref, match_dtype)
    if bad is not None:
        return bad
    pairs = [(k, cand["tensors"][k], ref["tensors"][k]) for k in ref["structure"]["keys"]]
    pairs += [(f"in_place:{k}", cand["extra"].get(k), v) for k, v in ref.get("extra", {}).items()]
    scale_keys = set(fp8_scales.values())
    worst = CheckOutcome(Verdict.ACCEPTED)
    for name, o, r in pairs:
        if o is None:
            return CheckOutcome(Verdict.BAD_STRUCTURE, f"{name}: missing")
        if name in scale_keys and not r.is_floating_point():
            continue
        if _is_fp8(r):
            key = fp8_scales.get(name)
            if key is None:
                outcome = _float_check(o.float(), r.float(), Tolerance(0.0, FP8_ELEMENT_RTOL), name)
            else:
                outcome = _fp8_check(o, r, cand["tensors"][key], ref["tensors"][key], name, cpu=cpu)
        elif r.is_floating_point():
            tol = tolerance_for(
                str(r.dtype), allow_tf32=allow_tf32, reduction_len=reduction_len, override=override
            )
            outcome = _float_check(o.to(r.dtype) if o.dtype != r.dtype else o, r, tol, name)
        else:
            outcome = _exact_check(o, r, name)
        if not outcome.ok:
            return outcome
        worst = worst.combined(outcome)
    return worst
