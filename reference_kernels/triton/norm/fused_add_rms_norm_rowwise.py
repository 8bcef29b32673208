"""
---
id: fused_add_rms_norm_rowwise
title: Residual add fused with RMSNorm, one program per row, both results written
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, fused-residual-add, output-dtype-rounding, fp32-accumulate]
status: reference
launcher: fused_add_rms_norm_rowwise
tuning:
  num_warps: [4, 1, 2, 8, 16]
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
The pre-norm transformer step h = x + residual; y = RMSNorm(h) * w in one kernel, one program per
row with the whole row in registers. h is rounded to the activation dtype first (it is stored as the
next layer's residual) and the norm is computed from that rounded h in fp32, so the two outputs
agree with running the unfused ops in sequence. Fusing saves one full write and read of h: traffic
is 2 reads + 2 writes per element (8 bytes in bf16) instead of 12. Unlike the in-place production
variants, both outputs are fresh tensors, so the inputs are never mutated. Limits: rows wider than
65536 do not fit in registers; one program per row, so decode batches use few SMs.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _fused_add_rms_norm_rowwise_kernel(
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
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N

    x = tl.load(x_ptr + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + row * stride_rm + offs, mask=mask, other=0.0).to(tl.float32)

    # h is rounded to the storage dtype once; the norm reads the rounded h, as the unfused ops do
    h = (x + r).to(res_out_ptr.dtype.element_ty)
    tl.store(res_out_ptr + row * stride_om + offs, h, mask=mask)
    h = h.to(tl.float32)

    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(h * h, axis=0) / N + eps)  # fp32 reduction; padded lanes are 0
    tl.store(
        y_ptr + row * stride_ym + offs, (h * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask
    )


def _launch_config(n: int) -> dict[str, int]:
    """Return the row block (next power of two) and warps: about 8 to 16 elements per thread."""
    block_n = triton.next_power_of_2(n)
    return {"block_n": block_n, "num_warps": min(max(block_n // 512, 1), 16)}


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """Return t viewed as (M, n) with a contiguous last dimension (copying only if needed)."""
    t2 = t.reshape(-1, n)
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def fused_add_rms_norm_rowwise(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (RMSNorm(x + residual) * weight, x + residual) over the last dimension.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        residual: same shape and dtype as ``x``.
        weight: (N,) any float dtype, contiguous.
        eps: Added to mean(h^2) before the reciprocal square root.
        num_warps: Warps per program; None picks by row width.

    Returns:
        (out, residual_out): both shaped and typed like ``x``; residual_out = x + residual
        rounded to x's dtype, out = RMSNorm(residual_out) * weight computed in fp32.

    Raises:
        ValueError: The shapes or dtypes do not match, or the row is wider than 65536.
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
    x2, r2 = _rows(x, n), _rows(residual, n)
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    res_out = torch.empty_like(y)
    if y.numel() > 0:
        cfg = _launch_config(n)
        if num_warps is not None:
            cfg["num_warps"] = num_warps
        _fused_add_rms_norm_rowwise_kernel[(m,)](
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
