"""
---
id: rms_norm_quant_fp8_fused
title: Residual add, RMSNorm and dynamic per-token FP8 quantisation fused, one program per row
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [row-per-program, fused-residual-add, fused-norm-quant, absmax-reduction, fp8-e4m3]
status: reference
launcher: rms_norm_quant_fp8_fused
tuning:
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  residual: {shape: [T, N], like: x, optional: true, aliases: [residual_in, res]}
  eps: {type: float, default: 1.0e-5, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: q, shape: [T, N], dtype: fp8_e4m3fn}
  - {name: scale, shape: [T, 1], dtype: fp32}
  - {name: residual_out, shape: [T, N], dtype: x, requires: residual}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 33, hidden: 64}]
  dtypes: [fp32, bf16]
  atol: 0.01
  rtol: 0.01
measured: []
---
The pre-GEMM step of an FP8 transformer layer in one kernel: h = x + residual (rounded to the
activation dtype and written as residual_out; optional), y = rmsnorm(h) * w in fp32, then a dynamic
per-token scale = absmax(y) / 448 (1 for an all-zero row) and q = y / scale as float8_e4m3fn. With
the row in registers, the normalised row never touches memory: the absmax is a second reduction over
registers. Bytes per bf16 element: 4 read (x, residual) + 2 written (residual_out) + 1 written (q),
versus 4 + 2 + 2 + 2 + 1 for separate add-norm and quant kernels. y stays fp32 up to the fp8 cast
(atrex's reference rounds y to bf16 first, so an fp8 value may differ by one step). Limits: rows
wider than 65536 do not fit in registers; one program per row; e4m3fn only (ROCm e4m3fnuz uses 240);
the clamp to +-448 only guards against rounding of y / scale just above 448.
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn


@triton.jit
def _rms_norm_quant_fp8_fused_kernel(
    # pointers
    x_ptr,
    res_ptr,
    w_ptr,
    q_ptr,
    scale_ptr,
    res_out_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_rm,
    stride_qm,
    stride_om,
    # scalars
    eps,
    fp8_max,
    # meta
    HAS_RESIDUAL: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N

    h = tl.load(x_ptr + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        h += tl.load(res_ptr + row * stride_rm + offs, mask=mask, other=0.0).to(tl.float32)
        # residual_out is stored rounded, and the norm reads the rounded value (as unfused ops do)
        h_stored = h.to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_om + offs, h_stored, mask=mask)
        h = h_stored.to(tl.float32)

    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = h * tl.rsqrt(tl.sum(h * h, axis=0) / N + eps) * w  # fp32, never stored

    amax = tl.max(tl.abs(y), axis=0)  # second reduction, from registers
    scale = tl.where(amax == 0.0, 1.0, amax / fp8_max)
    tl.store(scale_ptr + row, scale)
    q = tl.clamp(y / scale, -fp8_max, fp8_max)
    tl.store(q_ptr + row * stride_qm + offs, q.to(q_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return the row block (next power of two) and warps: about 8 to 16 elements per thread."""
    block_n = triton.next_power_of_2(n)
    return {"block_n": block_n, "num_warps": min(max(block_n // 512, 1), 16)}


def rms_norm_quant_fp8_fused(
    x: torch.Tensor,
    weight: torch.Tensor,
    residual: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Return (q, scale, residual_out) for q * scale ~ rmsnorm(x + residual) * weight.

    Args:
        x: (T, N) bf16/fp16/fp32, last dimension contiguous.
        weight: (N,) any float dtype, contiguous.
        residual: (T, N) same dtype as x, or None for a plain norm.
        eps: Added to mean(h^2) before the reciprocal square root.
        num_warps: Warps per program; None picks by row width.

    Returns:
        (q, scale, residual_out): q (T, N) float8_e4m3fn; scale (T, 1) fp32; residual_out (T, N)
        = x + residual rounded to x's dtype, or None without a residual.

    Raises:
        ValueError: The shapes or dtypes do not match, or N > 65536.
    """
    if x.dim() != 2 or weight.shape != (x.shape[1],) or x.shape[1] > 65536:
        raise ValueError(
            f"need x (T, N <= 65536), weight (N,); got {tuple(x.shape)}, {tuple(weight.shape)}"
        )
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(
            f"residual must match x {tuple(x.shape)} {x.dtype}; got {tuple(residual.shape)}"
        )
    x = x if x.stride(-1) == 1 else x.contiguous()
    t, n = x.shape
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((t, 1), dtype=torch.float32, device=x.device)
    res_out = None if residual is None else torch.empty((t, n), dtype=x.dtype, device=x.device)
    if t == 0 or n == 0:
        return q, scale, res_out
    res = (
        x if residual is None else (residual if residual.stride(-1) == 1 else residual.contiguous())
    )
    out_buf = x if res_out is None else res_out  # never written without a residual
    cfg = _launch_config(n)
    if num_warps is not None:
        cfg["num_warps"] = num_warps
    _rms_norm_quant_fp8_fused_kernel[(t,)](
        x, res, weight.contiguous(), q, scale, out_buf,
        n,
        x.stride(0), res.stride(0), q.stride(0), out_buf.stride(0),
        eps, FP8_MAX,
        HAS_RESIDUAL=residual is not None,
        BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return q, scale, res_out


def reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    residual: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Return (q, scale, residual_out) computed in fp32 PyTorch (y kept fp32 up to the cast)."""
    res_out = None if residual is None else (x.float() + residual.float()).to(x.dtype)
    h = (x if res_out is None else res_out).float()
    y = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    amax = y.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / FP8_MAX)
    q = (y / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale, res_out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"rows", "hidden"}`` (atrex: x, residual, weight ~ N(0, 1)).

    ``"residual": False`` drops the residual input.
    """
    rows, hidden = shape["rows"], shape["hidden"]
    x = torch.randn(rows, hidden, device=device).to(dtype)
    weight = torch.randn(hidden, device=device).to(dtype)
    residual = (
        torch.randn(rows, hidden, device=device).to(dtype) if shape.get("residual", True) else None
    )
    return {"x": x, "weight": weight, "residual": residual}
