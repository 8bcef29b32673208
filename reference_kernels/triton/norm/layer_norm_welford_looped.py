"""
---
id: layer_norm_welford_looped
title: LayerNorm for wide rows, a chunked loop merging (mean, M2) per chunk with Chan's formula
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, welford-chan-merge, centered-variance, fp32-accumulate]
status: reference
launcher: layer_norm_welford_looped
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
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
atrex30 layer_norm) for rows too wide to hold in registers. One program per row walks the row in
BLOCK_N chunks twice. Pass 1 reduces each chunk to its count, mean and M2 (sum of squared
deviations from the chunk mean, computed from registers) and merges them into the running
statistics with Chan's parallel update: delta = mean_c - mean, mean += delta * n_c / n, M2 += M2_c
+ delta^2 * n_a * n_c / n. Unlike sum and sum-of-squares accumulation, no large E[x^2] - mean^2
cancellation occurs, so rows with a large mean keep full fp32 accuracy, and unlike a two-step mean
then variance loop it needs only one statistics pass over memory. Pass 2 re-reads each chunk (often
from L2) and writes the normalised, scaled chunk. The weight and bias may be longer than the row
(the model of atrex30 holds 8192 entries); the first N entries are used. Bytes per element: 2 reads
+ 1 write of x (6 bytes in bf16). Limits: one program per row, so a handful of rows uses a handful
of SMs; for N <= 8192 the register-resident rowwise kernel reads x once and wins.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_welford_looped_kernel(
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
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK_N)

    # pass 1: per-chunk (count, mean, M2) merged into the running statistics (Chan et al.)
    mean = tl.zeros((), dtype=tl.float32)
    m2 = tl.zeros((), dtype=tl.float32)
    count = tl.zeros((), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        n_c = tl.minimum(N - start, BLOCK_N).to(tl.float32)
        mean_c = tl.sum(x, axis=0) / n_c
        dev = tl.where(mask, x - mean_c, 0.0)
        m2_c = tl.sum(dev * dev, axis=0)
        total = count + n_c
        delta = mean_c - mean
        mean += delta * (n_c / total)
        m2 += m2_c + delta * delta * (count * n_c / total)
        count = total
    rstd = tl.rsqrt(m2 / N + eps)  # biased variance, as torch's layer_norm

    # pass 2: normalise and scale each chunk
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w
        if HAS_BIAS:
            y += tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return the chunk width (at most 1024) and warps (about 8 elements per thread)."""
    block_n = min(triton.next_power_of_2(n), 1024)
    return {"block_n": block_n, "num_warps": min(max(block_n // 256, 1), 8)}


def layer_norm_welford_looped(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return LayerNorm(x) * weight[:N] + bias[:N] over the last dimension (N = x.shape[-1]).

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        weight: (W,) any float dtype with W >= N; the first N entries are used.
        bias: (W,) like weight, or None for no bias.
        eps: Added to the variance before the reciprocal square root.
        block_n: Chunk width (power of two); None = min(next_pow2(N), 1024).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        y: same shape and dtype as ``x``, contiguous; fp32 math rounded once.

    Raises:
        ValueError: weight or bias is not 1-D with at least N entries, or block_n is not a power
            of two.
    """
    n = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dim() != 1 or t.shape[0] < n):
            raise ValueError(
                f"{name} must be 1-D with at least {n} entries for x {tuple(x.shape)}; "
                f"got {tuple(t.shape)}"
            )
    if block_n is not None and (block_n < 1 or block_n & (block_n - 1)):
        raise ValueError(f"block_n must be a power of two; got {block_n}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(n)
    given = {"block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    w = weight.contiguous()
    _layer_norm_welford_looped_kernel[(x2.shape[0],)](
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
    return torch.nn.functional.layer_norm(x.float(), (n,), weight[:n].float(), b, eps).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "weight", "bias"}`` for ``shape = {"rows", "hidden"}``; x has mean 3.

    ``shape["extra"]`` (default 0) makes weight and bias that many entries longer than the row.
    """
    rows, hidden = shape["rows"], shape["hidden"]
    width = hidden + shape.get("extra", 0)
    x = (torch.randn(rows, hidden, device=device) + 3.0).to(dtype)
    weight = torch.randn(width, device=device).to(dtype)
    bias = torch.randn(width, device=device).to(dtype)
    return {"x": x, "weight": weight, "bias": bias}
