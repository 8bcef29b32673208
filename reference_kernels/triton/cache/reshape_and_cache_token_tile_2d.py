"""
---
id: reshape_and_cache_token_tile_2d
title: Paged KV-cache write over (token tile, head tile) programs of strided 3-D tiles
op_family: cache
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-grid, 3d-tile, scatter, slot-mapping, in-place, strided-access, tile-skip]
status: reference
launcher: reshape_and_cache_token_tile_2d
tuning:
  block_t: [4, 1, 2, 8, 16]
  block_h: [2, 1, 4, 8]
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
  shapes: [{tokens: 13, heads: 3, head_dim: 20}]
  dtypes: [fp32]
  in_place: [key_cache, value_cache]
measured:
  - {device: NVIDIA H200, shape: reshape_and_cache/0, dtype: bf16, latency_us: 3.776, sol_fraction: 0.7712, date: '2026-12-03'}
---
The paged KV-cache write (token t's key and value (H, D) go to slot s = slot_mapping[t] of
(num_blocks, block_size, H, D) caches, block s // block_size, row s % block_size; slot -1 marks a
padding token and is skipped), updated IN PLACE as the operator defines it. The grid is 2-D: program
(i, j) owns tokens [i * BLOCK_T, (i + 1) * BLOCK_T) and heads [j * BLOCK_H, (j + 1) * BLOCK_H) and
moves them as one (BLOCK_T, BLOCK_H, next_pow2(D)) tile per tensor, every side addressed through
its full strides (block, row, head, dim of the caches; token, head, dim of key/value): no copy of
strided key/value (fused-qkv slices) and no contiguity demand on the caches (e.g. head-major cache
views), unlike the flattened-slot tiled design. A tile whose slots are all negative (the padded tail
of a CUDA-graph batch) branches past its loads and stores entirely. Bytes: 2 * H * D elements read
and written per real token, 4-8 bytes of slot per token and head tile. When it wins: prefill with
padded batches and any cache layout; the head axis spreads decode tokens over several programs.
Limits: D up to 1024 (one tile row); duplicate slots race (last writer wins, unspecified).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _reshape_and_cache_token_tile_2d_kernel(
    # pointers
    key_ptr,
    value_ptr,
    key_cache_ptr,
    value_cache_ptr,
    slot_ptr,
    # sizes
    T,
    H,
    D,
    block_size,
    # strides (elements) of key, value (token, head, dim) and the caches (block, row, head, dim)
    skt, skh, skd,
    svt, svh, svd,
    sk_blk, sk_row, sk_h, sk_d,
    sv_blk, sv_row, sv_h, sv_d,
    # meta
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):  # fmt: skip
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    dims = tl.arange(0, BLOCK_D)
    token_ok = tokens < T
    slots = tl.load(slot_ptr + tokens, mask=token_ok, other=-1).to(tl.int64)
    # whole-tile skip: a tile of padding tokens touches nothing but its slots
    if tl.max(slots, axis=0) >= 0:
        blk = (slots // block_size)[:, None, None]
        row = (slots % block_size)[:, None, None]
        t3 = tokens.to(tl.int64)[:, None, None]
        h3 = heads[None, :, None]
        d3 = dims[None, None, :]
        hd_ok = (h3 < H) & (d3 < D)
        load_mask = token_ok[:, None, None] & hd_ok
        store_mask = load_mask & (slots >= 0)[:, None, None]
        k = tl.load(key_ptr + t3 * skt + h3 * skh + d3 * skd, mask=load_mask)
        v = tl.load(value_ptr + t3 * svt + h3 * svh + d3 * svd, mask=load_mask)
        k_dst = key_cache_ptr + blk * sk_blk + row * sk_row + h3 * sk_h + d3 * sk_d
        v_dst = value_cache_ptr + blk * sv_blk + row * sv_row + h3 * sv_h + d3 * sv_d
        tl.store(k_dst, k, mask=store_mask)
        tl.store(v_dst, v, mask=store_mask)


def _launch_config(t: int, h: int, d: int) -> dict[str, int]:
    """Return a tile of about 4096 elements: all of D, up to 8 heads, tokens for the rest."""
    block_d = triton.next_power_of_2(d)
    block_h = min(triton.next_power_of_2(h), max(1, 4096 // block_d), 8)
    block_t = max(1, min(triton.next_power_of_2(t), 4096 // (block_d * block_h), 16))
    return {"block_t": block_t, "block_h": block_h, "num_warps": 4}


def reshape_and_cache_token_tile_2d(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    block_t: int | None = None,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write key/value rows into the paged caches at slot_mapping, in place.

    Args:
        key: (T, H, D) bf16/fp16/fp32, any strides.
        value: (T, H, D) same dtype as ``key``, any strides.
        key_cache: (num_blocks, block_size, H, D) same dtype, any strides; written in place.
        value_cache: same shape and dtype as ``key_cache``, any strides; written in place.
        slot_mapping: (T,) int32/int64 slot per token (block * block_size + row); < 0 = skip.
        block_t: Tokens per tile (power of two); None fills about 4096 elements per tile.
        block_h: Heads per tile (power of two); None = up to 8.
        num_warps: Warps per program; None = 4.

    Returns:
        (key_cache, value_cache): the same tensors that were passed in, now updated.

    Raises:
        ValueError: The shapes or dtypes do not fit, D > 1024, or a tile size is not a power of 2.
    """
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
            f"caches must be (blocks, block_size, {h}, {d}); got {tuple(key_cache.shape)}, "
            f"{tuple(value_cache.shape)}"
        )
    if slot_mapping.shape != (t,) or slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"slot_mapping must be int32/int64 ({t},); got {tuple(slot_mapping.shape)} "
            f"{slot_mapping.dtype}"
        )
    if not (key.dtype == value.dtype == key_cache.dtype == value_cache.dtype):
        raise ValueError(f"dtypes differ: {key.dtype}, {value.dtype}, {key_cache.dtype}")
    if d > 1024:
        raise ValueError(f"head_dim {d} > 1024 does not fit one tile row")
    cfg = _launch_config(t, h, d)
    given = {"block_t": block_t, "block_h": block_h, "num_warps": num_warps}
    cfg.update({name: val for name, val in given.items() if val is not None})
    for name in ("block_t", "block_h"):
        if cfg[name] < 1 or cfg[name] & (cfg[name] - 1):
            raise ValueError(f"{name} must be a power of two; got {cfg[name]}")
    if t == 0:
        return key_cache, value_cache
    slots = slot_mapping.contiguous()
    grid = (triton.cdiv(t, cfg["block_t"]), triton.cdiv(h, cfg["block_h"]))
    _reshape_and_cache_token_tile_2d_kernel[grid](
        key, value, key_cache, value_cache, slots,
        t, h, d, key_cache.shape[1],
        *key.stride(), *value.stride(), *key_cache.stride(), *value_cache.stride(),
        BLOCK_T=cfg["block_t"], BLOCK_H=cfg["block_h"], BLOCK_D=triton.next_power_of_2(d),
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
    bs = key_cache.shape[1]
    key_cache[slots // bs, slots % bs] = key[keep]
    value_cache[slots // bs, slots % bs] = value[keep]
    return key_cache, value_cache


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return the five tensors for ``shape = {"tokens", "heads", "head_dim"}``.

    Slots are distinct random slots of caches one block larger than needed; tokens 2, 7, 12, ...
    are padding (-1), and so is the last quarter of the batch (a padded tail; token 0 is always
    written); the caches start random so that skipped slots show.
    """
    t, h, d, bs = shape["tokens"], shape["heads"], shape["head_dim"], shape.get("block_size", 16)
    num_blocks = triton.cdiv(t, bs) + 1
    key = torch.randn(t, h, d, device=device).to(dtype)
    value = torch.randn(t, h, d, device=device).to(dtype)
    key_cache = torch.randn(num_blocks, bs, h, d, device=device).to(dtype)
    value_cache = torch.randn(num_blocks, bs, h, d, device=device).to(dtype)
    slot_mapping = torch.randperm(num_blocks * bs, device=device)[:t]
    slot_mapping[2::5] = -1
    slot_mapping[t - t // 4 :] = -1
    return {"key": key, "value": value, "key_cache": key_cache, "value_cache": value_cache,
            "slot_mapping": slot_mapping}  # fmt: skip
