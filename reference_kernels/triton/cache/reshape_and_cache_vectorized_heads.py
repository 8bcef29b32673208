"""
---
id: reshape_and_cache_vectorized_heads
title: Paged KV-cache write, one program per token storing all heads of K and V as one 2-D tile each
op_family: cache
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, scatter, slot-mapping, in-place, whole-row-tile, vectorized-loads]
status: reference
launcher: reshape_and_cache_vectorized_heads
tuning:
  num_warps: [4, 1, 2, 8]
args:
  key: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], layout: any, flattened: true, aliases: [k]}
  value: {shape: [T, H, D], like: key, layout: any, flattened: true, aliases: [v]}
  key_cache: {shape: [NB, BS, H, D], like: key, layout: any, aliases: [k_cache]}
  value_cache: {shape: [NB, BS, H, D], like: key, layout: any, aliases: [v_cache]}
  slot_mapping: {shape: [T], dtypes: [int32, int64], aliases: [slots, slot_ids]}
returns:
  - {name: key_cache, alias: key_cache}
  - {name: value_cache, alias: value_cache}
problem:
  shapes: [{tokens: 1, heads: 4, head_dim: 128}, {tokens: 21, heads: 3, head_dim: 40, block_size: 8}]
  dtypes: [fp32, bf16]
  in_place: [key_cache, value_cache]
measured:
  - {device: NVIDIA H200, shape: reshape_and_cache/0, dtype: bf16, latency_us: 3.904, sol_fraction: 0.7787, date: '2026-12-03'}
---
The paged KV-cache write (token t's key and value (H, D) go to slot s = slot_mapping[t] of
(num_blocks, block_size, H, D) caches, block s // block_size, row s % block_size; negative slots
are padding and are skipped), updated IN PLACE as the operator defines it. One program per token
issues exactly four memory operations: one (next_pow2(H), next_pow2(D)) tile load of the key, one
of the value, and one tile store of each, with no head loop, so every load of the token is in
flight at once and the compiler sees the whole row as one masked vector access (D contiguous gives
16-byte vectors; the head axis uses the full strides, so key/value may be slices of a fused qkv
buffer). Bytes: 2 * H * D elements read and written per token, nothing else; no arithmetic. When
it wins: rows up to a few thousand elements (H * D <= 8192 for bf16 fills the registers of 4-8
warps), decode batches where the per-program latency matters more than the number of programs.
Limits: H * D padded to powers of two must be <= 16384 elements (raises otherwise; see
reshape_and_cache_rowwise for wider rows); one program per token; duplicate slots race.
"""

import torch
import triton
import triton.language as tl

_MAX_TILE = 16384  # padded H x D elements one program holds


@triton.jit
def _reshape_and_cache_vectorized_heads_kernel(
    # pointers
    key_ptr,
    value_ptr,
    key_cache_ptr,
    value_cache_ptr,
    slot_ptr,
    # sizes
    H,
    D,
    BLOCK_SIZE,
    # strides (elements): inputs (T, H, D), caches (num_blocks, block_size, H, D)
    stride_kt,
    stride_kh,
    stride_kd,
    stride_vt,
    stride_vh,
    stride_vd,
    stride_kcb,
    stride_kcs,
    stride_kch,
    stride_kcd,
    stride_vcb,
    stride_vcs,
    stride_vch,
    stride_vcd,
    # meta
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)  # int64: slot * stride can pass 2^31
    block = slot // BLOCK_SIZE
    row = slot % BLOCK_SIZE
    offs_h = tl.arange(0, BLOCK_H)[:, None]
    offs_d = tl.arange(0, BLOCK_D)[None, :]
    # a padding token (slot < 0) masks every lane: no load, no store
    mask = (slot >= 0) & (offs_h < H) & (offs_d < D)

    # both loads first, so they overlap; a copy needs no fp32 round trip
    k = tl.load(key_ptr + token * stride_kt + offs_h * stride_kh + offs_d * stride_kd, mask=mask)
    v = tl.load(value_ptr + token * stride_vt + offs_h * stride_vh + offs_d * stride_vd, mask=mask)
    k_dst = key_cache_ptr + block * stride_kcb + row * stride_kcs
    v_dst = value_cache_ptr + block * stride_vcb + row * stride_vcs
    tl.store(k_dst + offs_h * stride_kch + offs_d * stride_kcd, k, mask=mask)
    tl.store(v_dst + offs_h * stride_vch + offs_d * stride_vcd, v, mask=mask)


def _check_shapes(key, value, key_cache, value_cache, slot_mapping) -> None:
    """Raise ValueError unless the tensors fit the (T, H, D) -> (blocks, bs, H, D) contract."""
    if key.dim() != 3 or value.shape != key.shape:
        raise ValueError(
            f"key/value must be (T, H, D); got {tuple(key.shape)}, {tuple(value.shape)}"
        )
    t, h, d = key.shape
    if (
        key_cache.dim() != 4
        or key_cache.shape[2:] != (h, d)
        or value_cache.shape != key_cache.shape
    ):
        raise ValueError(
            f"caches must be (num_blocks, block_size, {h}, {d}); "
            f"got {tuple(key_cache.shape)}, {tuple(value_cache.shape)}"
        )
    if slot_mapping.shape != (t,) or slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"slot_mapping must be int32/int64 of shape ({t},); got {slot_mapping.dtype} "
            f"{tuple(slot_mapping.shape)}"
        )
    if not (key.dtype == value.dtype == key_cache.dtype == value_cache.dtype):
        raise ValueError(f"dtypes differ: {key.dtype}, {value.dtype}, {key_cache.dtype}")
    if triton.next_power_of_2(h) * triton.next_power_of_2(d) > _MAX_TILE:
        raise ValueError(
            f"H x D = {h} x {d} pads to more than {_MAX_TILE} elements per tile; "
            "use reshape_and_cache_rowwise for rows this wide"
        )


def reshape_and_cache_vectorized_heads(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write key/value rows into the paged caches at slot_mapping, in place.

    Args:
        key: (T, H, D) bf16/fp16/fp32, any strides.
        value: (T, H, D) same dtype as ``key``, any strides.
        key_cache: (num_blocks, block_size, H, D) same dtype, any strides; written in place.
        value_cache: same shape and dtype as ``key_cache``; written in place.
        slot_mapping: (T,) int32/int64 slot per token (block * block_size + offset); < 0 = skip.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        (key_cache, value_cache): the same tensors that were passed in, now updated.

    Raises:
        ValueError: The shapes or dtypes do not fit, or a row is too wide for one tile.
    """
    _check_shapes(key, value, key_cache, value_cache, slot_mapping)
    t, h, d = key.shape
    if t == 0:
        return key_cache, value_cache
    block_h, block_d = triton.next_power_of_2(h), triton.next_power_of_2(d)
    if num_warps is None:
        num_warps = 8 if block_h * block_d >= 4096 else 4 if block_h * block_d >= 512 else 2
    _reshape_and_cache_vectorized_heads_kernel[(t,)](
        key, value, key_cache, value_cache, slot_mapping,
        h, d, key_cache.shape[1],
        *key.stride(), *value.stride(), *key_cache.stride(), *value_cache.stride(),
        BLOCK_H=block_h, BLOCK_D=block_d, num_warps=num_warps,
    )  # fmt: skip
    return key_cache, value_cache


def reference(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write the kept tokens' rows into the caches in place (as the kernel does); return them."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    bs = key_cache.shape[1]  # block/row indexing works for any cache layout, not only contiguous
    key_cache[slots // bs, slots % bs] = key[keep]
    value_cache[slots // bs, slots % bs] = value[keep]
    return key_cache, value_cache


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return the five tensors for ``shape = {"tokens", "heads", "head_dim"}`` (+ ``block_size``).

    Distinct random slots in caches one block larger than needed, every fifth token from the third
    on padding (-1), so even a single token is written; the caches start random so a skipped or
    misplaced row shows.
    """
    t, h, d, bs = shape["tokens"], shape["heads"], shape["head_dim"], shape.get("block_size", 16)
    num_blocks = triton.cdiv(t, bs) + 1
    slot_mapping = torch.randperm(num_blocks * bs, device=device)[:t]
    slot_mapping[2::5] = -1
    return {
        "key": torch.randn(t, h, d, device=device).to(dtype),
        "value": torch.randn(t, h, d, device=device).to(dtype),
        "key_cache": torch.randn(num_blocks, bs, h, d, device=device).to(dtype),
        "value_cache": torch.randn(num_blocks, bs, h, d, device=device).to(dtype),
        "slot_mapping": slot_mapping,
    }
