"""
---
id: per_token_quant_fp8_persistent
title: Dynamic per-token FP8 quantisation (atrex30 semantics) on a persistent grid striding rows
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [persistent-grid, grid-stride-rows, single-pass, absmax-reduction, fp8-e4m3,
  dynamic-scale, reciprocal-multiply]
status: reference
launcher: per_token_quant_fp8_persistent
tuning:
  programs_per_sm: [4, 1, 2, 8]
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: q, shape: [T, N], dtype: fp8_e4m3fn}
  - {name: scale, shape: [T], dtype: fp32}
problem:
  shapes: [{rows: 9, hidden: 300}, {rows: 2, hidden: 64}]
  dtypes: [fp32, bf16]
measured: []
---
atrex30 fp8_dynamic_per_token_quant: per row, in fp32, scale = max(absmax, 1e-12) / 448 and q =
fp8_e4m3fn(clamp(x * (1 / scale), -448, 448)) -- a multiply by the rounded reciprocal, as upstream
does, not a division -- returning q and the 1-D (T,) fp32 scales. The grid is min(T, programs_per_sm
x SMs) persistent programs; program p handles rows p, p + grid, p + 2 grid, ... and holds each row
(padded to the next power of two) in registers, so every element is read once: 2 + 1 bytes per
bf16 element plus 4 per row. Against a one-program-per-row grid it saves the launch and scheduling
of T tiny programs at large T (prefill) and lets the next row's load overlap the current row's
stores; at decode sizes (T below the grid) it is the same as one program per row. Limits: rows
wider than 32768 do not fit in registers; e4m3fn only (upstream's ROCm e4m3fnuz stops at 240).
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn
ABSMAX_MIN = 1e-12  # floor on the absmax, so an all-zero row gets a finite scale
MAX_WIDTH = 32768  # widest row held in registers


@triton.jit
def _per_token_quant_fp8_persistent_kernel(
    # pointers
    x_ptr,
    q_ptr,
    scale_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_qm,
    # scalars
    fp8_max,
    absmax_min,
    # meta
    BLOCK_N: tl.constexpr,
):
    # int64 start makes the loop variable int64: row * stride can pass 2^31 elements
    pid = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N
    for row in range(pid, M, tl.num_programs(0)):
        x = tl.load(x_ptr + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
        scale = tl.maximum(tl.max(tl.abs(x), axis=0), absmax_min) / fp8_max
        q = tl.clamp(x * (1.0 / scale), -fp8_max, fp8_max)
        tl.store(q_ptr + row * stride_qm + offs, q.to(q_ptr.dtype.element_ty), mask=mask)
        tl.store(scale_ptr + row, scale)


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def per_token_quant_fp8_persistent(
    x: torch.Tensor,
    *,
    programs_per_sm: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each row of x to float8_e4m3fn with its own dynamic scale (atrex30 semantics).

    Args:
        x: (T, N) bf16/fp16/fp32, last dimension contiguous, N <= 32768.
        programs_per_sm: Persistent programs per SM (grid = min(T, this * SMs)); None = 4.
        num_warps: Warps per program; None picks by row width.

    Returns:
        (q, scale): q (T, N) float8_e4m3fn contiguous; scale (T,) fp32 with x ~ q * scale[:, None].

    Raises:
        ValueError: x is not 2D or its rows are wider than 32768.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be (T, N); got {tuple(x.shape)}")
    if x.shape[1] > MAX_WIDTH:
        raise ValueError(f"row width {x.shape[1]} > {MAX_WIDTH} does not fit in registers")
    x = x if x.stride(-1) == 1 else x.contiguous()
    t, n = x.shape
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((t,), dtype=torch.float32, device=x.device)
    if t == 0 or n == 0:
        return q, scale.fill_(ABSMAX_MIN / FP8_MAX)
    block_n = triton.next_power_of_2(n)
    ppsm = 4 if programs_per_sm is None else programs_per_sm
    warps = min(max(block_n // 512, 1), 16) if num_warps is None else num_warps
    _per_token_quant_fp8_persistent_kernel[(min(t, ppsm * _num_sms(x.device)),)](
        x, q, scale,
        t, n,
        x.stride(0), q.stride(0),
        FP8_MAX, ABSMAX_MIN,
        BLOCK_N=block_n,
        num_warps=warps,
    )  # fmt: skip
    return q, scale


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, scale) computed in fp32 PyTorch, as atrex30's reference does."""
    xf = x.float()
    scale = xf.abs().amax(dim=-1).clamp(min=ABSMAX_MIN) / FP8_MAX
    q = (xf * (1.0 / scale)[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "hidden"}``: N(0, 1), row 1 zero if rows > 2."""
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    if shape["rows"] > 2:
        x[1] = 0.0  # exercises the absmax floor
    return {"x": x.to(dtype)}
