"""
---
id: per_token_quant_int8
title: Symmetric per-token int8 quantisation (scale = absmax / 127), several rows per program
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, int8]
bound: memory
techniques: [multi-row-tile, absmax-reduction, int8-symmetric, round-half-away, dynamic-scale]
status: reference
launcher: per_token_quant_int8
tuning:
  block_m: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: q, shape: [T, N], dtype: int8}
  - {name: scale, shape: [T, 1], dtype: fp32}
problem:
  shapes: [{tokens: 3, hidden: 512}, {tokens: 9, hidden: 128}]
  dtypes: [fp32, bf16]
measured: []
---
Dynamic symmetric int8 activation quantisation for W8A8 int8 GEMMs (SmoothQuant-style serving): each
row (token) gets scale = max(absmax(row), 1e-10) / 127 and q = round(x / scale), rounded half away
from zero (floor(|y| + 0.5) with the sign put back) and clamped to [-127, 127], so the code range is
symmetric and 0 maps to 0. Program i owns BLOCK_M whole rows as one (BLOCK_M, next_pow2(N)) register
tile: one load, a row max of |x| in fp32, one multiply-round-store, so x is read exactly once (no
second pass as in per_token_quant_fp8). Bytes per bf16 element: 2 read + 1 written, plus 4 per row
for the scale. When it wins: narrow to medium rows (N up to ~8K) and many tokens, where stacking
rows fills the warps. Limits: the whole row must fit in registers (BLOCK_M * next_pow2(N) elements;
N above ~16K spills, use a looped design); no asymmetric (zero-point) mode; on the GPU fp32 division
is approximate, so a value within an ulp of a rounding boundary may land one code away from a CPU
reference.
"""

import torch
import triton
import triton.language as tl

INT8_MAX = 127.0
MIN_ABSMAX = 1e-10  # keeps all-zero rows finite
_INT8_MAX = tl.constexpr(INT8_MAX)  # a jit function may read only constexpr globals
_MIN_ABSMAX = tl.constexpr(MIN_ABSMAX)


@triton.jit
def _per_token_quant_int8_kernel(
    # pointers
    x_ptr,
    q_ptr,
    scale_ptr,
    # sizes
    T,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xt,
    stride_qt,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < T
    mask = row_mask[:, None] & (cols < N)[None, :]
    rows64 = rows.to(tl.int64)  # int64: rows * stride can pass 2^31 elements

    x = tl.load(x_ptr + rows64[:, None] * stride_xt + cols[None, :], mask=mask, other=0.0)
    x = x.to(tl.float32)  # all arithmetic in fp32
    scale = tl.math.div_rn(tl.maximum(tl.max(tl.abs(x), axis=1), _MIN_ABSMAX), _INT8_MAX)  # (BLOCK_M,)
    y = tl.math.div_rn(x, scale[:, None])  # IEEE division: GPU `/` may be 2 ulp off
    r = tl.floor(tl.abs(y) + 0.5)  # round half away from zero, on the magnitude
    r = tl.minimum(r, _INT8_MAX)
    q = tl.where(y < 0, -r, r)

    tl.store(q_ptr + rows64[:, None] * stride_qt + cols[None, :], q.to(tl.int8), mask=mask)
    tl.store(scale_ptr + rows64, scale, mask=row_mask)


def per_token_quant_int8(
    x: torch.Tensor,
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each row of x to int8 with one symmetric scale per row.

    Args:
        x: (T, N) bf16/fp16/fp32 with a contiguous last dim.
        block_m: Rows per program (power of two); None = fit about 4K elements per program.
        num_warps: Warps per program; None = 4.

    Returns:
        (q, scale): q (T, N) int8 in [-127, 127]; scale (T, 1) fp32, with x ~ q * scale.

    Raises:
        ValueError: x is not 2D with a contiguous last dim, or block_m is not a power of two.
    """
    if x.dim() != 2 or (x.shape[1] > 1 and x.stride(1) != 1):
        raise ValueError(
            f"need x (T, N) with a contiguous last dim; got shape {tuple(x.shape)}, "
            f"strides {x.stride()}"
        )
    t, n = x.shape
    block_n = triton.next_power_of_2(max(n, 1))
    bm = block_m or max(1, min(16, 4096 // block_n, triton.next_power_of_2(max(t, 1))))
    if bm & (bm - 1):
        raise ValueError(f"block_m must be a power of two; got {bm}")
    q = torch.empty((t, n), dtype=torch.int8, device=x.device)
    scale = torch.empty((t, 1), dtype=torch.float32, device=x.device)
    if t == 0 or n == 0:
        return q, scale
    _per_token_quant_int8_kernel[(triton.cdiv(t, bm),)](
        x, q, scale,
        t, n,
        x.stride(0), q.stride(0),
        BLOCK_M=bm, BLOCK_N=block_n, num_warps=num_warps or 4,
    )  # fmt: skip
    return q, scale


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, scale) in fp32 PyTorch with the same rounding (half away from zero)."""
    xf = x.float()
    absmax = xf.abs().amax(dim=-1, keepdim=True).clamp(min=MIN_ABSMAX)
    scale = absmax / absmax.new_tensor(INT8_MAX)  # a device tensor: CUDA torch turns `/ float` into `* (1 / float)`, 1 ulp off IEEE division
    y = xf / scale
    q = torch.sign(y) * torch.floor(y.abs() + 0.5).clamp(max=INT8_MAX)
    return q.to(torch.int8), scale


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "hidden"}``: x ~ N(0, 1) in ``dtype``."""
    return {"x": torch.randn(shape["tokens"], shape["hidden"], device=device).to(dtype)}
