"""
---
id: int4_awq_pack
title: Asymmetric int4 weight quantisation per K-group with AWQ-order packing, 8 nibbles per int32
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, int32]
bound: memory
techniques:
  [group-quant, asymmetric-zero-point, int4-pack, awq-interleave, min-max-reduction,
   3d-reshape-reduction]
status: reference
launcher: int4_awq_pack
tuning:
  block_n: [64, 8, 16, 32, 128]
  num_warps: [4, 1, 2, 8]
args:
  w: {shape: [K, N], dtypes: [bf16, fp16, fp32], aliases: [weight]}
  group_size: {type: int, default: 128, aliases: [group, q_group_size]}
returns:
  - {name: qweight, shape: [K, N / 8], dtype: int32}
  - {name: qzeros, shape: [K / group_size, N / 8], dtype: int32}
  - {name: scales, shape: [K / group_size, N], dtype: w}
problem:
  shapes: [{k: 64, n: 48, group_size: 32}, {k: 128, n: 16, group_size: 128}]
  dtypes: [fp32, bf16]
measured: []
---
AWQ-style 4-bit weight quantisation of a (K, N) = (in, out) weight with one scale and one zero point
per (group of G rows along K, column): scale = max(max - min, 1e-5) / 15 and zero = clamp(round(-min
/ scale), 0, 15), both from the group's fp32 min and max, then q = clamp(round(w / scale) + zero, 0,
15) with round = floor(v + 0.5). The fp32 scale is used for q and zero; the returned scales are that
value cast to w's dtype (what AWQ GEMMs read), so dequantisation is (q - zero) * scales. Packing
(the AWQ order, documented because it is not the natural one): columns 8j..8j+7 go into int32 word
j, and column 8j + p sits in nibble slot s(p) = p // 2 + 4 * (p % 2), i.e. bits 4s..4s+3, so the
slots hold columns in the order [0, 2, 4, 6, 1, 3, 5, 7] from the least significant nibble up (the
order the AWQ GEMM's dequantiser unpacks in pairs). qzeros use the same packing. Design: program (g,
j) owns a (G, BLOCK_N) tile of one group: a column-wise min/max reduction over axis 0, quantisation
in registers, then a (G, BLOCK_N / 8, 8) reshape whose last axis is shifted into its slot and summed
(the nibbles never overlap, so the sum is a bitwise or) into (G, BLOCK_N / 8) words. Bytes: 2 read
per bf16 weight, 0.5 written. Limits: K % G == 0 and N % 8 == 0; one program holds G * BLOCK_N
values; it is an offline (weight-load time) kernel, not tuned for latency.
"""

import torch
import triton
import triton.language as tl

MAX_Q = 15  # largest 4-bit code
MIN_RANGE = 1e-5  # smallest max - min, keeps constant groups finite
PACK = 8  # nibbles per int32
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # column offset held by nibble slot 0..7


@triton.jit
def _int4_awq_pack_kernel(
    # pointers
    w_ptr,
    qw_ptr,
    qz_ptr,
    s_ptr,
    # sizes
    N,
    # strides (elements; last dims contiguous)
    stride_wk,
    stride_qk,
    stride_zk,
    stride_sk,
    # scalars
    min_range,
    # meta
    MAXQ: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    g = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    krows = (g * GROUP + tl.arange(0, GROUP)).to(tl.int64)
    w = tl.load(w_ptr + krows[:, None] * stride_wk + cols[None, :], mask=cmask[None, :], other=0.0)
    w = w.to(tl.float32)

    wmax = tl.max(w, axis=0)
    wmin = tl.min(w, axis=0)
    # IEEE divisions (tl.math.div_rn): the GPU's `/` may be 2 ulp off and flip a rounding
    scale = tl.math.div_rn(tl.maximum(wmax - wmin, min_range), MAXQ)  # (BLOCK_N,) fp32
    zero = tl.clamp(tl.floor(tl.math.div_rn(-wmin, scale) + 0.5), 0.0, MAXQ)
    q = tl.floor(tl.math.div_rn(w, scale[None, :]) + 0.5)
    q = tl.clamp(q + zero[None, :], 0.0, MAXQ).to(tl.int32)

    # slot of column 8j + p is p // 2 + 4 * (p % 2); shift into place and sum the 8 nibbles
    p = tl.arange(0, 8)
    shift = 4 * (p // 2 + 4 * (p % 2))
    words = tl.sum(tl.reshape(q, (GROUP, BLOCK_N // 8, 8)) << shift[None, None, :], axis=2)
    zwords = tl.sum(tl.reshape(zero.to(tl.int32), (BLOCK_N // 8, 8)) << shift[None, :], axis=1)

    wcols = tl.program_id(1) * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
    wmask = wcols < N // 8
    tl.store(qw_ptr + krows[:, None] * stride_qk + wcols[None, :], words, mask=wmask[None, :])
    tl.store(qz_ptr + g * stride_zk + wcols, zwords, mask=wmask)
    tl.store(s_ptr + g * stride_sk + cols, scale.to(s_ptr.dtype.element_ty), mask=cmask)


def int4_awq_pack(
    w: torch.Tensor,
    group_size: int = 128,
    *,
    block_n: int = 64,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantise a (K, N) weight to packed int4 with per-(K-group, column) scales and zero points.

    Args:
        w: (K, N) bf16/fp16/fp32 weight (in_features x out_features), last dim contiguous.
        group_size: Rows of K per scale group, a power of two dividing K.
        block_n: Columns per program (power of two, >= 8).
        num_warps: Warps per program.

    Returns:
        (qweight, qzeros, scales): qweight (K, N / 8) int32 and qzeros (K / G, N / 8) int32 packed
        in AWQ nibble order [0, 2, 4, 6, 1, 3, 5, 7]; scales (K / G, N) in w's dtype.

    Raises:
        ValueError: w is not a 2-D float tensor with K % group_size == 0 and N % 8 == 0, or a
            size argument is not a power of two.
    """
    if w.dim() != 2 or not w.is_floating_point():
        raise ValueError(f"w must be a 2-D float tensor (K, N); got {w.dtype} {tuple(w.shape)}")
    k, n = w.shape
    if group_size <= 0 or group_size & (group_size - 1) or k % group_size or n % PACK:
        raise ValueError(
            f"need K % group_size == 0 (power of two) and N % 8 == 0; got w {tuple(w.shape)}, "
            f"group_size {group_size}"
        )
    if block_n < PACK or block_n & (block_n - 1):
        raise ValueError(f"block_n {block_n} must be a power of two >= 8")
    w = w if w.stride(-1) == 1 else w.contiguous()
    qweight = torch.empty((k, n // PACK), dtype=torch.int32, device=w.device)
    qzeros = torch.empty((k // group_size, n // PACK), dtype=torch.int32, device=w.device)
    scales = torch.empty((k // group_size, n), dtype=w.dtype, device=w.device)
    if w.numel() == 0:
        return qweight, qzeros, scales
    _int4_awq_pack_kernel[(k // group_size, triton.cdiv(n, block_n))](
        w, qweight, qzeros, scales,
        n,
        w.stride(0), qweight.stride(0), qzeros.stride(0), scales.stride(0),
        MIN_RANGE,
        MAXQ=MAX_Q, GROUP=group_size, BLOCK_N=block_n,
        num_warps=num_warps,
    )  # fmt: skip
    return qweight, qzeros, scales


def _pack_awq(codes: torch.Tensor) -> torch.Tensor:
    """Pack (R, N) int codes 0..15 into (R, N / 8) int32 words in AWQ nibble order."""
    grouped = codes.long().view(codes.shape[0], -1, PACK)
    words = torch.zeros(grouped.shape[:2], dtype=torch.long, device=codes.device)
    for slot, col in enumerate(AWQ_ORDER):
        words |= grouped[..., col] << (4 * slot)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def reference(
    w: torch.Tensor, group_size: int = 128
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (qweight, qzeros, scales) computed with fp32 PyTorch and an explicit packing loop."""
    k, n = w.shape
    wg = w.float().view(k // group_size, group_size, n)
    wmax, wmin = wg.amax(dim=1), wg.amin(dim=1)
    span = (wmax - wmin).clamp(min=MIN_RANGE)
    scale = span / span.new_tensor(MAX_Q)  # a device tensor: CUDA torch turns `/ float` into `* (1 / float)`, 1 ulp off IEEE division
    zero = torch.floor(-wmin / scale + 0.5).clamp(0, MAX_Q)
    q = (torch.floor(wg / scale[:, None, :] + 0.5) + zero[:, None, :]).clamp(0, MAX_Q)
    return _pack_awq(q.view(k, n)), _pack_awq(zero), scale.to(w.dtype)


def unpack_awq(words: torch.Tensor) -> torch.Tensor:
    """Return the (R, 8 * W) int32 codes held in (R, W) AWQ-packed int32 words."""
    codes = torch.empty((*words.shape, PACK), dtype=torch.int32, device=words.device)
    for slot, col in enumerate(AWQ_ORDER):
        codes[..., col] = (words >> (4 * slot)) & 0xF
    return codes.view(words.shape[0], -1)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"k", "n", "group_size"}``: weights ~ N(0, 0.02), shifted."""
    w = torch.randn(shape["k"], shape["n"], device=device) * 0.02 + 0.01
    return {"w": w.to(dtype), "group_size": shape.get("group_size", 128)}
