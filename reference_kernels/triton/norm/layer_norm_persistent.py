"""
---
id: layer_norm_persistent
title: LayerNorm on a persistent grid striding rows, weight and bias loaded once per program
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [persistent-grid, grid-stride-rows, weight-reuse, centered-variance, fp32-accumulate]
status: reference
launcher: layer_norm_persistent
tuning:
  programs_per_sm: [4, 1, 2, 8]
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  weight: {shape: [W], dtypes: [float], aliases: [w]}
  bias: {shape: [W], dtypes: [float], optional: true, aliases: [b]}
  eps: {type: float, default: 1.0e-5, aliases: [epsilon, variance_epsilon, layer_norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 13, hidden: 200}, {rows: 1, hidden: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
LayerNorm y = (x - mean) * rsqrt(var + eps) * w + b over the last dimension (biased variance, fp32
math, one rounding to x's dtype; atrex30 layer_norm's semantics). The grid is min(rows,
programs_per_sm x SMs) persistent programs: each loads w and b (padded to the next power of two)
into registers once, then strides over rows p, p + grid, ...: load the row, reduce the mean, reduce
the variance from the centred values held in registers (no E[x^2] - mean^2 cancellation), scale,
shift, store. Every element is read and written once; w and b are fetched grid times instead of
once per row, and the next row's load does not wait on a new program's launch, which is where the
one-program-per-row layer_norm_rowwise loses at prefill (10^4..10^5 rows of 1152..8192). Compared
with layer_norm_multirow (a 2-D tile of rows), only one row is live per program, so registers do not
grow with rows per program. Weight and bias may be longer than the row (their first N entries are
used, as atrex30's 8192-entry parameters need). Limits: rows wider than 65536 do not fit in
registers (use layer_norm_welford_looped); at decode (rows below the grid) it is one program per
row; no mean / rstd outputs (no backward).
"""

import torch
import triton
import triton.language as tl

MAX_WIDTH = 65536  # widest row held in registers


@triton.jit
def _layer_norm_persistent_kernel(
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
    BLOCK_N: tl.constexpr,
):
    # int64 start makes the loop variable int64: row * stride can pass 2^31 elements
    pid = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)  # once per program
    b = tl.zeros((BLOCK_N,), dtype=tl.float32)
    if HAS_BIAS:
        b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    for row in range(pid, M, tl.num_programs(0)):
        x = tl.load(x_ptr + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / N
        xc = tl.where(mask, x - mean, 0.0)  # padded lanes add nothing to the variance
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=0) / N + eps)
        y = xc * rstd * w + b
        tl.store(y_ptr + row * stride_ym + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def layer_norm_persistent(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    programs_per_sm: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return LayerNorm(x) * weight + bias over the last dimension.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous, N <= 65536.
        weight: (W,) any float dtype with W >= N; the first N entries are used.
        bias: (W,) like weight, or None for no bias.
        eps: Added to the variance before the reciprocal square root.
        programs_per_sm: Persistent programs per SM (grid = min(rows, this * SMs)); None = 4.
        num_warps: Warps per program; None picks by row width.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: The shapes do not match or the row is wider than 65536.
    """
    n = x.shape[-1] if x.dim() else 0
    too_short = weight.dim() != 1 or weight.shape[0] < n
    if x.dim() == 0 or too_short or (bias is not None and (bias.dim() != 1 or bias.shape[0] < n)):
        got = (tuple(weight.shape), None if bias is None else tuple(bias.shape))
        raise ValueError(f"weight/bias need (>= {n},) for x {tuple(x.shape)}; got {got}")
    if n > MAX_WIDTH:
        raise ValueError(f"row width {n} > {MAX_WIDTH} does not fit in registers")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    block_n = triton.next_power_of_2(n)
    ppsm = 4 if programs_per_sm is None else programs_per_sm
    warps = min(max(block_n // 512, 1), 16) if num_warps is None else num_warps
    w = weight.contiguous()
    _layer_norm_persistent_kernel[(min(m, ppsm * _num_sms(x.device)),)](
        x2, w, w if bias is None else bias.contiguous(), y,
        m, n,
        x2.stride(0), y.stride(0),
        eps,
        HAS_BIAS=bias is not None,
        BLOCK_N=block_n,
        num_warps=warps,
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
