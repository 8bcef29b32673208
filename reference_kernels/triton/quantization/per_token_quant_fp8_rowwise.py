"""
---
id: per_token_quant_fp8_rowwise
title: Dynamic per-token FP8 (e4m3fn) quantisation, one program per row held in registers
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [row-per-program, single-pass, absmax-reduction, fp8-e4m3, dynamic-scale]
status: reference
launcher: per_token_quant_fp8_rowwise
tuning:
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: q, shape: [T, N], dtype: fp8_e4m3fn}
  - {name: scale, shape: [T, 1], dtype: fp32}
problem:
  shapes: [{rows: 5, hidden: 1000}, {rows: 1, hidden: 129}]
  dtypes: [fp32, bf16]
measured: []
---
Activation quantisation for FP8 GEMMs with the same numerics as per_token_quant_fp8: each row
(token) gets scale = max(absmax(row) / 448, 1e-10) and q = clamp(x / scale, -448, 448) cast to
float8_e4m3fn (round to nearest even), returned with the (T, 1) fp32 scales. One program per row
loads the whole row (padded to the next power of two, padding 0 so it never wins the max) into
registers once, reduces |x| to its max in fp32, divides and stores: x is read exactly once, so the
traffic is 2 + 1 bytes per bf16 element plus 4 bytes per row, against the chunked kernel's second
read. Limits: rows wider than 32768 do not fit in registers (use per_token_quant_fp8, which loops);
one program per row, so decode batches use few SMs; e4m3fn only (no e4m3fnuz / ROCm 240 range).
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn
MIN_SCALE = 1e-10  # keeps all-zero rows finite
MAX_WIDTH = 32768  # widest row held in registers


@triton.jit
def _per_token_quant_fp8_rowwise_kernel(
    # pointers
    x_ptr,
    q_ptr,
    scale_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_qm,
    # scalars
    fp8_max,
    min_scale,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N

    # one read of the row, fp32 from here on; |0| padding never wins the max
    x = tl.load(x_ptr + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(x), axis=0) / fp8_max, min_scale)
    tl.store(scale_ptr + row, scale)
    # divide (as the reference does, not multiply by a rounded reciprocal), clamp, cast
    q = tl.clamp(x / scale, -fp8_max, fp8_max)
    tl.store(q_ptr + row * stride_qm + offs, q.to(q_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return the row block (next power of two) and warps: about 8 to 16 elements per thread."""
    block_n = triton.next_power_of_2(n)
    return {"block_n": block_n, "num_warps": min(max(block_n // 512, 1), 16)}


def per_token_quant_fp8_rowwise(
    x: torch.Tensor,
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each row of x to float8_e4m3fn with its own dynamic scale, reading x once.

    Args:
        x: (T, N) bf16/fp16/fp32, last dimension contiguous (copied otherwise), N <= 32768.
        num_warps: Warps per program; None picks by row width.

    Returns:
        (q, scale): q (T, N) float8_e4m3fn contiguous; scale (T, 1) fp32 with x ~ q * scale.

    Raises:
        ValueError: x is not 2D, or its rows are wider than 32768.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be (T, N); got {tuple(x.shape)}")
    t, n = x.shape
    if n > MAX_WIDTH:
        raise ValueError(f"row width {n} > {MAX_WIDTH} does not fit; use per_token_quant_fp8")
    x = x if x.stride(-1) == 1 else x.contiguous()
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((t, 1), dtype=torch.float32, device=x.device)
    if t == 0 or n == 0:
        return q, scale.fill_(MIN_SCALE)
    cfg = _launch_config(n)
    if num_warps is not None:
        cfg["num_warps"] = num_warps
    _per_token_quant_fp8_rowwise_kernel[(t,)](
        x, q, scale,
        n,
        x.stride(0), q.stride(0),
        FP8_MAX, MIN_SCALE,
        BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return q, scale


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, scale) computed in fp32 PyTorch."""
    xf = x.float()
    scale = (xf.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=MIN_SCALE)
    q = (xf / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "hidden"}``: N(0, 1), row 1 zero if rows > 2."""
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    if shape["rows"] > 2:
        x[1] = 0.0  # exercises the minimum scale
    return {"x": x.to(dtype)}
