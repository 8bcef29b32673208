"""
---
id: reshape_and_cache_flash_layout
title: Paged KV-cache write to the flash (blocks, block_size, H, D) layout, persistent token loop
op_family: cache
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [persistent-grid, grid-stride-loop, scatter, slot-mapping, in-place, flattened-row-copy]
status: reference
launcher: reshape_and_cache_flash_layout
tuning:
  num_programs: [512, 64, 2048]
  block_c: [1024, 256, 4096]
  num_warps: [4, 2, 8]
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
  shapes: [{tokens: 1, heads: 4, head_dim: 128}, {tokens: 21, heads: 3, head_dim: 40, block_size: 8}]
  dtypes: [fp32, bf16]
  in_place: [key_cache, value_cache]
measured:
  - {device: NVIDIA H200, shape: reshape_and_cache/0, dtype: bf16, latency_us: 4.128, sol_fraction: 0.6977, date: '2026-12-03'}
---
The paged KV-cache write in vLLM's "flash" layout: caches (num_blocks, block_size, H, D) with (H, D)
contiguous, so one slot (block s // block_size, row s % block_size, s = slot_mapping[t]) is one
contiguous run of H * D elements at s * H * D; negative slots (padding) are skipped; the caches are
updated IN PLACE. The grid is persistent: min(T, NUM_PROGRAMS) programs, program p copying tokens
p, p + P, p + 2P, ... (a grid-stride loop), each token as BLOCK_C-wide chunks of its flattened row
(key/value rows are addressed through (h, d) = divmod(c, D) and full strides, so fused-qkv slices
work). A long prefill thus costs one launch of a few hundred programs instead of T programs, and
each program streams many rows back to back. Bytes: 2 * H * D elements read and written per token;
the slot is read once per token. When it wins: prefill writes of thousands of tokens; for decode
(T small) it degenerates to one program per token. Limits: the caches' (H, D) must be contiguous
(raises otherwise); duplicate slots race (last writer wins, unspecified).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _reshape_and_cache_flash_layout_kernel(
    # pointers
    key_ptr,
    value_ptr,
    key_cache_ptr,
    value_cache_ptr,
    slot_ptr,
    # sizes
    T,
    D,
    ROW,  # H * D elements per slot in the cache
    # strides (elements) of key/value (T, H, D)
    stride_kt,
    stride_kh,
    stride_kd,
    stride_vt,
    stride_vh,
    stride_vd,
    # meta
    BLOCK_C: tl.constexpr,
):
    offs_c = tl.arange(0, BLOCK_C)
    pid = tl.program_id(0).to(tl.int64)  # int64: token * stride and slot * ROW can pass 2^31
    step = tl.num_programs(0)
    for i in range(0, (T - pid + step - 1) // step):  # tokens pid, pid + P, pid + 2P, ...
        tok = pid + i * step
        slot = tl.load(slot_ptr + tok).to(tl.int64)
        if slot >= 0:
            for c_start in range(0, ROW, BLOCK_C):
                cols = c_start + offs_c
                mask = cols < ROW
                head = cols // D
                dim = cols % D
                k = tl.load(
                    key_ptr + tok * stride_kt + head * stride_kh + dim * stride_kd, mask=mask
                )
                v = tl.load(
                    value_ptr + tok * stride_vt + head * stride_vh + dim * stride_vd, mask=mask
                )
                # the cache slot is one contiguous run: plain vector stores
                tl.store(key_cache_ptr + slot * ROW + cols, k, mask=mask)
                tl.store(value_cache_ptr + slot * ROW + cols, v, mask=mask)


def _check_shapes(key, value, key_cache, value_cache, slot_mapping) -> None:
    """Raise ValueError unless the tensors fit the (T, H, D) -> flash-layout caches contract."""
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
    if not (key_cache.is_contiguous() and value_cache.is_contiguous()):
        raise ValueError("key_cache and value_cache must be contiguous (the flash layout)")


def reshape_and_cache_flash_layout(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    num_programs: int | None = None,
    block_c: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write key/value rows into contiguous flash-layout caches at slot_mapping, in place.

    Args:
        key: (T, H, D) bf16/fp16/fp32, any strides.
        value: (T, H, D) same dtype as ``key``, any strides.
        key_cache: (num_blocks, block_size, H, D) contiguous, same dtype; written in place.
        value_cache: same shape and dtype as ``key_cache``, contiguous; written in place.
        slot_mapping: (T,) int32/int64 slot per token (block * block_size + offset); < 0 = skip.
        num_programs: Persistent programs (the grid is min(T, num_programs)); None = 512.
        block_c: Row elements per chunk (power of two); None = min(next_pow2(H * D), 1024).
        num_warps: Warps per program; None = 4.

    Returns:
        (key_cache, value_cache): the same tensors that were passed in, now updated.

    Raises:
        ValueError: The shapes or dtypes do not fit, or a cache is not contiguous.
    """
    _check_shapes(key, value, key_cache, value_cache, slot_mapping)
    t, h, d = key.shape
    if t == 0:
        return key_cache, value_cache
    programs = min(t, num_programs or 512)
    _reshape_and_cache_flash_layout_kernel[(programs,)](
        key, value, key_cache, value_cache, slot_mapping,
        t, d, h * d,
        *key.stride(), *value.stride(),
        BLOCK_C=block_c or min(triton.next_power_of_2(h * d), 1024),
        num_warps=num_warps or 4,
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
