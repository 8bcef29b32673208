"""
---
id: dequant_fp8_block_scaled_weight
title: Dequantise a 128x128 block-scaled FP8 e4m3 weight to bf16, one scalar scale per tile
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [fp8_e4m3fn, bf16, fp16, fp32]
bound: memory
techniques: [dequantization, fp8-e4m3, block-2d-scale, tile-inside-scale-block, scalar-scale-load]
status: reference
launcher: dequant_fp8_block_scaled_weight
tuning:
  block_n: [64, 16, 32, 128]
  block_k: [128, 32, 64]
  num_warps: [4, 1, 2, 8]
args:
  q: {shape: [N, K], dtypes: [fp8_e4m3fn], aliases: [weight, qweight, w_q]}
  scale: {shape: ['ceil(N / 128)', 'ceil(K / 128)'], dtypes: [fp32],
    aliases: [weight_scale, scale_inv, weight_scale_inv]}
  out_dtype: {type: str, default: bf16}
returns:
  - {name: w, shape: [N, K], dtype: bf16}
problem:
  shapes: [{n: 140, k: 200}]
  dtypes: [bf16]  # returns: declares bf16 (out_dtype's default); fp32 would not map
measured: []
---
The inverse of 128 x 128 block FP8 weight quantisation (DeepSeek-V3 checkpoints store q and a
"scale_inv" grid): w[i, j] = float(q[i, j]) * scale[i // 128, j // 128], in fp32 (the e4m3 value
converts exactly) and rounded once to out_dtype (bf16 by default; fp16, fp32). It is what a fallback
path runs to feed a bf16 GEMM, or a loader to re-quantise to another format. Design: tiles are
(BLOCK_N, BLOCK_K) with both edges dividing 128, so every tile lies inside one scale block; program
(i, j) loads its single fp32 scale as a scalar (one 4-byte load per tile, no per-element index
arithmetic or gather) and streams the tile through one multiply. Bytes: 1 read + 2 written per
element (bf16 out). Limits: the scale block is fixed at 128 x 128; per-row (1 x 128) activation
scales need a different kernel (per_token_group dequant); e4m3fn only.
"""

import torch
import triton
import triton.language as tl

QBLOCK = 128  # the scale block edge, rows and columns
#: out_dtype names and their torch dtypes (an immutable table: pairs, looked up by _out_dtype)
_OUT_DTYPES = (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32))


def _out_dtype(name: str) -> torch.dtype:
    """Return the torch dtype of an out_dtype name, or raise ValueError naming the choices."""
    for key, dtype in _OUT_DTYPES:
        if key == name:
            return dtype
    raise ValueError(f"out_dtype {name!r} must be one of {[key for key, _ in _OUT_DTYPES]}")


@triton.jit
def _dequant_block_kernel(
    # pointers
    q_ptr,
    s_ptr,
    w_ptr,
    # sizes
    N,
    K,
    # strides (elements; the last dim is contiguous)
    stride_qn,
    stride_sn,
    stride_wn,
    # meta
    QB: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pn = tl.program_id(0)
    pk = tl.program_id(1)
    # the tile lies inside scale block (pn * BLOCK_N // QB, pk * BLOCK_K // QB): one scalar load
    scale = tl.load(s_ptr + (pn * BLOCK_N // QB) * stride_sn + pk * BLOCK_K // QB)
    rows = (pn * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    cols = pk * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows < N)[:, None] & (cols < K)[None, :]
    q = tl.load(q_ptr + rows[:, None] * stride_qn + cols[None, :], mask=mask, other=0.0)
    w = q.to(tl.float32) * scale
    tl.store(w_ptr + rows[:, None] * stride_wn + cols[None, :], w.to(w_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


def dequant_fp8_block_scaled_weight(
    q: torch.Tensor,
    scale: torch.Tensor,
    out_dtype: str = "bf16",
    *,
    block_n: int = 64,
    block_k: int = 128,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return q * scale (expanded over 128 x 128 blocks) rounded to out_dtype.

    Args:
        q: (N, K) float8_e4m3fn, last dimension contiguous.
        scale: (ceil(N / 128), ceil(K / 128)) fp32 block scales.
        out_dtype: "bf16", "fp16" or "fp32".
        block_n: Rows per tile (a power of two dividing 128).
        block_k: Columns per tile (a power of two dividing 128).
        num_warps: Warps per program.

    Returns:
        w: (N, K) in out_dtype, contiguous.

    Raises:
        ValueError: Bad dtypes or shapes, unknown out_dtype, or a tile edge not dividing 128.
    """
    if q.dim() != 2 or q.dtype != torch.float8_e4m3fn:
        raise ValueError(f"q must be a 2-D float8_e4m3fn (N, K); got {tuple(q.shape)} {q.dtype}")
    n, k = q.shape
    grid_shape = (-(-n // QBLOCK), -(-k // QBLOCK))
    if scale.shape != grid_shape or scale.dtype != torch.float32:
        raise ValueError(f"scale must be fp32 {grid_shape} for q {(n, k)}; got "
                         f"{tuple(scale.shape)} {scale.dtype}")  # fmt: skip
    w_dtype = _out_dtype(out_dtype)
    for name, value in (("block_n", block_n), ("block_k", block_k)):
        if value < 1 or value > QBLOCK or value & (value - 1):
            raise ValueError(f"{name} {value} must be a power of two dividing 128")
    q = q if q.stride(-1) == 1 else q.contiguous()
    scale = scale.contiguous()
    w = torch.empty((n, k), dtype=w_dtype, device=q.device)
    if w.numel() == 0:
        return w
    _dequant_block_kernel[(triton.cdiv(n, block_n), triton.cdiv(k, block_k))](
        q, scale, w,
        n, k,
        q.stride(0), scale.stride(0), w.stride(0),
        QB=QBLOCK, BLOCK_N=block_n, BLOCK_K=block_k,
        num_warps=num_warps,
    )  # fmt: skip
    return w


def reference(q: torch.Tensor, scale: torch.Tensor, out_dtype: str = "bf16") -> torch.Tensor:
    """Return q * scale with the grid expanded by repeat_interleave, in fp32, cast to out_dtype."""
    n, k = q.shape
    full = scale.repeat_interleave(QBLOCK, dim=0).repeat_interleave(QBLOCK, dim=1)[:n, :k]
    return (q.float() * full).to(_out_dtype(out_dtype))


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"q", "scale", "out_dtype"}`` for ``shape = {"n", "k"}`` (out_dtype = dtype)."""
    n, k = shape["n"], shape["k"]
    q = (100.0 * torch.randn(n, k, device=device)).clamp(-448, 448).to(torch.float8_e4m3fn)
    scale = torch.rand(-(-n // QBLOCK), -(-k // QBLOCK), device=device) * 1e-3 + 1e-4
    out = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    return {"q": q, "scale": scale, "out_dtype": out}
