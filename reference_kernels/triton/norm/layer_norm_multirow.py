"""
---
id: layer_norm_multirow
title: LayerNorm over 2D tiles of BLOCK_M narrow rows per program, weight and bias loaded once
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [multi-row-tile, 2d-block, weight-reuse, centered-variance, fp32-accumulate]
status: reference
launcher: layer_norm_multirow
tuning:
  block_m: [8, 1, 2, 4, 16, 32]
  num_warps: [4, 1, 2, 8]
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
LayerNorm y = (x - mean) * rsqrt(var + eps) * w + b (biased variance, fp32 math, one rounding;
atrex30 layer_norm) where each program owns a (BLOCK_M, BLOCK_N) tile: BLOCK_M consecutive rows
padded to BLOCK_N = next_pow2(N). The weight and bias rows are loaded once per program and
broadcast over the tile; the mean is reduced along axis 1, then the variance from the centred
values held in registers (no E[x^2] - mean^2 cancellation, no second memory pass). Narrow rows
(vision-tower LayerNorms with N = 768..1152 over thousands of patches, or per-head norms) give
one-row programs too little work to hide memory latency; a tile of a few thousand elements does.
The weight and bias may be longer than the row (atrex30's model holds 8192 entries); the first N
are used. Bytes per element: one read and one write of x (4 bytes in bf16). Limits: the tile lives
in registers, so N >= 8192 needs BLOCK_M = 1 (then it is the rowwise kernel) and rows past 65536
are refused; with few rows, a large BLOCK_M leaves SMs idle.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_multirow_kernel(
    # pointers
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # scalars
    eps,
    # meta
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    mask = (rows < M)[:, None] & col_mask[None, :]
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements

    x = tl.load(x_ptr + rows64 * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / N  # (BLOCK_M,)
    # padded lanes must not add (0 - mean)^2 to the variance
    xc = tl.where(mask, x - mean[:, None], 0.0)
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / N + eps)  # biased variance

    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)  # once per BLOCK_M rows
    y = xc * rstd[:, None] * w[None, :]
    if HAS_BIAS:
        y += tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
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


def layer_norm_multirow(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return LayerNorm(x) * weight[:N] + bias[:N] over the last dimension, BLOCK_M rows a program.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        weight: (W,) any float dtype with W >= N; the first N entries are used.
        bias: (W,) like weight, or None for no bias.
        eps: Added to the variance before the reciprocal square root.
        block_m: Rows per program (power of two); None picks about 4096 elements per tile.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        y: same shape and dtype as ``x``, contiguous; fp32 math rounded once.

    Raises:
        ValueError: weight or bias is not 1-D with at least N entries, the row is wider than
            65536, or block_m is not a power of two.
    """
    n = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dim() != 1 or t.shape[0] < n):
            raise ValueError(
                f"{name} must be 1-D with at least {n} entries for x {tuple(x.shape)}; "
                f"got {tuple(t.shape)}"
            )
    if n > 65536:
        raise ValueError(f"row width {n} > 65536 does not fit in registers")
    if block_m is not None and (block_m < 1 or block_m & (block_m - 1)):
        raise ValueError(f"block_m must be a power of two; got {block_m}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    cfg["block_m"] = max(1, min(cfg["block_m"], 2**20 // cfg["block_n"]))  # Triton's tile limit
    w = weight.contiguous()
    _layer_norm_multirow_kernel[(triton.cdiv(m, cfg["block_m"]),)](
        x2, w, w if bias is None else bias.contiguous(), y,
        m, n,
        x2.stride(0), y.stride(0),
        eps,
        HAS_BIAS=bias is not None,
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """Return torch's layer_norm with weight[:N], bias[:N], in fp32, cast to x's dtype."""
    n = x.shape[-1]
    b = None if bias is None else bias[:n].float()
    return torch.nn.functional.layer_norm(x.float(), (n,), weight[:n].float(), b, eps).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "weight", "bias"}`` for ``shape = {"rows", "hidden"}``; x has mean 0.5.

    ``shape["extra"]`` (default 0) makes weight and bias that many entries longer than the row.
    """
    rows, hidden = shape["rows"], shape["hidden"]
    width = hidden + shape.get("extra", 0)
    x = (torch.randn(rows, hidden, device=device) + 0.5).to(dtype)
    weight = torch.randn(width, device=device).to(dtype)
    bias = torch.randn(width, device=device).to(dtype)
    return {"x": x, "weight": weight, "bias": bias}
