"""
---
id: reshape_and_cache_fp8
title: Paged KV-cache write with per-tensor-scaled FP8 (e4m3fn) quantisation, one token per program
op_family: cache
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [row-per-program, scatter, slot-mapping, in-place, fp8-e4m3, static-scale, fused-kv]
status: reference
launcher: reshape_and_cache_fp8
tuning:
  num_warps: [4, 1, 2, 8]
args:
  key: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], layout: any, flattened: true, aliases: [k]}
  value: {shape: [T, H, D], like: key, layout: any, flattened: true, aliases: [v]}
  key_cache: {shape: [NB, BS, H, D], dtypes: [fp8_e4m3fn], layout: any, aliases: [k_cache]}
  value_cache: {shape: [NB, BS, H, D], dtypes: [fp8_e4m3fn], layout: any, aliases: [v_cache]}
  slot_mapping: {shape: [T], dtypes: [int32, int64], aliases: [slots, slot_ids]}
  k_scale: {shape: [1], dtypes: [fp32], aliases: [key_scale]}
  v_scale: {shape: [1], dtypes: [fp32], aliases: [value_scale]}
returns:
  - {name: key_cache, alias: key_cache}
  - {name: value_cache, alias: value_cache}
problem:
  shapes: [{tokens: 9, heads: 3, head_dim: 40, block_size: 4}, {tokens: 1, heads: 2, head_dim: 64, block_size: 16}]
  dtypes: [fp32, bf16]
  in_place: [key_cache, value_cache]
measured: []
---
The KV-cache write of an FP8 KV cache (vLLM's kv_cache_dtype "fp8" with per-tensor scales): token
t's key and value (H, D) go to slot s = slot_mapping[t] (block s // block_size, offset s %
block_size) of (num_blocks, block_size, H, D) float8_e4m3fn caches as fp8(clamp(x / k_scale, -448,
448)) (v_scale for the value); negative slots (padding tokens) are skipped; the caches are updated
IN PLACE. One program per token loads its whole (H, D) key and value as two (next_pow2(H),
next_pow2(D)) register tiles, divides by the two scales (read once per program from 1-element device
tensors, so a calibrated scale never costs a host sync or a recompile), saturates to the e4m3 range
and stores both rows through full strides: a single launch quantises and scatters K and V together.
Bytes per element: 2 read (bf16) and 1 written, i.e. the cache traffic is half that of a bf16 cache.
Limits: H * D up to ~16K per token (the whole token sits in registers; beyond that split the heads);
e4m3fn only (no e5m2, no per-head or per-token scales); duplicate slots race (last writer wins).
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn


@triton.jit
def _reshape_and_cache_fp8_kernel(
    # pointers
    k_ptr,
    v_ptr,
    kc_ptr,
    vc_ptr,
    slot_ptr,
    k_scale_ptr,
    v_scale_ptr,
    # sizes
    H,
    D,
    BLOCK_SIZE,
    # strides (elements)
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
    # scalars
    fp8_max,
    # meta
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot >= 0:  # a negative slot is a padding token
        blk, off = slot // BLOCK_SIZE, slot % BLOCK_SIZE
        heads = tl.arange(0, BLOCK_H)[:, None]
        dims = tl.arange(0, BLOCK_D)[None, :]
        mask = (heads < H) & (dims < D)
        inv_k = 1.0 / tl.load(k_scale_ptr).to(tl.float32)
        inv_v = 1.0 / tl.load(v_scale_ptr).to(tl.float32)

        k = tl.load(k_ptr + token * stride_kt + heads * stride_kh + dims * stride_kd, mask=mask)
        kq = tl.clamp(k.to(tl.float32) * inv_k, -fp8_max, fp8_max)
        kc = kc_ptr + blk * stride_kcb + off * stride_kcs + heads * stride_kch + dims * stride_kcd
        tl.store(kc, kq.to(kc_ptr.dtype.element_ty), mask=mask)

        v = tl.load(v_ptr + token * stride_vt + heads * stride_vh + dims * stride_vd, mask=mask)
        vq = tl.clamp(v.to(tl.float32) * inv_v, -fp8_max, fp8_max)
        vc = vc_ptr + blk * stride_vcb + off * stride_vcs + heads * stride_vch + dims * stride_vcd
        tl.store(vc, vq.to(vc_ptr.dtype.element_ty), mask=mask)


def reshape_and_cache_fp8(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each token's key/value to fp8 by per-tensor scales and write them at its slot.

    Args:
        key: (T, H, D) bf16/fp16/fp32, any strides.
        value: (T, H, D) like key.
        key_cache: (num_blocks, block_size, H, D) float8_e4m3fn, updated in place.
        value_cache: same shape as key_cache, float8_e4m3fn, updated in place.
        slot_mapping: (T,) int32/int64 slot per token; negative = skip.
        k_scale: (1,) fp32 scale of the key cache (stored value = key / k_scale).
        v_scale: (1,) fp32 scale of the value cache.
        num_warps: Warps per program; None = 4.

    Returns:
        (key_cache, value_cache): the input caches, updated.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if key.dim() != 3 or tuple(value.shape) != tuple(key.shape):
        raise ValueError(
            f"need key and value (T, H, D) of one shape; got {tuple(key.shape)}, "
            f"{tuple(value.shape)}"
        )
    t, h, d = key.shape
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        if cache.dim() != 4 or tuple(cache.shape[2:]) != (h, d):
            raise ValueError(f"{name} must be (num_blocks, block_size, {h}, {d}); got "
                             f"{tuple(cache.shape)}")  # fmt: skip
        if cache.dtype != torch.float8_e4m3fn:
            raise ValueError(f"{name} must be float8_e4m3fn; got {cache.dtype}")
    if tuple(slot_mapping.shape) != (t,):
        raise ValueError(f"slot_mapping must be ({t},); got {tuple(slot_mapping.shape)}")
    if k_scale.numel() != 1 or v_scale.numel() != 1:
        raise ValueError("k_scale and v_scale must be 1-element tensors")
    if t == 0:
        return key_cache, value_cache
    _reshape_and_cache_fp8_kernel[(t,)](
        key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale,
        h, d, key_cache.shape[1],
        *key.stride(), *value.stride(), *key_cache.stride(), *value_cache.stride(),
        FP8_MAX,
        BLOCK_H=triton.next_power_of_2(h), BLOCK_D=triton.next_power_of_2(d),
        num_warps=num_warps or 4,
    )  # fmt: skip
    return key_cache, value_cache


def reference(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the caches after the same fp8 write, done with PyTorch indexing (in place)."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    h, d = key.shape[1], key.shape[2]
    kq = (key[keep].float() * (1.0 / k_scale.float())).clamp(-FP8_MAX, FP8_MAX)
    vq = (value[keep].float() * (1.0 / v_scale.float())).clamp(-FP8_MAX, FP8_MAX)
    key_cache.view(-1, h, d)[slots] = kq.to(key_cache.dtype)
    value_cache.view(-1, h, d)[slots] = vq.to(value_cache.dtype)
    return key_cache, value_cache


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "heads", "head_dim", "block_size"}``.

    key/value ~ N(0, 1); zeroed caches with one spare block; slots a random permutation of the
    cache's slots with every fifth token from the third on marked as padding (-1), so that even a
    single token is written; scales 0.006 (the largest keys saturate at 448) and 0.05 (values
    spread over the e4m3 range).
    """
    t, h, d, bs = shape["tokens"], shape["heads"], shape["head_dim"], shape["block_size"]
    blocks = -(-t // bs) + 1
    slots = torch.randperm(blocks * bs, device=device)[:t]
    slots[2::5] = -1
    cache = torch.zeros(blocks, bs, h, d, device=device).to(torch.float8_e4m3fn)
    return {
        "key": torch.randn(t, h, d, device=device).to(dtype),
        "value": torch.randn(t, h, d, device=device).to(dtype),
        "key_cache": cache,
        "value_cache": cache.clone(),
        "slot_mapping": slots,
        "k_scale": torch.tensor([0.006], device=device),
        "v_scale": torch.tensor([0.05], device=device),
    }
