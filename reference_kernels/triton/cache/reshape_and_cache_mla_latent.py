"""
---
id: reshape_and_cache_mla_latent
title: MLA cache write of the latent (kv_lora_rank) and rope parts into one paged cache row
op_family: cache
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [scatter, slot-mapping, in-place, token-tile, concat-on-write, chunked-loop]
status: reference
launcher: reshape_and_cache_mla_latent
tuning:
  block_t: [8, 1, 2, 4, 16, 32]
  block_l: [256, 64, 128, 512]
  num_warps: [4, 1, 2, 8]
args:
  kv_c: {shape: [T, L], dtypes: [bf16, fp16, fp32], layout: rows, aliases: [kv_c_normed, latent]}
  k_pe: {shape: [T, R], like: kv_c, layout: rows, aliases: [k_rope, rope]}
  kv_cache: {shape: [NB, BS, L + R], like: kv_c, layout: rows, aliases: [latent_cache]}
  slot_mapping: {shape: [T], dtypes: [int32, int64], aliases: [slots, slot_ids]}
returns:
  - {name: kv_cache, alias: kv_cache}
problem:
  shapes: [{tokens: 11, kv_lora_rank: 48, rope_dim: 16, block_size: 4}]
  dtypes: [fp32]
  in_place: [kv_cache]
measured: []
---
The KV-cache write of multi-head latent attention (DeepSeek-V2/V3): a token caches no per-head K and
V but one compressed latent kv_c (L = kv_lora_rank, 512) and the shared rotary key part k_pe (R =
64), stored side by side as one (L + R)-wide row of a paged cache (num_blocks, block_size, L + R)
at slot s = slot_mapping[t] (block s // block_size, row s % block_size; s < 0 = padding, skipped),
IN PLACE. The concatenation happens on the write: program i owns BLOCK_T tokens, loads their slots
once, streams the latent in (BLOCK_T, BLOCK_L) chunks to columns [0, L) and the rope part as one
(BLOCK_T, next_pow2(R)) tile to columns [L, L + R); no concatenated temporary is built. Bytes:
(L + R) elements read and written per token (1152 bytes in bf16) plus the slot. When it wins: the
MLA decode/prefill cache update, where a separate torch.cat would double the traffic. Limits: the
last dimension of every tensor must be contiguous (rows); R <= 1024; duplicate slots race.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _reshape_and_cache_mla_latent_kernel(
    # pointers
    kv_c_ptr,
    k_pe_ptr,
    cache_ptr,
    slot_ptr,
    # sizes
    T,
    L,
    R,
    block_size,
    # strides (elements; last dims contiguous)
    stride_ct,
    stride_pt,
    stride_blk,
    stride_row,
    # meta
    BLOCK_T: tl.constexpr,
    BLOCK_L: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = tokens < T
    slots = tl.load(slot_ptr + tokens, mask=t_ok, other=-1).to(tl.int64)
    write = t_ok & (slots >= 0)
    dst = (slots // block_size * stride_blk + slots % block_size * stride_row)[:, None]
    t64 = tokens.to(tl.int64)[:, None]
    for l0 in range(0, L, BLOCK_L):
        cols = l0 + tl.arange(0, BLOCK_L)
        c_ok = (cols < L)[None, :]
        x = tl.load(kv_c_ptr + t64 * stride_ct + cols[None, :], mask=write[:, None] & c_ok)
        tl.store(cache_ptr + dst + cols[None, :], x, mask=write[:, None] & c_ok)
    rcols = tl.arange(0, BLOCK_R)
    r_ok = write[:, None] & (rcols < R)[None, :]
    pe = tl.load(k_pe_ptr + t64 * stride_pt + rcols[None, :], mask=r_ok)
    tl.store(cache_ptr + dst + L + rcols[None, :], pe, mask=r_ok)


def reshape_and_cache_mla_latent(
    kv_c: torch.Tensor,
    k_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    block_t: int | None = None,
    block_l: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Write [kv_c | k_pe] of every token to its slot of the latent cache, in place.

    Args:
        kv_c: (T, L) bf16/fp16/fp32 latent, last dim contiguous.
        k_pe: (T, R) same dtype, last dim contiguous.
        kv_cache: (num_blocks, block_size, L + R) same dtype, last dim contiguous; updated.
        slot_mapping: (T,) int32/int64 slot per token; < 0 = skip.
        block_t: Tokens per program (power of two); None = min(next_pow2(T), 8).
        block_l: Latent columns per chunk (power of two); None = min(next_pow2(L), 256).
        num_warps: Warps per program; None = 4.

    Returns:
        kv_cache: the tensor passed in, updated.

    Raises:
        ValueError: The shapes, dtypes or layout do not fit, or R > 1024.
    """
    if kv_c.dim() != 2 or k_pe.dim() != 2 or k_pe.shape[0] != kv_c.shape[0]:
        raise ValueError(
            f"kv_c/k_pe must be (T, L)/(T, R); got {tuple(kv_c.shape)}, {tuple(k_pe.shape)}"
        )
    t, lat = kv_c.shape
    rope = k_pe.shape[1]
    if kv_cache.dim() != 3 or kv_cache.shape[2] != lat + rope:
        raise ValueError(
            f"kv_cache must be (blocks, block_size, {lat + rope}); got {tuple(kv_cache.shape)}"
        )
    if not (kv_c.dtype == k_pe.dtype == kv_cache.dtype):
        raise ValueError(f"dtypes differ: {kv_c.dtype}, {k_pe.dtype}, {kv_cache.dtype}")
    if slot_mapping.shape != (t,) or slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"slot_mapping must be int32/int64 ({t},); got {tuple(slot_mapping.shape)}"
        )
    if rope > 1024:
        raise ValueError(f"rope width {rope} > 1024 does not fit one tile")
    if kv_cache.stride(2) != 1:
        raise ValueError(f"kv_cache's last dim must be contiguous; strides {kv_cache.stride()}")
    if t == 0:
        return kv_cache
    kv_c = kv_c if kv_c.stride(1) == 1 else kv_c.contiguous()
    k_pe = k_pe if k_pe.stride(1) == 1 else k_pe.contiguous()
    cfg = {"block_t": min(triton.next_power_of_2(t), 8), "num_warps": 4,
           "block_l": min(triton.next_power_of_2(lat), 256)}  # fmt: skip
    given = {"block_t": block_t, "block_l": block_l, "num_warps": num_warps}
    cfg.update({name: val for name, val in given.items() if val is not None})
    _reshape_and_cache_mla_latent_kernel[(triton.cdiv(t, cfg["block_t"]),)](
        kv_c, k_pe, kv_cache, slot_mapping.contiguous(),
        t, lat, rope, kv_cache.shape[1],
        kv_c.stride(0), k_pe.stride(0), kv_cache.stride(0), kv_cache.stride(1),
        BLOCK_T=cfg["block_t"], BLOCK_L=cfg["block_l"], BLOCK_R=triton.next_power_of_2(rope),
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return kv_cache


def reference(
    kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> torch.Tensor:
    """Write the kept tokens' rows into the cache in place (as the kernel does); return it."""
    keep = slot_mapping >= 0
    rows = kv_cache.view(-1, kv_cache.shape[2])
    rows[slot_mapping[keep].long()] = torch.cat([kv_c, k_pe], dim=1)[keep]
    return kv_cache


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``shape = {"tokens", "kv_lora_rank", "rope_dim", "block_size"}``.

    Distinct random slots in a cache one block larger than needed, every fourth token padding;
    the cache starts random so skipped slots show.
    """
    t, lat, rope, bs = (
        shape["tokens"],
        shape["kv_lora_rank"],
        shape["rope_dim"],
        shape.get("block_size", 16),
    )
    nb = triton.cdiv(t, bs) + 1
    slots = torch.randperm(nb * bs, device=device)[:t]
    slots[::4] = -1
    return {
        "kv_c": torch.randn(t, lat, device=device).to(dtype),
        "k_pe": torch.randn(t, rope, device=device).to(dtype),
        "kv_cache": torch.randn(nb, bs, lat + rope, device=device).to(dtype),
        "slot_mapping": slots,
    }
