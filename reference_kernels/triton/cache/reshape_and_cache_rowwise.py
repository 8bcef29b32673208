"""
---
id: reshape_and_cache_rowwise
title: Paged KV-cache write, one program per token scattering its K and V rows to its slot
op_family: cache
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, scatter, slot-mapping, in-place, strided-access]
status: reference
launcher: reshape_and_cache_rowwise
tuning:
  block_h: [4, 1, 2, 8, 16]
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
  shapes: [{tokens: 1, heads: 4, head_dim: 128}, {tokens: 33, heads: 3, head_dim: 40}]
  dtypes: [fp32, bf16]
  in_place: [key_cache, value_cache]
measured:
  - {device: NVIDIA H200, shape: reshape_and_cache/0, dtype: bf16, latency_us: 4.032, sol_fraction: 0.6984, date: '2026-12-03'}
---
The KV-cache write of paged attention: token t's key and value (H, D) go to slot s = slot_mapping[t]
of caches laid out (num_blocks, block_size, H, D), i.e. block s // block_size, offset s %
block_size; tokens with a negative slot (padding) are skipped. The caches are updated IN PLACE: that
is the operator's definition, and the launcher returns the same two cache tensors. One program per
token walks the heads in (BLOCK_H, next_pow2(D)) tiles through full strides on both sides, so
key/value may be strided views (e.g. slices of a fused qkv output) and the cache may be any 4D
layout. Bytes: read and write 2 * H * D elements per token; nothing else. Limits: one program per
token, so decode (T = 1..8) runs on a handful of SMs; duplicate slots race (last writer wins,
unspecified).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _reshape_and_cache_rowwise_kernel(
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
    # padding tokens carry a negative slot: the whole program does nothing (all lanes masked)
    valid = slot >= 0
    block = slot // BLOCK_SIZE
    offset = slot % BLOCK_SIZE

    k_src = key_ptr + token * stride_kt
    v_src = value_ptr + token * stride_vt
    k_dst = key_cache_ptr + block * stride_kcb + offset * stride_kcs
    v_dst = value_cache_ptr + block * stride_vcb + offset * stride_vcs

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    for h_start in range(0, H, BLOCK_H):
        heads = h_start + offs_h
        mask = valid & (heads < H)[:, None] & (offs_d < D)[None, :]
        # copy as stored: no arithmetic, so no fp32 round trip is needed
        k = tl.load(k_src + heads[:, None] * stride_kh + offs_d[None, :] * stride_kd, mask=mask)
        v = tl.load(v_src + heads[:, None] * stride_vh + offs_d[None, :] * stride_vd, mask=mask)
        tl.store(k_dst + heads[:, None] * stride_kch + offs_d[None, :] * stride_kcd, k, mask=mask)
        tl.store(v_dst + heads[:, None] * stride_vch + offs_d[None, :] * stride_vcd, v, mask=mask)


def _launch_config(h: int, d: int) -> dict[str, int]:
    """Return heads per tile (about 1024 elements per tile) and warps."""
    block_d = triton.next_power_of_2(d)
    block_h = max(1, min(triton.next_power_of_2(h), 1024 // block_d))
    return {
        "block_h": block_h,
        "block_d": block_d,
        "num_warps": 4 if block_h * block_d >= 512 else 2,
    }


def _check_shapes(key, value, key_cache, value_cache, slot_mapping) -> None:
    """Raise ValueError unless the five tensors fit the (T, H, D) -> (blocks, bs, H, D) contract."""
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
            f"slot_mapping must be int32/int64 ({t},); got {tuple(slot_mapping.shape)}"
        )
    if not (key.dtype == value.dtype == key_cache.dtype == value_cache.dtype):
        raise ValueError(f"dtypes differ: {key.dtype}, {value.dtype}, {key_cache.dtype}")


def reshape_and_cache_rowwise(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write key/value rows into the paged caches at slot_mapping, in place.

    Args:
        key: (T, H, D) bf16/fp16/fp32, any strides.
        value: (T, H, D) same dtype as ``key``, any strides.
        key_cache: (num_blocks, block_size, H, D) same dtype, any strides; written in place.
        value_cache: same shape and dtype as ``key_cache``; written in place.
        slot_mapping: (T,) int32/int64 slot per token (block * block_size + offset); < 0 = skip.
        block_h: Heads per tile (power of two); None picks about 1024 elements per tile.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        (key_cache, value_cache): the same tensors that were passed in, now updated.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    _check_shapes(key, value, key_cache, value_cache, slot_mapping)
    t, h, d = key.shape
    if t == 0:
        return key_cache, value_cache
    cfg = _launch_config(h, d)
    given = {"block_h": block_h, "num_warps": num_warps}
    cfg.update({k: v for k, v in given.items() if v is not None})
    _reshape_and_cache_rowwise_kernel[(t,)](
        key, value, key_cache, value_cache, slot_mapping,
        h, d, key_cache.shape[1],
        *key.stride(), *value.stride(), *key_cache.stride(), *value_cache.stride(),
        BLOCK_H=cfg["block_h"], BLOCK_D=cfg["block_d"],
        num_warps=cfg["num_warps"],
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
    """Return the five tensors for ``shape = {"tokens", "heads", "head_dim"}``.

    Slots are a random choice of distinct slots in caches one block larger than needed, with every
    fifth token from the third on marked as padding (-1), so even a single token is written; the
    caches start as random values so skipped slots show.
    """
    t, h, d, bs = shape["tokens"], shape["heads"], shape["head_dim"], shape.get("block_size", 16)
    num_blocks = triton.cdiv(t, bs) + 1
    key = torch.randn(t, h, d, device=device).to(dtype)
    value = torch.randn(t, h, d, device=device).to(dtype)
    key_cache = torch.randn(num_blocks, bs, h, d, device=device).to(dtype)
    value_cache = torch.randn(num_blocks, bs, h, d, device=device).to(dtype)
    slot_mapping = torch.randperm(num_blocks * bs, device=device)[:t]
    slot_mapping[2::5] = -1
    return {"key": key, "value": value, "key_cache": key_cache, "value_cache": value_cache,
            "slot_mapping": slot_mapping}  # fmt: skip
