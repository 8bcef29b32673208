"""
---
id: rms_norm_quant_fp8_persistent
title: Residual add, RMSNorm and per-token FP8 quantisation on a persistent grid over rows
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [persistent-grid, grid-stride-rows, weight-reuse, single-pass, fused-residual-add,
  fused-norm-quant, absmax-reduction, fp8-e4m3]
status: reference
launcher: rms_norm_quant_fp8_persistent
tuning:
  programs_per_sm: [4, 1, 2, 8]
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  residual: {shape: [T, N], like: x, aliases: [residual_in, res]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  eps: {type: float, default: 1.0e-5, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: q, shape: [T, N], dtype: fp8_e4m3fn}
  - {name: scale, shape: [T, 1], dtype: fp32}
  - {name: residual_out, shape: [T, N], dtype: x}
problem:
  shapes: [{rows: 9, hidden: 300}, {rows: 2, hidden: 128}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
atrex30 fused_rmsnorm_quant on a persistent grid: residual_out = round(x + residual) to the
activation dtype; y = r * rsqrt(mean(r^2) + eps) * w in fp32 from the rounded sum r; per row scale =
absmax(y) / 448 (1 for an all-zero row) and q = fp8_e4m3fn(clamp(y / scale, +-448)). The grid is
min(T, programs_per_sm x SMs) programs; each loads the weight row into registers ONCE, then strides
over rows p, p + grid, ...: load x and residual, add, round and store residual_out, reduce the sum
of squares, form y in registers, reduce its absmax, store the scale and the fp8 row. Every element
is read once (4 bytes bf16 in, 2 + 1 out) and the weight is read grid times instead of T times,
which matters at prefill (T = 8192 rows of 7168: the weight is 14 KB per row otherwise refetched
from L2). Compared with rms_norm_quant_fp8_multirow (one 2-D tile of rows per program) the row
loop keeps one row live at a time, so registers do not grow with the rows a program serves. Limits:
rows wider than 65536 do not fit (use rms_norm_quant_fp8_looped); at decode (T below the grid)
it is one program per row; e4m3fn only.
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn
MAX_WIDTH = 65536  # widest row held in registers


@triton.jit
def _rms_norm_quant_fp8_persistent_kernel(
    # pointers
    x_ptr,
    res_ptr,
    w_ptr,
    q_ptr,
    scale_ptr,
    res_out_ptr,
    # sizes
    M,
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
    BLOCK_N: tl.constexpr,
):
    # int64 start makes the loop variable int64: row * stride can pass 2^31 elements
    pid = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # once per program
    for row in range(pid, M, tl.num_programs(0)):
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(res_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(res_out_ptr.dtype.element_ty)  # residual_out is stored rounded
        tl.store(res_out_ptr + row * stride_om + cols, h, mask=mask)
        h = h.to(tl.float32)  # and the norm reads the rounded value
        y = h * tl.rsqrt(tl.sum(h * h, axis=0) / N + eps) * w
        amax = tl.max(tl.abs(y), axis=0)
        scale = tl.where(amax == 0.0, 1.0, amax / fp8_max)
        tl.store(scale_ptr + row, scale)
        q = tl.clamp(y / scale, -fp8_max, fp8_max)
        tl.store(q_ptr + row * stride_qm + cols, q.to(q_ptr.dtype.element_ty), mask=mask)


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def rms_norm_quant_fp8_persistent(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-5,
    *,
    programs_per_sm: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (q, scale, residual_out) for q * scale ~ rmsnorm(x + residual) * weight.

    Args:
        x: (T, N) bf16/fp16/fp32, last dimension contiguous, N <= 65536.
        residual: (T, N) same dtype as x (never written).
        weight: (N,) any float dtype.
        eps: Added to mean(r^2) before the reciprocal square root.
        programs_per_sm: Persistent programs per SM (grid = min(T, this * SMs)); None = 4.
        num_warps: Warps per program; None picks by row width.

    Returns:
        (q, scale, residual_out): q (T, N) float8_e4m3fn; scale (T, 1) fp32; residual_out (T, N)
        = x + residual rounded to x's dtype.

    Raises:
        ValueError: The shapes or dtypes do not match, or N > 65536.
    """
    if x.dim() != 2 or weight.shape != (x.shape[1],) or x.shape[1] > MAX_WIDTH:
        raise ValueError(
            f"need x (T, N <= {MAX_WIDTH}), weight (N,); "
            f"got {tuple(x.shape)}, {tuple(weight.shape)}"
        )
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError(
            f"residual must match x {tuple(x.shape)} {x.dtype}; "
            f"got {tuple(residual.shape)} {residual.dtype}"
        )
    x = x if x.stride(-1) == 1 else x.contiguous()
    residual = residual if residual.stride(-1) == 1 else residual.contiguous()
    t, n = x.shape
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((t, 1), dtype=torch.float32, device=x.device)
    res_out = torch.empty((t, n), dtype=x.dtype, device=x.device)
    if t == 0 or n == 0:
        return q, scale.fill_(1.0), res_out
    block_n = triton.next_power_of_2(n)
    ppsm = 4 if programs_per_sm is None else programs_per_sm
    warps = min(max(block_n // 512, 1), 16) if num_warps is None else num_warps
    _rms_norm_quant_fp8_persistent_kernel[(min(t, ppsm * _num_sms(x.device)),)](
        x, residual, weight.contiguous(), q, scale, res_out,
        t, n,
        x.stride(0), residual.stride(0), q.stride(0), res_out.stride(0),
        eps, FP8_MAX,
        BLOCK_N=block_n,
        num_warps=warps,
    )  # fmt: skip
    return q, scale, res_out


def reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (q, scale, residual_out) computed in fp32 PyTorch (atrex30 fused_rmsnorm_quant)."""
    res_out = (x.float() + residual.float()).to(x.dtype)
    h = res_out.float()
    y = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    amax = y.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / FP8_MAX)
    q = (y / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale, res_out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "residual", "weight"}`` for ``shape = {"rows", "hidden"}``, all N(0, 1)."""
    rows, hidden = shape["rows"], shape["hidden"]
    return {
        "x": torch.randn(rows, hidden, device=device).to(dtype),
        "residual": torch.randn(rows, hidden, device=device).to(dtype),
        "weight": torch.randn(hidden, device=device).to(dtype),
    }
