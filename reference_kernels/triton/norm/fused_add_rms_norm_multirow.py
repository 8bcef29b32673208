"""
---
id: fused_add_rms_norm_multirow
title: Residual add fused with RMSNorm over 2D tiles of BLOCK_M rows, both results written
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [multi-row-tile, 2d-block, weight-reuse, fused-residual-add, output-dtype-rounding]
status: reference
launcher: fused_add_rms_norm_multirow
tuning:
  block_m: [4, 1, 2, 8, 16, 32]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  residual: {shape: [..., N], like: x, aliases: [residual_in, res]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: out, shape: [..., N], dtype: x}
  - {name: residual_out, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 33, hidden: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
The pre-norm step of atrex30 fused_add_rms_norm: residual_out = round(x + residual) to the
activation dtype, out = round(r * rsqrt(mean(r^2) + eps) * w) with r = residual_out upcast to fp32,
so the norm reads the ROUNDED sum, as the reference does. Each program owns a (BLOCK_M, BLOCK_N)
tile: BLOCK_M consecutive rows padded to BLOCK_N = next_pow2(N); the weight row is loaded once per
program and broadcast over the tile, the sums of squares are reduced along axis 1. Both outputs are
fresh tensors: the reference leaves x and residual untouched (vLLM's original updates them in
place), so this launcher never writes into its inputs. Bytes per element: 2 reads + 2 writes (8
bytes in bf16). Multi-row tiles suit narrow rows (N <= 2048) with many tokens, where one program
per row makes programs too small to hide memory latency. Limits: the tile lives in registers, so
wide rows need BLOCK_M = 1..2; with few rows, a large BLOCK_M leaves SMs idle.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _fused_add_rms_norm_multirow_kernel(
    # pointers
    x_ptr,
    res_ptr,
    w_ptr,
    y_ptr,
    res_out_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_rm,
    stride_ym,
    stride_om,
    # scalars
    eps,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    mask = (rows < M)[:, None] & col_mask[None, :]
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements

    x = tl.load(x_ptr + rows64 * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + rows64 * stride_rm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    # the sum is rounded to the storage dtype once; the norm reads the rounded value
    h = (x + r).to(res_out_ptr.dtype.element_ty)
    tl.store(res_out_ptr + rows64 * stride_om + cols[None, :], h, mask=mask)
    h = h.to(tl.float32)

    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)  # once per BLOCK_M rows
    inv_rms = tl.rsqrt(tl.sum(h * h, axis=1) / N + eps)  # (BLOCK_M,), padded lanes are 0
    y = h * inv_rms[:, None] * w[None, :]
    tl.store(y_ptr + rows64 * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return a tile of about 4096 elements (at most the row count) and its warps."""
    block_n = triton.next_power_of_2(n)
    block_m = max(1, min(4096 // block_n, triton.next_power_of_2(m), 32))
    return {
        "block_m": block_m,
        "block_n": block_n,
        "num_warps": 4 if block_m * block_n >= 2048 else 2,
    }


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """Return t viewed as (M, n) with a contiguous last dimension (copying only if needed)."""
    t2 = t.reshape(-1, n)
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def fused_add_rms_norm_multirow(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (RMSNorm(x + residual) * weight, x + residual), computed over multi-row tiles.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        residual: same shape and dtype as ``x`` (never written).
        weight: (N,) any float dtype.
        eps: Added to mean(h^2) before the reciprocal square root.
        block_m: Rows per program (power of two); None picks about 4096 elements per tile.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        (out, residual_out): both shaped and typed like ``x``, fresh tensors.

    Raises:
        ValueError: The shapes or dtypes do not match, the row is wider than 65536, or block_m
            is not a power of two.
    """
    n = x.shape[-1]
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError(
            f"residual must match x {tuple(x.shape)} {x.dtype}; "
            f"got {tuple(residual.shape)} {residual.dtype}"
        )
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    if n > 65536:
        raise ValueError(f"row width {n} > 65536 does not fit in registers")
    if block_m is not None and (block_m < 1 or block_m & (block_m - 1)):
        raise ValueError(f"block_m must be a power of two; got {block_m}")
    x2, r2 = _rows(x, n), _rows(residual, n)
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    res_out = torch.empty_like(y)
    if y.numel() > 0:
        cfg = _launch_config(m, n)
        given = {"block_m": block_m, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        # keep the tile within Triton's 2^20 elements
        cfg["block_m"] = max(1, min(cfg["block_m"], 2**20 // cfg["block_n"]))
        _fused_add_rms_norm_multirow_kernel[(triton.cdiv(m, cfg["block_m"]),)](
            x2, r2, weight.contiguous(), y, res_out,
            m, n,
            x2.stride(0), r2.stride(0), y.stride(0), res_out.stride(0),
            eps,
            BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    return y.reshape(x.shape), res_out.reshape(x.shape)


def reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (RMSNorm(h) * weight, h) with h = x + residual rounded to x's dtype, norm in fp32."""
    h = (x.float() + residual.float()).to(x.dtype)
    hf = h.float()
    y = hf * torch.rsqrt(hf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype), h


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "residual", "weight"}`` for ``shape = {"rows", "hidden"}`` (atrex scales)."""
    rows, hidden = shape["rows"], shape["hidden"]
    x = (torch.randn(rows, hidden, device=device) * 0.02).to(dtype)
    residual = torch.randn(rows, hidden, device=device).to(dtype)
    weight = (1.0 + 0.02 * torch.randn(hidden, device=device)).to(dtype)
    return {"x": x, "residual": residual, "weight": weight}
