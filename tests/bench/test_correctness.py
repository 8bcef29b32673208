"""The tolerance policy: calibration against lower-precision compute, zero outputs, NaN/Inf, fp8."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from aka.bench import Verdict, compare_outputs, tolerance_for
from aka.spec import Split, load_problem
from tests.bench.conftest import EXAMPLES


def saved(*tensors: torch.Tensor, kind: str | None = None) -> dict[str, Any]:
    """Outputs in the form workers save them."""
    keys = [str(i) for i in range(len(tensors))]
    return {
        "structure": {
            "kind": kind or ("tensor" if len(tensors) == 1 else "tuple"),
            "keys": keys,
            "devices": dict.fromkeys(keys, "cpu"),
        },
        "tensors": dict(zip(keys, tensors, strict=True)),
        "extra": {},
    }


def check(out: torch.Tensor, ref: torch.Tensor, **kwargs: Any) -> Verdict:
    return compare_outputs(saved(out), saved(ref), fp8_scales={}, **kwargs).verdict


def to_tf32(x: torch.Tensor) -> torch.Tensor:
    """Round fp32 to tf32 (10 mantissa bits), as tensor cores read fp32 operands in tf32 mode."""
    bits = x.contiguous().view(torch.int32)
    rounded = (bits + 0x1000) & ~0x1FFF
    return rounded.view(torch.float32)


def rms_norm_fp32(x: torch.Tensor, w: torch.Tensor, compute: torch.dtype) -> torch.Tensor:
    xc, wc = x.to(compute), w.to(compute)
    y = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + 1e-6) * wc
    return y.to(torch.float32)


@pytest.mark.parametrize("hidden", [1000, 8192])
@pytest.mark.parametrize("compute", [torch.float16, torch.bfloat16, "tf32"])
def test_calibration_low_precision_rms_norm_fails_fp32_tolerance(hidden: int, compute: Any) -> None:
    gen = torch.Generator().manual_seed(hidden)
    x = torch.randn(64, hidden, generator=gen)
    w = 1 + 0.1 * torch.randn(hidden, generator=gen)
    ref = rms_norm_fp32(x.double(), w.double(), torch.float64)
    if compute == "tf32":
        out = rms_norm_fp32(to_tf32(x), to_tf32(w), torch.float32)
    else:
        out = rms_norm_fp32(x, w, compute)
    assert check(out, ref, reduction_len=hidden) is Verdict.WRONG_OUTPUT
    # and fp32 compute (a different summation order than the fp64 reference) passes
    assert check(rms_norm_fp32(x, w, torch.float32), ref, reduction_len=hidden) is Verdict.ACCEPTED


@pytest.mark.parametrize("compute", [torch.float16, torch.bfloat16, "tf32"])
def test_calibration_low_precision_gemm_fails_fp32_tolerance(compute: Any) -> None:
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 4096, generator=gen), torch.randn(96, 4096, generator=gen)
    ref = (a.double() @ b.double().T).float()
    if compute == "tf32":
        out = (to_tf32(a).double() @ to_tf32(b).double().T).float()
    else:
        out = (a.to(compute) @ b.to(compute).T).float()
    assert check(out, ref, reduction_len=4096) is Verdict.WRONG_OUTPUT
    assert check(a @ b.T, ref, reduction_len=4096) is Verdict.ACCEPTED
    if compute == "tf32":  # a problem that allows tf32 accepts it
        assert check(out, ref, reduction_len=4096, allow_tf32=True) is Verdict.ACCEPTED


def _load_module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"ref_{path.parent.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "example", sorted(p.name for p in EXAMPLES.iterdir() if (p / "op.yaml").exists())
)
def test_all_zero_output_fails_every_example(example: str) -> None:
    problem = load_problem(EXAMPLES / example / "op.yaml")
    module = _load_module(EXAMPLES / example / "reference.py")
    for shape in problem.shapes_in({Split.SMOKE}):
        torch.manual_seed(0)
        inputs = module._make_inputs(**shape.input_kwargs, device="cpu")
        out = module.Model(**shape.init_kwargs)(**inputs)
        outs = out if isinstance(out, tuple) else (out,)
        ref = saved(*outs)
        zeros = saved(*(torch.zeros_like(t) for t in outs))
        if problem.fp8_scales:  # scales stay right, values are zero: still wrong
            zeros["tensors"]["1"] = outs[1].clone()
        result = compare_outputs(zeros, ref, fp8_scales=problem.fp8_scales)
        assert result.verdict is Verdict.WRONG_OUTPUT, (example, shape.id, result)
        assert compare_outputs(ref, ref, fp8_scales=problem.fp8_scales).ok


def test_constant_output_fails_even_when_close_in_mean() -> None:
    ref = torch.randn(32, 100) * 1e-3 + 5.0
    assert check(torch.full_like(ref, float(ref.mean())), ref) is Verdict.WRONG_OUTPUT


def test_nan_fails_where_reference_is_finite() -> None:
    ref = torch.randn(10, 10)
    out = ref.clone()
    out[3, 4] = float("nan")
    assert check(out, ref) is Verdict.NON_FINITE


def test_nan_in_reference_is_not_held_against_the_candidate() -> None:
    ref = torch.randn(10)
    ref[2] = float("nan")
    out = ref.clone()
    out[2] = 0.0
    assert check(out, ref) is Verdict.ACCEPTED


def test_inf_must_match() -> None:
    ref = torch.randn(8)
    ref[1] = float("inf")
    out = ref.clone()
    assert check(out, ref) is Verdict.ACCEPTED
    out[1] = float("-inf")
    assert check(out, ref) is Verdict.WRONG_OUTPUT
    out[1] = 1e30
    assert check(out, ref) is Verdict.WRONG_OUTPUT
    finite_ref = torch.randn(8)
    out = finite_ref.clone()
    out[0] = float("inf")
    assert check(out, finite_ref) is Verdict.NON_FINITE


def test_integer_outputs_match_exactly() -> None:
    ref = torch.arange(100, dtype=torch.int32)
    out = ref.clone()
    assert check(out, ref) is Verdict.ACCEPTED
    out[99] += 1
    assert check(out, ref) is Verdict.WRONG_OUTPUT


def test_structure_dtype_shape_and_device_are_checked() -> None:
    ref = torch.randn(4, 4)
    assert check(ref.double(), ref) is Verdict.BAD_STRUCTURE
    assert check(ref.reshape(16), ref) is Verdict.BAD_STRUCTURE
    tup = compare_outputs(saved(ref, ref), saved(ref), fp8_scales={})
    assert tup.verdict is Verdict.BAD_STRUCTURE
    moved = saved(ref)
    moved["structure"]["devices"]["0"] = "cuda"
    assert compare_outputs(moved, saved(ref), fp8_scales={}).verdict is Verdict.BAD_STRUCTURE


def test_bf16_tolerance_accepts_one_rounding_and_rejects_bias() -> None:
    ref = torch.randn(256, 512).to(torch.bfloat16)
    out = (ref.float() * (1 + 2**-8)).to(torch.bfloat16)  # under one bf16 ulp of drift
    assert check(out, ref) is Verdict.ACCEPTED
    assert check((ref.float() * 1.05).to(torch.bfloat16), ref) is Verdict.WRONG_OUTPUT


def test_long_reductions_widen_fp32_by_at_most_two() -> None:
    base = tolerance_for("torch.float32")
    wide = tolerance_for("torch.float32", reduction_len=8192)
    assert (wide.atol, wide.rtol) == (2 * base.atol, 2 * base.rtol)
    assert tolerance_for("torch.bfloat16", reduction_len=8192) == tolerance_for("torch.bfloat16")


def _quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (x.abs().amax(-1, keepdim=True) / 448).clamp(min=1e-10)
    return (x / scale).clamp(-448, 448).to(torch.float8_e4m3fn), scale


def test_fp8_outputs_are_compared_after_dequantisation() -> None:
    x = torch.randn(16, 256) * torch.logspace(-2, 2, 16).unsqueeze(1)
    q, s = _quantize(x)
    scales = {"0": "1"}
    assert compare_outputs(saved(q, s), saved(q, s), fp8_scales=scales).ok
    # x * (1/scale) instead of x / scale: some values round to the neighbouring e4m3 step
    q2 = (x * (1.0 / s)).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert compare_outputs(saved(q2, s), saved(q, s), fp8_scales=scales).ok
    # the scales are outputs too: other scales are wrong even if the product is close
    assert not compare_outputs(
        saved((q.float() / 2).to(torch.float8_e4m3fn), s * 2), saved(q, s), fp8_scales=scales
    ).ok
    # wrong values
    bad = (q.float() * 1.5).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert (
        compare_outputs(saved(bad, s), saved(q, s), fp8_scales=scales).verdict
        is Verdict.WRONG_OUTPUT
    )


def test_fp8_cpu_allowance_is_bounded() -> None:
    x = torch.randn(32, 512)
    q, s = _quantize(x)
    off = q.float().clone()
    flat = off.view(-1)
    n = flat.numel()
    flat[: int(0.03 * n)] *= 0.5  # 3% off by 2x: the interpreter's rounding slips
    q_off = off.to(torch.float8_e4m3fn)
    cpu = compare_outputs(saved(q_off, s), saved(q, s), fp8_scales={"0": "1"}, cpu=True)
    assert cpu.ok and "cpu_fp8_approximate" in cpu.flags
    gpu = compare_outputs(saved(q_off, s), saved(q, s), fp8_scales={"0": "1"}, cpu=False)
    assert gpu.verdict is Verdict.WRONG_OUTPUT
    flat[: int(0.10 * n)] *= 0.5  # 10% is too many even on the CPU
    too_many = compare_outputs(
        saved(off.to(torch.float8_e4m3fn), s), saved(q, s), fp8_scales={"0": "1"}, cpu=True
    )
    assert too_many.verdict is Verdict.WRONG_OUTPUT


def test_fp8_per_token_scale_of_fewer_dims_scales_rows() -> None:
    import torch

    from aka.bench.correctness import _expand_scale

    like = torch.zeros(3, 5)
    rows = _expand_scale(torch.tensor([1.0, 2.0, 3.0]), like)
    assert torch.equal(rows, torch.tensor([[1.0] * 5, [2.0] * 5, [3.0] * 5]))
    # per-group scales of the last dim keep broadcasting from the left / by blocks
    groups = _expand_scale(torch.tensor([[1.0, 2.0]]), torch.zeros(3, 4))
    assert torch.equal(groups, torch.tensor([[1.0, 1.0, 2.0, 2.0]] * 3))
