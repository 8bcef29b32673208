"""
---
id: fused_add_rms_norm_looped
title: Residual add fused with RMSNorm for rows of any width, two chunked passes per row
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, two-pass, fused-residual-add, fp32-accumulate]
status: reference
launcher: fused_add_rms_norm_looped
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
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
  shapes: [{rows: 6, hidden: 1000}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
The pre-norm transformer step h = x + residual; y = RMSNorm(h) * w for rows of any width: one
program per row walks it in BLOCK_N chunks twice. Pass 1 adds x and residual in fp32, rounds h to
the activation dtype, stores it as residual_out (the next layer's residual) and accumulates the
element-wise sum of h^2 from that rounded h (reduced once after the loop); pass 2 re-reads h from
residual_out (an L2 hit for rows up to a few MB), scales by rsqrt(mean(h^2) + eps) and the weight in
fp32 and stores y. Numerics match fused_add_rms_norm_rowwise (the norm of the rounded h, as the
unfused ops compute it). Traffic: 2 reads + 2 writes + 1 re-read per element (10 bytes in bf16 when
the re-read misses L2), registers bounded by BLOCK_N. Limits: one program per row, so decode batches
use few SMs; for rows that fit in registers fused_add_rms_norm_rowwise skips the re-read.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _fused_add_rms_norm_looped_kernel(
    # pointers
    x_ptr,
    res_ptr,
    w_ptr,
    y_ptr,
    res_out_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_rm,
    stride_ym,
    stride_om,
    # scalars
    eps,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    x_row = x_ptr + row * stride_xm
    r_row = res_ptr + row * stride_rm
    h_row = res_out_ptr + row * stride_om
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK_N)

    # pass 1: h = x + r rounded once to the storage dtype, stored; fp32 partial sums of h^2
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_row + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(res_out_ptr.dtype.element_ty)
        tl.store(h_row + cols, h, mask=mask)
        hf = h.to(tl.float32)
        acc += hf * hf
    inv_rms = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)

    # pass 2: re-read the rounded h this program just wrote (mostly from L2), scale, store
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        h = tl.load(h_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (h * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_n = min(triton.next_power_of_2(n), 4096)
    return {"block_n": block_n, "num_warps": min(max(block_n // 256, 1), 8)}


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """Return t viewed as (M, n) with a contiguous last dimension (copying only if needed)."""
    t2 = t.reshape(-1, n)
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def fused_add_rms_norm_looped(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (RMSNorm(x + residual) * weight, x + residual) over the last dimension.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous; N may be arbitrarily large.
        residual: same shape and dtype as ``x``.
        weight: (N,) any float dtype, contiguous.
        eps: Added to mean(h^2) before the reciprocal square root.
        block_n: Chunk width (power of two); None picks min(next_pow2(N), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        (out, residual_out): both shaped and typed like ``x``; residual_out = x + residual
        rounded to x's dtype, out = RMSNorm(residual_out) * weight computed in fp32.

    Raises:
        ValueError: The shapes or dtypes do not match.
    """
    n = x.shape[-1]
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError(
            f"residual must match x {tuple(x.shape)} {x.dtype}; "
            f"got {tuple(residual.shape)} {residual.dtype}"
        )
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    x2, r2 = _rows(x, n), _rows(residual, n)
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    res_out = torch.empty_like(y)
    if y.numel() > 0:
        cfg = _launch_config(n)
        given = {"block_n": block_n, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        _fused_add_rms_norm_looped_kernel[(m,)](
            x2, r2, weight.contiguous(), y, res_out,
            n,
            x2.stride(0), r2.stride(0), y.stride(0), res_out.stride(0),
            eps,
            BLOCK_N=cfg["block_n"],
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
