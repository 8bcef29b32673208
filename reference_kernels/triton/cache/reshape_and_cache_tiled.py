"""
---
id: reshape_and_cache_tiled
title: Paged KV-cache write over 2D (token, H*D) tiles with contiguous vectorised row copies
op_family: cache
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-tile, scatter, slot-mapping, in-place, vectorized-copy, contiguity-hints]
status: reference
launcher: reshape_and_cache_tiled
tuning:
  block_t: [8, 1, 2, 4, 16, 32]
  block_c: [512, 128, 256, 1024, 2048]
  num_warps: [4, 1, 2, 8]
args:
  key: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], layout: any, flattened: true, aliases: [k]}
  value: {shape: [T, H, D], like: key, layout: any, flattened: true, aliases: [v]}
  key_cache: {shape: [NB, BS, H, D], like: key, layout: contiguous, aliases: [k_cache]}
  value_cache: {shape: [NB, BS, H, D], like: key, layout: contiguous, aliases: [v_cache]}
  slot_mapping: {shape: [T], dtypes: [int32, int64], aliases: [slots, slot_ids]}
returns:
  - {name: key_cache, alias: key_cache}
  - {name: value_cache, alias: value_cache}
problem:
  shapes: [{tokens: 1, heads: 4, head_dim: 128}, {tokens: 33, heads: 3, head_dim: 40}]
  dtypes: [fp32, bf16]
  in_place: [key_cache, value_cache]
measured:
  - {device: NVIDIA H200, shape: reshape_and_cache/0, dtype: bf16, latency_us: 3.456, sol_fraction: 0.8796, date: '2026-12-03'}
---
The paged KV-cache write (token t's K and V go to slot slot_mapping[t] of (num_blocks, block_size,
H, D) caches; negative slots are skipped) viewed as a gather-free 2D copy: each token's H * D values
are one contiguous run on both sides, so the grid tiles (tokens, H * D) with (BLOCK_T, BLOCK_C)
programs. Column offsets carry multiple_of / max_contiguous hints so the loads and stores become
16-byte vector accesses; several tokens per program keep enough bytes in flight for prefill, and the
column axis splits one decode token across many programs. The caches are updated IN PLACE (the
operator's definition); the launcher returns them. Bytes: 2 * H * D elements read and written per
token. Limits: needs (H, D) contiguous in the caches (raises otherwise; key/value are copied if
not); duplicate slots race (last writer wins).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _reshape_and_cache_tiled_kernel(
    # pointers
    key_ptr,
    value_ptr,
    key_cache_ptr,
    value_cache_ptr,
    slot_ptr,
    # sizes
    T,
    HD,
    # strides (elements): a token's H * D values are contiguous on every side
    stride_kt,
    stride_vt,
    stride_kc_slot,
    stride_vc_slot,
    # meta
    BLOCK_T: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    pid_t = tl.program_id(0)
    pid_c = tl.program_id(1)
    tokens = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    # hints: BLOCK_C consecutive columns from a multiple of BLOCK_C -> 16-byte vector accesses
    cols = tl.max_contiguous(
        tl.multiple_of(pid_c * BLOCK_C + tl.arange(0, BLOCK_C), BLOCK_C), BLOCK_C
    )
    token_mask = tokens < T

    # one slot per token row of the tile; padding tokens (< 0) are masked out of the store
    slots = tl.load(slot_ptr + tokens, mask=token_mask, other=-1).to(tl.int64)
    load_mask = token_mask[:, None] & (cols < HD)[None, :]
    store_mask = load_mask & (slots >= 0)[:, None]

    # the flattened cache (num_blocks * block_size, H * D) is addressed by slot directly, int64
    tokens64 = tokens.to(tl.int64)[:, None]
    k = tl.load(key_ptr + tokens64 * stride_kt + cols[None, :], mask=load_mask)
    v = tl.load(value_ptr + tokens64 * stride_vt + cols[None, :], mask=load_mask)
    tl.store(key_cache_ptr + slots[:, None] * stride_kc_slot + cols[None, :], k, mask=store_mask)
    tl.store(value_cache_ptr + slots[:, None] * stride_vc_slot + cols[None, :], v, mask=store_mask)


def _launch_config(t: int, hd: int) -> dict[str, int]:
    """Return the tile: up to 1024 columns, tokens to reach about 4096 elements, and warps."""
    block_c = min(triton.next_power_of_2(hd), 1024)
    block_t = max(1, min(triton.next_power_of_2(t), 4096 // block_c))
    return {"block_t": block_t, "block_c": block_c, "num_warps": 4}


def _rows(t: torch.Tensor) -> torch.Tensor:
    """Return a (T, H, D) tensor whose (H, D) part is contiguous (copying only if needed)."""
    if t.stride(2) == 1 and t.stride(1) == t.shape[2]:
        return t
    return t.contiguous()


def reshape_and_cache_tiled(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    block_t: int | None = None,
    block_c: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write key/value rows into the paged caches at slot_mapping, in place.

    Args:
        key: (T, H, D) bf16/fp16/fp32; any token stride (copied if (H, D) is not contiguous).
        value: (T, H, D) same dtype as ``key``.
        key_cache: (num_blocks, block_size, H, D) same dtype, (block_size, H, D) contiguous;
            written in place.
        value_cache: same shape, dtype and layout as ``key_cache``; written in place.
        slot_mapping: (T,) int32/int64 slot per token (block * block_size + offset); < 0 = skip.
        block_t: Tokens per tile (power of two); None fills about 4096 elements per tile.
        block_c: Columns of H * D per tile (power of two); None = min(next_pow2(H * D), 1024).
        num_warps: Warps per program; None = 4.

    Returns:
        (key_cache, value_cache): the same tensors that were passed in, now updated.

    Raises:
        ValueError: The shapes, dtypes or cache layout do not fit.
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
        raise ValueError(f"caches must be (blocks, bs, {h}, {d}); got {tuple(key_cache.shape)}")
    for cache in (key_cache, value_cache):
        if cache.stride(3) != 1 or cache.stride(2) != d or cache.stride(1) != h * d:
            raise ValueError(
                f"cache (block_size, H, D) must be contiguous; strides {cache.stride()}"
            )
    if slot_mapping.shape != (t,) or slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"slot_mapping must be int32/int64 ({t},); got {tuple(slot_mapping.shape)}"
        )
    if not (key.dtype == value.dtype == key_cache.dtype == value_cache.dtype):
        raise ValueError(f"dtypes differ: {key.dtype}, {value.dtype}, {key_cache.dtype}")
    if t == 0:
        return key_cache, value_cache
    key, value = _rows(key), _rows(value)
    cfg = _launch_config(t, h * d)
    given = {"block_t": block_t, "block_c": block_c, "num_warps": num_warps}
    cfg.update({k: v for k, v in given.items() if v is not None})
    grid = (triton.cdiv(t, cfg["block_t"]), triton.cdiv(h * d, cfg["block_c"]))
    _reshape_and_cache_tiled_kernel[grid](
        key, value, key_cache, value_cache, slot_mapping,
        t, h * d,
        key.stride(0), value.stride(0), key_cache.stride(1), value_cache.stride(1),
        BLOCK_T=cfg["block_t"], BLOCK_C=cfg["block_c"],
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
    key_cache.view(-1, *key_cache.shape[2:])[slots] = key[keep]
    value_cache.view(-1, *value_cache.shape[2:])[slots] = value[keep]
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
