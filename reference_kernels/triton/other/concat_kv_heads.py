"""
---
id: concat_kv_heads
title: Concatenate per-head k_nope with a head-shared k_rope into one K tensor (MLA), 2-D tiles
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-tile, broadcast-heads, concat, rope-reuse, copy]
status: reference
launcher: concat_kv_heads
tuning:
  block_t: [16, 1, 4, 8, 32, 64]
  num_warps: [4, 1, 2, 8]
args:
  k_nope: {shape: [T, H, DN], dtypes: [bf16, fp16, fp32]}
  k_rope: {shape: [T, HR, DR], dtypes: [bf16, fp16, fp32], aliases: [k_pe]}
returns:
  - {name: k, shape: [T, H, DN + DR], dtype: k_nope}
problem:
  shapes: [{tokens: 5, heads: 3, dn: 128, dr: 64}, {tokens: 20, heads: 2, dn: 48, dr: 16, rope_heads: 2}]
  dtypes: [fp32, bf16]
measured: []
---
Builds MLA's per-head key for prefill attention: k[t, h] = concat(k_nope[t, h], k_rope[t, hr]) where
k_rope has one head shared by all H heads (HR = 1, the decoupled RoPE key) or one per head (HR = H).
The grid is (token blocks, heads): each program copies a (BLOCK_T, DN) tile of k_nope and a
(BLOCK_T, DR) tile of k_rope into the two column ranges of the output rows, so each program issues
two wide, separately masked copies (DN = 128 and DR = 64 are both powers of two in DeepSeek models,
so there is no padding waste) and the output rows are written contiguously. With HR = 1 the rope
tile is read by all H head programs of a token block, mostly from L2, so DRAM reads are about DN +
DR / H elements per output row of DN + DR. Limits: last dims contiguous (inputs may be strided
views, e.g. slices of a fused kv projection); DN, DR <= 1024; a pure copy, exact in any dtype.
"""

import torch
import triton
import triton.language as tl

MAX_D = 1024


@triton.jit
def _concat_kv_heads_kernel(
    # pointers
    nope_ptr,
    rope_ptr,
    k_ptr,
    # sizes
    T,
    DN,
    DR,
    # strides (elements; the last dims are contiguous)
    stride_nt,
    stride_nh,
    stride_rt,
    stride_rh,
    stride_kt,
    stride_kh,
    # meta
    BLOCK_T: tl.constexpr,
    BLOCK_DN: tl.constexpr,
    BLOCK_DR: tl.constexpr,
    SHARED_ROPE: tl.constexpr,
):
    tokens = (tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)  # int64 offsets
    head = tl.program_id(1).to(tl.int64)
    t_mask = tokens < T
    out_row = k_ptr + tokens[:, None] * stride_kt + head * stride_kh

    offs_n = tl.arange(0, BLOCK_DN)
    mask_n = t_mask[:, None] & (offs_n < DN)[None, :]
    nope = tl.load(nope_ptr + tokens[:, None] * stride_nt + head * stride_nh + offs_n[None, :],
                   mask=mask_n)  # fmt: skip
    tl.store(out_row + offs_n[None, :], nope, mask=mask_n)

    rope_head = 0 if SHARED_ROPE else head
    offs_r = tl.arange(0, BLOCK_DR)
    mask_r = t_mask[:, None] & (offs_r < DR)[None, :]
    rope = tl.load(rope_ptr + tokens[:, None] * stride_rt + rope_head * stride_rh + offs_r[None, :],
                   mask=mask_r)  # fmt: skip
    tl.store(out_row + DN + offs_r[None, :], rope.to(k_ptr.dtype.element_ty), mask=mask_r)


def concat_kv_heads(
    k_nope: torch.Tensor,
    k_rope: torch.Tensor,
    *,
    block_t: int = 16,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return concat(k_nope, k_rope broadcast over heads) along the last dimension.

    Args:
        k_nope: (T, H, DN) bf16/fp16/fp32, last dim contiguous.
        k_rope: (T, 1, DR) or (T, H, DR), same dtype, last dim contiguous.
        block_t: Tokens per program (a power of two).
        num_warps: Warps per program; None = 4.

    Returns:
        k: (T, H, DN + DR), dtype of ``k_nope``, contiguous.

    Raises:
        ValueError: Shapes that do not match, dtypes that differ, DN or DR > 1024 or a bad block_t.
    """
    if k_nope.dim() != 3 or k_rope.dim() != 3:
        raise ValueError(f"k_nope and k_rope must be 3-D (T, H, D); got "
                         f"{tuple(k_nope.shape)} and {tuple(k_rope.shape)}")  # fmt: skip
    if k_nope.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"k_nope must be bf16/fp16/fp32; got {k_nope.dtype}")
    if k_rope.dtype != k_nope.dtype:
        raise ValueError(f"k_rope dtype {k_rope.dtype} must equal k_nope's {k_nope.dtype}")
    t, h, dn = k_nope.shape
    if k_rope.shape[0] != t or k_rope.shape[1] not in (1, h):
        raise ValueError(
            f"k_rope must be ({t}, 1, DR) or ({t}, {h}, DR); got {tuple(k_rope.shape)}"
        )
    dr = k_rope.shape[2]
    if max(dn, dr) > MAX_D:
        raise ValueError(f"DN = {dn} and DR = {dr} must be <= {MAX_D}")
    if block_t < 1 or block_t & (block_t - 1):
        raise ValueError(f"block_t must be a power of two; got {block_t}")
    if k_nope.stride(-1) != 1:
        k_nope = k_nope.contiguous()
    if k_rope.stride(-1) != 1:
        k_rope = k_rope.contiguous()
    k = torch.empty((t, h, dn + dr), dtype=k_nope.dtype, device=k_nope.device)
    if k.numel() == 0:
        return k
    _concat_kv_heads_kernel[(triton.cdiv(t, block_t), h)](
        k_nope, k_rope, k,
        t, dn, dr,
        k_nope.stride(0), k_nope.stride(1), k_rope.stride(0), k_rope.stride(1),
        k.stride(0), k.stride(1),
        BLOCK_T=block_t,
        BLOCK_DN=triton.next_power_of_2(max(dn, 1)), BLOCK_DR=triton.next_power_of_2(max(dr, 1)),
        SHARED_ROPE=k_rope.shape[1] == 1 and h > 1,
        num_warps=num_warps or 4,
    )  # fmt: skip
    return k


def reference(k_nope: torch.Tensor, k_rope: torch.Tensor) -> torch.Tensor:
    """Return torch.cat of k_nope and the head-broadcast k_rope."""
    return torch.cat([k_nope, k_rope.expand(-1, k_nope.shape[1], -1)], dim=-1)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"k_nope", "k_rope"}`` for ``shape = {"tokens", "heads", "dn", "dr"}``.

    ``k_nope`` is a strided slice of a fused (T, H, DN + DV) projection, as in MLA prefill; the
    optional key ``rope_heads`` (default 1) sets HR.
    """
    t, h, dn, dr = shape["tokens"], shape["heads"], shape["dn"], shape["dr"]
    kv = torch.randn(t, h, dn + 32, device=device).to(dtype)
    k_rope = torch.randn(t, shape.get("rope_heads", 1), dr, device=device).to(dtype)
    return {"k_nope": kv[..., :dn], "k_rope": k_rope}
