"""
---
id: per_token_quant_fp8
title: Dynamic per-token FP8 (e4m3fn) quantisation, one program per row in two chunked passes
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [row-per-program, chunked-loop, two-pass, absmax-reduction, fp8-e4m3, dynamic-scale]
status: reference
launcher: per_token_quant_fp8
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: q, shape: [T, N], dtype: fp8_e4m3fn}
  - {name: scale, shape: [T, 1], dtype: fp32}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 33, hidden: 64}]
  dtypes: [fp32, bf16]
measured: []
---
Activation quantisation for FP8 GEMMs: each row (token) gets scale = max(absmax(row) / 448, 1e-10)
and q = clamp(x / scale, -448, 448) cast to float8_e4m3fn (round to nearest even); the launcher
returns q and the (T, 1) fp32 scales that the GEMM epilogue multiplies back. One program per row
walks the row in BLOCK_N chunks twice: pass 1 keeps an element-wise fp32 running max of |x| (reduced
once after the loop), pass 2 reloads the chunks (mostly from L2), divides and stores. Registers stay
bounded for any hidden size. Bytes: 2 reads of 2 bytes + a 1-byte write per bf16 element (the second
read is an L2 hit for rows up to a few MB), plus 4 bytes per row. Limits: one program per row
(decode batches use few SMs); e4m3fn only (no e4m3fnuz / ROCm 240 range); no static-scale path and
no upper bound on the scale.
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn
MIN_SCALE = 1e-10  # keeps all-zero rows finite


@triton.jit
def _per_token_quant_fp8_kernel(
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
    x_row = x_ptr + row * stride_xm
    q_row = q_ptr + row * stride_qm
    offs = tl.arange(0, BLOCK_N)

    # pass 1: element-wise running max of |x| in fp32, one tree reduction at the end
    amax = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    scale = tl.maximum(tl.max(amax, axis=0) / fp8_max, min_scale)
    tl.store(scale_ptr + row, scale)

    # pass 2: reload, divide (as the reference does, not multiply by a rounded reciprocal), clamp
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        q = tl.clamp(x / scale, -fp8_max, fp8_max)
        tl.store(q_row + cols, q.to(q_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_n = min(triton.next_power_of_2(n), 4096)
    return {"block_n": block_n, "num_warps": min(max(block_n // 256, 1), 8)}


def per_token_quant_fp8(
    x: torch.Tensor,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each row of x to float8_e4m3fn with its own dynamic scale.

    Args:
        x: (T, N) bf16/fp16/fp32, last dimension contiguous.
        block_n: Chunk width (power of two); None = min(next_pow2(N), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        (q, scale): q (T, N) float8_e4m3fn contiguous; scale (T, 1) fp32 with x ~ q * scale.

    Raises:
        ValueError: x is not 2D.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be (T, N); got {tuple(x.shape)}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    t, n = x.shape
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((t, 1), dtype=torch.float32, device=x.device)
    if t == 0 or n == 0:
        return q, scale.fill_(MIN_SCALE)
    cfg = _launch_config(n)
    given = {"block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _per_token_quant_fp8_kernel[(t,)](
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
