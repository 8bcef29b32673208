"""
---
id: fp8_block_quant_weight_128x128
title: 128x128 block FP8 e4m3 weight quantisation with an fp32 scale grid, sliced two-sweep tiles
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [block-2d-quant, fp8-e4m3, absmax-reduction, scale-grid, sliced-block-loop, two-sweep]
status: reference
launcher: fp8_block_quant_weight_128x128
tuning:
  sub_m: [32, 8, 16, 64, 128]
  num_warps: [4, 1, 2, 8]
args:
  weight: {shape: [N, K], dtypes: [bf16, fp16, fp32], aliases: [w, x, input]}
returns:
  - {name: q, shape: [N, K], dtype: fp8_e4m3fn}
  - {name: scale, shape: ['ceil(N / 128)', 'ceil(K / 128)'], dtype: fp32}
problem:
  shapes: [{n: 150, k: 140}]
  dtypes: [fp32, bf16]
measured: []
---
DeepSeek-V3-style weight quantisation for block-scaled FP8 GEMMs: the (N, K) weight is cut into 128
x 128 blocks (ragged at the right and bottom edges), each block gets one fp32 scale s =
max(absmax(block), 1e-12) / 448 and its values become q = clamp(w / s, -448, 448) in float8_e4m3fn,
so w ~ q * s[i // 128, j // 128]. Design: program (bi, bj) owns one block and sweeps it twice in
(SUB_M, 128) row slices: sweep 1 folds the slices into a running fp32 absmax, sweep 2 reloads them,
divides by the scale and stores fp8 (the second read of a 32 KB bf16 block hits L2). Slicing bounds
registers at SUB_M * 128 values per program whatever the block, where a whole-block tile would hold
16384 fp32 values. Bytes: 2 reads + 1 write per bf16 element, 4 bytes of scale per 16384 values.
This runs once per checkpoint load (offline), so simplicity beats peak bandwidth; limits: the 128 x
128 block is fixed (the format), small weights give few programs.
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn
QBLOCK = 128  # the scale block edge, rows and columns


@triton.jit
def _fp8_block_quant_kernel(
    # pointers
    w_ptr,
    q_ptr,
    s_ptr,
    # sizes
    N,
    K,
    # strides (elements; the last dim is contiguous)
    stride_wn,
    stride_qn,
    stride_sn,
    # scalars
    fp8_max,
    # meta
    QB: tl.constexpr,
    SUB_M: tl.constexpr,
):
    bi = tl.program_id(0)
    bj = tl.program_id(1)
    cols = bj * QB + tl.arange(0, QB)
    cmask = cols < K
    amax = tl.zeros((SUB_M, QB), dtype=tl.float32)
    # sweep 1: absmax over the block, one (SUB_M, QB) slice at a time
    for r0 in range(0, QB, SUB_M):
        rows = (bi * QB + r0 + tl.arange(0, SUB_M)).to(tl.int64)
        mask = (rows < N)[:, None] & cmask[None, :]
        w = tl.load(w_ptr + rows[:, None] * stride_wn + cols[None, :], mask=mask, other=0.0)
        amax = tl.maximum(amax, tl.abs(w.to(tl.float32)))
    scale = tl.maximum(tl.max(tl.max(amax, axis=1), axis=0), 1e-12) / fp8_max
    tl.store(s_ptr + bi * stride_sn + bj, scale)
    # sweep 2: quantise
    for r0 in range(0, QB, SUB_M):
        rows = (bi * QB + r0 + tl.arange(0, SUB_M)).to(tl.int64)
        mask = (rows < N)[:, None] & cmask[None, :]
        w = tl.load(w_ptr + rows[:, None] * stride_wn + cols[None, :], mask=mask, other=0.0)
        q = tl.clamp(w.to(tl.float32) / scale, -fp8_max, fp8_max)
        tl.store(q_ptr + rows[:, None] * stride_qn + cols[None, :], q.to(q_ptr.dtype.element_ty),
                 mask=mask)  # fmt: skip


def fp8_block_quant_weight_128x128(
    weight: torch.Tensor,
    *,
    sub_m: int = 32,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise a weight to float8_e4m3fn with one fp32 scale per 128 x 128 block.

    Args:
        weight: (N, K) bf16/fp16/fp32, last dimension contiguous.
        sub_m: Rows per slice of a block (a power of two dividing 128).
        num_warps: Warps per program.

    Returns:
        (q, scale): q (N, K) float8_e4m3fn; scale (ceil(N / 128), ceil(K / 128)) fp32 with
        weight ~ q * scale[i // 128, j // 128].

    Raises:
        ValueError: weight is not a 2-D float tensor or sub_m is not a power of two <= 128.
    """
    if weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError(
            f"weight must be a 2-D float (N, K); got {tuple(weight.shape)} {weight.dtype}"
        )
    if sub_m < 1 or sub_m > QBLOCK or sub_m & (sub_m - 1):
        raise ValueError(f"sub_m {sub_m} must be a power of two in [1, 128]")
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    n, k = w.shape
    q = torch.empty((n, k), dtype=torch.float8_e4m3fn, device=w.device)
    scale = torch.empty((triton.cdiv(n, QBLOCK), triton.cdiv(k, QBLOCK)), dtype=torch.float32,
                        device=w.device)  # fmt: skip
    if q.numel() == 0:
        return q, scale
    _fp8_block_quant_kernel[scale.shape](
        w, q, scale,
        n, k,
        w.stride(0), q.stride(0), scale.stride(0),
        FP8_MAX,
        QB=QBLOCK, SUB_M=sub_m,
        num_warps=num_warps,
    )  # fmt: skip
    return q, scale


def reference(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, scale) in fp32 PyTorch: pad to whole blocks, reduce a (gn, 128, gk, 128) view."""
    n, k = weight.shape
    gn, gk = -(-n // QBLOCK), -(-k // QBLOCK)
    padded = torch.zeros(gn * QBLOCK, gk * QBLOCK, dtype=torch.float32, device=weight.device)
    padded[:n, :k] = weight.float()
    blocks = padded.view(gn, QBLOCK, gk, QBLOCK)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / FP8_MAX
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.view(gn * QBLOCK, gk * QBLOCK)[:n, :k].to(torch.float8_e4m3fn)
    return q, scale


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"weight"}`` for ``shape = {"n", "k"}``: 0.02 N, a zero block, a large block."""
    w = 0.02 * torch.randn(shape["n"], shape["k"], device=device)
    w[:QBLOCK, :QBLOCK] *= 50.0
    if shape["k"] > QBLOCK:
        w[:QBLOCK, QBLOCK:] = 0.0
    return {"weight": w.to(dtype)}
