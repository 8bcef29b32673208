"""
---
id: per_token_quant_int8_asymmetric
title: Per-token asymmetric int8 quantisation (scale, zero point), looped min/max then quant sweeps
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, int8, int32]
bound: memory
techniques: [int8-asymmetric, zero-point, min-max-reduction, row-per-program, chunked-loop,
  two-sweep, round-half-away, dynamic-scale]
status: reference
launcher: per_token_quant_int8_asymmetric
tuning:
  block_n: [1024, 128, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [M, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: q, shape: [M, N], dtype: int8}
  - {name: scale, shape: [M, 1], dtype: fp32}
  - {name: azp, shape: [M, 1], dtype: int32}
problem:
  shapes: [{rows: 6, hidden: 200}]
  dtypes: [fp32, bf16]
measured: []
---
Dynamic per-token asymmetric int8 quantisation (the azp variant of vLLM's scaled_int8_quant, used by
W8A8 schemes whose activations are not centred, e.g. after a GELU): the row's range is widened to
contain 0 (lo = min(xmin, 0), hi = max(xmax, 0), as PyTorch's min-max observers do, so 0 is exact
and the zero point fits int8), scale = max(hi - lo, 1e-10) / 255, azp = round(-128 - lo / scale)
(int32, in [-128, 127]) and q = clamp(round(x / scale) + azp, -128, 127): lo maps to -128 and hi to
127, so a one-sided row still uses all 256 codes (a symmetric scheme wastes half of them); x ~ (q -
azp) * scale. Rounding is half away from zero (floor(|y| + 0.5) with the sign put back). Design: one
program per row sweeps it twice in BLOCK_N chunks: sweep 1 keeps running fp32 min and max vectors,
reduced once at the end; sweep 2 reloads each chunk (an L2 hit for rows up to tens of KB), quantises
and stores int8. Registers stay at BLOCK_N values whatever the row width. Bytes: 2 reads + 1 write
per bf16 element, 8 bytes per row of scale and zero point. Limits: an all-zero row gets scale 1e-10
/ 255; values within an ulp of a rounding boundary may land one code away from another
implementation that multiplies by 1 / scale instead of dividing.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _int8_asym_kernel(
    # pointers
    x_ptr,
    q_ptr,
    s_ptr,
    z_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_qm,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    x_row = x_ptr + row * stride_xm
    lo = tl.full((BLOCK_N,), float("inf"), dtype=tl.float32)
    hi = tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)
    # sweep 1: running min and max (padded lanes load the neutral +-inf)
    for start in range(0, N, BLOCK_N):
        offs = start + tl.arange(0, BLOCK_N)
        mask = offs < N
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        lo = tl.minimum(lo, tl.where(mask, x, float("inf")))
        hi = tl.maximum(hi, tl.where(mask, x, float("-inf")))
    xmin = tl.minimum(tl.min(lo, axis=0), 0.0)  # the range always contains 0
    # IEEE divisions (tl.math.div_rn): the GPU's `/` may be 2 ulp off and flip a rounding
    scale = tl.math.div_rn(tl.maximum(tl.maximum(tl.max(hi, axis=0), 0.0) - xmin, 1e-10), 255.0)
    zp = -128.0 - tl.math.div_rn(xmin, scale)
    azp = tl.where(zp < 0, -tl.floor(-zp + 0.5), tl.floor(zp + 0.5))  # half away from zero
    tl.store(s_ptr + row, scale)
    tl.store(z_ptr + row, azp.to(tl.int32))
    # sweep 2: quantise
    for start in range(0, N, BLOCK_N):
        offs = start + tl.arange(0, BLOCK_N)
        mask = offs < N
        y = tl.math.div_rn(tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32), scale)
        r = tl.where(y < 0, -tl.floor(-y + 0.5), tl.floor(y + 0.5))
        q = tl.clamp(r + azp, -128.0, 127.0)
        tl.store(q_ptr + row * stride_qm + offs, q.to(tl.int8), mask=mask)


def per_token_quant_int8_asymmetric(
    x: torch.Tensor,
    *,
    block_n: int = 1024,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantise each row of x to int8 with its own scale and zero point.

    Args:
        x: (M, N) bf16/fp16/fp32, last dimension contiguous.
        block_n: Elements per loop step (a power of two).
        num_warps: Warps per program.

    Returns:
        (q, scale, azp): q (M, N) int8, scale (M, 1) fp32, azp (M, 1) int32 with
        x ~ (q - azp) * scale.

    Raises:
        ValueError: x is not a non-empty-row 2-D float tensor, or block_n is bad.
    """
    if x.dim() != 2 or not x.is_floating_point() or x.shape[1] == 0:
        raise ValueError(f"x must be a 2-D float (M, N) with N > 0; got {tuple(x.shape)} {x.dtype}")
    if block_n < 16 or block_n & (block_n - 1):
        raise ValueError(f"block_n {block_n} must be a power of two >= 16")
    x = x if x.stride(-1) == 1 else x.contiguous()
    m, n = x.shape
    q = torch.empty((m, n), dtype=torch.int8, device=x.device)
    scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    azp = torch.empty((m, 1), dtype=torch.int32, device=x.device)
    if m == 0:
        return q, scale, azp
    _int8_asym_kernel[(m,)](
        x, q, scale, azp,
        n,
        x.stride(0), q.stride(0),
        BLOCK_N=block_n,
        num_warps=num_warps,
    )  # fmt: skip
    return q, scale, azp


def _round_half_away(y: torch.Tensor) -> torch.Tensor:
    return torch.sign(y) * torch.floor(y.abs() + 0.5)


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (q, scale, azp) in fp32 PyTorch with the same rounding (half away from zero)."""
    xf = x.float()
    xmin = xf.amin(dim=1, keepdim=True).clamp(max=0.0)
    scale = (xf.amax(dim=1, keepdim=True).clamp(min=0.0) - xmin).clamp(min=1e-10) / 255.0
    azp = _round_half_away(-128.0 - xmin / scale)
    q = (_round_half_away(xf / scale) + azp).clamp(-128, 127)
    return q.to(torch.int8), scale, azp.to(torch.int32)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "hidden"}``: GELU-like rows, one constant."""
    x = torch.nn.functional.gelu(torch.randn(shape["rows"], shape["hidden"], device=device) * 2)
    x[0] = 0.75  # a constant row: its range widens to [0, 0.75]
    return {"x": x.to(dtype)}
