"""
---
id: rms_norm_quant_fp8_multirow
title: Residual add, RMSNorm and per-token FP8 quantisation over 2D tiles of BLOCK_M rows
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [multi-row-tile, 2d-block, weight-reuse, fused-residual-add, fused-norm-quant,
  absmax-reduction, fp8-e4m3]
status: reference
launcher: rms_norm_quant_fp8_multirow
tuning:
  block_m: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
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
  shapes: [{rows: 3, hidden: 1000}, {rows: 33, hidden: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
atrex30 fused_rmsnorm_quant over multi-row tiles: residual_out = round(x + residual) to the
activation dtype; y = r * rsqrt(mean(r^2) + eps) * w in fp32 from the rounded sum r, never rounded
to bf16; per row scale = absmax(y) / 448 (1 for an all-zero row) and q = fp8_e4m3fn(clamp(y /
scale, +-448)). Each program owns a (BLOCK_M, next_pow2(N)) tile: the weight is loaded once and
broadcast over BLOCK_M rows, and both row reductions (sum of squares, then absmax of y) run along
axis 1 over registers, so y never touches memory. Bytes per bf16 element: 4 read (x, residual) + 2
written (residual_out) + 1 written (q), plus 4 bytes of scale per row. The tile suits many tokens
with narrow to medium rows (N <= 4096), where a program per row is too small to hide latency.
Limits: the tile lives in registers, so wide rows need BLOCK_M = 1..2 and rows past 65536 are
refused; e4m3fn only (ROCm's e4m3fnuz tops out at 240); the clamp only guards fp32 rounding of
y / scale just above 448.
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn


@triton.jit
def _rms_norm_quant_fp8_multirow_kernel(
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
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < M
    col_mask = cols < N
    mask = row_mask[:, None] & col_mask[None, :]
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements

    x = tl.load(x_ptr + rows64 * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + rows64 * stride_rm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    # residual_out is stored rounded, and the norm reads the rounded value
    h = (x + r).to(res_out_ptr.dtype.element_ty)
    tl.store(res_out_ptr + rows64 * stride_om + cols[None, :], h, mask=mask)
    h = h.to(tl.float32)

    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)  # once per BLOCK_M rows
    inv_rms = tl.rsqrt(tl.sum(h * h, axis=1) / N + eps)
    y = h * inv_rms[:, None] * w[None, :]  # fp32, never stored

    amax = tl.max(tl.abs(y), axis=1)  # (BLOCK_M,), padded lanes are 0
    scale = tl.where(amax == 0.0, 1.0, amax / fp8_max)
    tl.store(scale_ptr + rows, scale, mask=row_mask)
    q = tl.clamp(y / scale[:, None], -fp8_max, fp8_max)
    tl.store(q_ptr + rows64 * stride_qm + cols[None, :], q.to(q_ptr.dtype.element_ty), mask=mask)


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return a tile of about 4096 elements (at most the row count) and its warps."""
    block_n = triton.next_power_of_2(n)
    block_m = max(1, min(4096 // block_n, triton.next_power_of_2(m), 16))
    return {
        "block_m": block_m,
        "block_n": block_n,
        "num_warps": 4 if block_m * block_n >= 2048 else 2,
    }


def rms_norm_quant_fp8_multirow(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-5,
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (q, scale, residual_out) for q * scale ~ rmsnorm(x + residual) * weight.

    Args:
        x: (T, N) bf16/fp16/fp32, last dimension contiguous.
        residual: (T, N) same dtype as x (never written).
        weight: (N,) any float dtype.
        eps: Added to mean(h^2) before the reciprocal square root.
        block_m: Rows per program (power of two); None picks about 4096 elements per tile.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        (q, scale, residual_out): q (T, N) float8_e4m3fn; scale (T, 1) fp32; residual_out (T, N)
        = x + residual rounded to x's dtype.

    Raises:
        ValueError: The shapes or dtypes do not match, N > 65536, or block_m is not a power of
            two.
    """
    if x.dim() != 2 or weight.shape != (x.shape[1],) or x.shape[1] > 65536:
        raise ValueError(
            f"need x (T, N <= 65536), weight (N,); got {tuple(x.shape)}, {tuple(weight.shape)}"
        )
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError(
            f"residual must match x {tuple(x.shape)} {x.dtype}; "
            f"got {tuple(residual.shape)} {residual.dtype}"
        )
    if block_m is not None and (block_m < 1 or block_m & (block_m - 1)):
        raise ValueError(f"block_m must be a power of two; got {block_m}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    residual = residual if residual.stride(-1) == 1 else residual.contiguous()
    t, n = x.shape
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((t, 1), dtype=torch.float32, device=x.device)
    res_out = torch.empty((t, n), dtype=x.dtype, device=x.device)
    if t == 0 or n == 0:
        return q, scale, res_out
    cfg = _launch_config(t, n)
    given = {"block_m": block_m, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    cfg["block_m"] = max(1, min(cfg["block_m"], 2**20 // cfg["block_n"]))  # Triton's tile limit
    _rms_norm_quant_fp8_multirow_kernel[(triton.cdiv(t, cfg["block_m"]),)](
        x, residual, weight.contiguous(), q, scale, res_out,
        t, n,
        x.stride(0), residual.stride(0), q.stride(0), res_out.stride(0),
        eps, FP8_MAX,
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
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
