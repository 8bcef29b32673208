"""
---
id: layer_norm_rowwise
title: LayerNorm with weight and bias, one program per row, exact two-step mean and variance
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, centered-variance, fp32-accumulate]
status: reference
launcher: layer_norm_rowwise
tuning:
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  weight: {shape: [W], dtypes: [float], aliases: [w]}
  bias: {shape: [W], dtypes: [float], optional: true, aliases: [b]}
  eps: {type: float, default: 1.0e-5, aliases: [epsilon, variance_epsilon, layer_norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 33, hidden: 64}]
  dtypes: [fp32, bf16]
measured: []
---
LayerNorm y = (x - mean) * rsqrt(var + eps) * w + b over the last dimension, one program per row
with the row in registers. The mean is reduced first and the variance is reduced from the centred
values (both in fp32, from registers, so the second reduction costs no memory traffic); this avoids
the cancellation of E[x^2] - mean^2 on rows with a large mean. Bytes per element: one read and one
write of x, plus w and b once per row from L2. Bias is optional; weight and bias may be longer
than the row (atrex30's model holds 8192 entries) and their first N entries are used. Limits: rows
wider than 65536 do not fit in registers; one program per row, so decode batches use few SMs; the
mean and rstd are not returned (no backward here).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_rowwise_kernel(
    # pointers
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # scalars
    eps,
    # meta
    HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N

    x = tl.load(x_ptr + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    # padded lanes must not contribute (x - mean) = -mean to the variance
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / N  # biased variance, as torch's layer_norm
    rstd = tl.rsqrt(var + eps)

    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = xc * rstd * w
    if HAS_BIAS:
        y += tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return the row block (next power of two) and warps: about 8 to 16 elements per thread."""
    block_n = triton.next_power_of_2(n)
    return {"block_n": block_n, "num_warps": min(max(block_n // 512, 1), 16)}


def layer_norm_rowwise(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return LayerNorm(x) * weight + bias over the last dimension.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        weight: (W,) any float dtype with W >= N; the first N entries are used.
        bias: (W,) like weight, or None for no bias.
        eps: Added to the variance before the reciprocal square root.
        num_warps: Warps per program; None picks by row width.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: The shapes do not match or the row is wider than 65536.
    """
    n = x.shape[-1]
    too_short = weight.dim() != 1 or weight.shape[0] < n
    if too_short or (bias is not None and (bias.dim() != 1 or bias.shape[0] < n)):
        got = (tuple(weight.shape), None if bias is None else tuple(bias.shape))
        raise ValueError(f"weight/bias need (>= {n},) for x {tuple(x.shape)}; got {got}")
    if n > 65536:
        raise ValueError(f"row width {n} > 65536 does not fit in registers")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(n)
    if num_warps is not None:
        cfg["num_warps"] = num_warps
    w = weight.contiguous()
    _layer_norm_rowwise_kernel[(x2.shape[0],)](
        x2, w, w if bias is None else bias.contiguous(), y,
        n,
        x2.stride(0), y.stride(0),
        eps,
        HAS_BIAS=bias is not None,
        BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """Return torch's layer_norm with weight[:N], bias[:N], in fp32, cast to x's dtype."""
    n = x.shape[-1]
    b = None if bias is None else bias[:n].float()
    y = torch.nn.functional.layer_norm(x.float(), (n,), weight[:n].float(), b, eps)
    return y.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "weight", "bias"}`` for ``shape = {"rows", "hidden"}``, x of mean 0.5."""
    rows, hidden = shape["rows"], shape["hidden"]
    x = (torch.randn(rows, hidden, device=device) + 0.5).to(dtype)
    weight = torch.randn(hidden, device=device).to(dtype)
    bias = torch.randn(hidden, device=device).to(dtype)
    return {"x": x, "weight": weight, "bias": bias}
