"""
---
id: int4_dequant_unpack
title: Unpack AWQ-order int4 weights with per-group scales and zero points back to bf16/fp16 tiles
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int32, bf16, fp16, fp32]
bound: memory
techniques:
  [int4-unpack, awq-interleave, group-dequant, asymmetric-zero-point, 2d-tile, word-broadcast-load]
status: reference
launcher: int4_dequant_unpack
tuning:
  block_k: [32, 8, 16, 64]
  block_n: [64, 8, 16, 32, 128]
  num_warps: [4, 1, 2, 8]
args:
  qweight: {shape: [K, W], dtypes: [int32], aliases: [qw, packed_weight]}
  qzeros: {shape: [KG, W], dtypes: [int32], aliases: [qz, zeros]}
  scales: {shape: [KG, 8*W], dtypes: [bf16, fp16, fp32], aliases: [scale, weight_scale]}
  group_size: {type: int, default: 128, aliases: [group, q_group_size]}
returns:
  - {name: w, shape: [K, 8*W], dtype: scales}
problem:
  shapes: [{k: 64, n: 48, group_size: 32}, {k: 40, n: 16, group_size: 8}]
  dtypes: [fp32, bf16]
measured: []
---
The inverse of int4_awq_pack: w[k, n] = (q[k, n] - z[k // G, n]) * s[k // G, n], with q and z held
as 4-bit codes packed eight per int32 in AWQ order (column 8j + p in nibble slot p // 2 + 4 * (p %
2), i.e. slots hold columns [0, 2, 4, 6, 1, 3, 5, 7]). Design: program (i, j) owns a (BLOCK_K,
BLOCK_N) output tile. Instead of unpacking words into a wider register tile, every output column
loads its own word (column n reads word n // 8: eight lanes hit the same 4-byte address, which the
load unit serves as one broadcast transaction) and extracts its nibble with a per-column shift, so
the tile is built with no reshape or interleave. The zero codes are decoded the same way once per
tile row group, and because BLOCK_K rows may span several groups, scale and zero rows are gathered
per row (k // G). Arithmetic is in fp32 and the result is rounded once to the scales' dtype. Bytes:
0.5 read + 2 written per bf16 weight, plus scales and zeros (1/G of that). Use: materialise an AWQ
checkpoint for a dense GEMM, or check a W4A16 GEMM. Limits: N % 8 == 0; K % G == 0; no fusion into a
GEMM (see gemm_w4a16_dequant for that).
"""

import torch
import triton
import triton.language as tl

PACK = 8  # nibbles per int32


@triton.jit
def _int4_dequant_kernel(
    # pointers
    qw_ptr,
    qz_ptr,
    s_ptr,
    w_ptr,
    # sizes
    K,
    N,
    # strides (elements; last dims contiguous)
    stride_qk,
    stride_zk,
    stride_sk,
    stride_wk,
    # meta
    GROUP: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < K)[:, None] & (cols < N)[None, :]
    rows64 = rows.to(tl.int64)
    groups = rows64 // GROUP
    words = cols // 8
    p = cols % 8
    shift = (4 * (p // 2 + 4 * (p % 2)))[None, :]  # AWQ nibble slot of each column

    packed = tl.load(qw_ptr + rows64[:, None] * stride_qk + words[None, :], mask=mask, other=0)
    q = (packed >> shift) & 0xF
    zpacked = tl.load(qz_ptr + groups[:, None] * stride_zk + words[None, :], mask=mask, other=0)
    z = (zpacked >> shift) & 0xF
    s = tl.load(s_ptr + groups[:, None] * stride_sk + cols[None, :], mask=mask, other=0.0)
    w = (q - z).to(tl.float32) * s.to(tl.float32)
    tl.store(w_ptr + rows64[:, None] * stride_wk + cols[None, :], w.to(w_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


def int4_dequant_unpack(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    group_size: int = 128,
    *,
    block_k: int = 32,
    block_n: int = 64,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return the (K, N) weight (q - zero) * scale from AWQ-packed int4 codes.

    Args:
        qweight: (K, N / 8) int32 packed codes.
        qzeros: (K / G, N / 8) int32 packed zero points.
        scales: (K / G, N) bf16/fp16/fp32 scales; the output has this dtype.
        group_size: Rows of K per group (G).
        block_k: Rows per program (power of two).
        block_n: Columns per program (power of two).
        num_warps: Warps per program.

    Returns:
        w: (K, N) in scales' dtype, contiguous.

    Raises:
        ValueError: Dtypes or shapes disagree (names the tensors and what was expected).
    """
    if qweight.dtype != torch.int32 or qzeros.dtype != torch.int32:
        raise ValueError(f"qweight/qzeros must be int32; got {qweight.dtype}, {qzeros.dtype}")
    if scales.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"scales must be bf16, fp16 or fp32; got {scales.dtype}")
    if qweight.dim() != 2 or group_size <= 0 or qweight.shape[0] % group_size:
        raise ValueError(
            f"qweight must be (K, N / 8) with K % group_size == 0; got {tuple(qweight.shape)}, "
            f"group_size {group_size}"
        )
    k, n = qweight.shape[0], qweight.shape[1] * PACK
    if tuple(qzeros.shape) != (k // group_size, n // PACK) or tuple(scales.shape) != (
        k // group_size,
        n,
    ):
        raise ValueError(
            f"for qweight {tuple(qweight.shape)} and group_size {group_size} need qzeros "
            f"{(k // group_size, n // PACK)} and scales {(k // group_size, n)}; got "
            f"{tuple(qzeros.shape)} and {tuple(scales.shape)}"
        )
    for name, value in (("block_k", block_k), ("block_n", block_n)):
        if value <= 0 or value & (value - 1):
            raise ValueError(f"{name} {value} must be a power of two")
    qweight, qzeros, scales = (t if t.stride(-1) == 1 else t.contiguous()
                               for t in (qweight, qzeros, scales))  # fmt: skip
    w = torch.empty((k, n), dtype=scales.dtype, device=scales.device)
    if w.numel() == 0:
        return w
    _int4_dequant_kernel[(triton.cdiv(k, block_k), triton.cdiv(n, block_n))](
        qweight, qzeros, scales, w,
        k, n,
        qweight.stride(0), qzeros.stride(0), scales.stride(0), w.stride(0),
        GROUP=group_size, BLOCK_K=block_k, BLOCK_N=block_n,
        num_warps=num_warps,
    )  # fmt: skip
    return w


def _unpack(words: torch.Tensor) -> torch.Tensor:
    """Return (R, 8 * W) codes from (R, W) words: column 8j + p from slot p // 2 + 4 * (p % 2)."""
    slots = torch.tensor([p // 2 + 4 * (p % 2) for p in range(PACK)], device=words.device)
    return ((words[..., None] >> (4 * slots)) & 0xF).reshape(words.shape[0], -1)


def reference(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group_size: int = 128
) -> torch.Tensor:
    """Return (q - zero) * scale in fp32 PyTorch, cast to scales' dtype."""
    q, z = _unpack(qweight), _unpack(qzeros)
    zr = z.repeat_interleave(group_size, dim=0)
    sr = scales.float().repeat_interleave(group_size, dim=0)
    return ((q - zr).float() * sr).to(scales.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"k", "n", "group_size"}``: random codes, scales ~ U(0, 0.01)."""
    k, n, group = shape["k"], shape["n"], shape.get("group_size", 128)

    def words(rows: int) -> torch.Tensor:
        return torch.randint(-(2**31), 2**31, (rows, n // PACK), dtype=torch.int64).to(torch.int32)

    scales = (torch.rand(k // group, n, device=device) * 0.01).to(dtype)
    return {"qweight": words(k).to(device), "qzeros": words(k // group).to(device),
            "scales": scales, "group_size": group}  # fmt: skip
