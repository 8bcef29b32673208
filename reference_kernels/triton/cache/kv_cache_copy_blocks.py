"""
---
id: kv_cache_copy_blocks
title: Copy whole KV-cache blocks by a (src, dst) pair list, K and V in one launch (copy_blocks)
op_family: cache
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [block-copy, pair-list, in-place, 2d-grid, flattened-row-copy, fused-k-v]
status: reference
launcher: kv_cache_copy_blocks
tuning:
  block: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  key_cache:
    {shape: [NB, BS, H, D], dtypes: [bf16, fp16, fp32], layout: contiguous, aliases: [k_cache]}
  value_cache: {shape: [NB, BS, H, D], like: key_cache, layout: contiguous, aliases: [v_cache]}
  block_mapping: {shape: [P, 2], dtypes: [int32, int64], aliases: [block_pairs, src_to_dst]}
returns:
  - {name: key_cache, alias: key_cache}
  - {name: value_cache, alias: value_cache}
problem:
  shapes: [{blocks: 9, block_size: 4, heads: 2, head_dim: 16, pairs: 3}]
  dtypes: [fp32]
  in_place: [key_cache, value_cache]
measured: []
---
vLLM's copy_blocks (the copy-on-write step of beam search and prefix forking): for every pair
(src, dst) of block_mapping, block dst of the key cache and of the value cache becomes a copy of
block src, IN PLACE. A cache block is one contiguous run of block_size * H * D elements, so the
copy is flat: program (p, i) reads pair p once and moves elements [i * BLOCK, (i + 1) * BLOCK) of
the block for K and V together (two loads in flight before the stores); the second grid axis
spreads one block over several SMs. Bytes: 2 * block_size * H * D elements read and written per
pair, 8-16 bytes of mapping. When it wins: many small forks per step, all in one launch instead of
a cudaMemcpy per block. Limits: the caches must be contiguous (raises otherwise); a pair whose dst
is another pair's src gives an unspecified result (vLLM's contract: destinations are fresh blocks);
one layer per call. Block ids must lie in [0, num_blocks): the kernel skips a pair that has one
outside (masked, nothing read or written); the launcher never reads the mapping on the host (the
separate check_inputs does, with a sync, and raises).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _kv_cache_copy_blocks_kernel(
    # pointers
    key_cache_ptr,
    value_cache_ptr,
    mapping_ptr,
    # sizes
    block_numel,
    num_blocks,  # a pair with an id outside [0, num_blocks) is skipped
    # strides (elements)
    stride_map,
    # meta
    BLOCK: tl.constexpr,
):
    pair = tl.program_id(0)
    src_id = tl.load(mapping_ptr + pair * stride_map).to(tl.int64)
    dst_id = tl.load(mapping_ptr + pair * stride_map + 1).to(tl.int64)
    ok = (src_id >= 0) & (src_id < num_blocks) & (dst_id >= 0) & (dst_id < num_blocks)
    src = src_id * block_numel
    dst = dst_id * block_numel
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs < block_numel) & ok
    k = tl.load(key_cache_ptr + src + offs, mask=mask)
    v = tl.load(value_cache_ptr + src + offs, mask=mask)
    tl.store(key_cache_ptr + dst + offs, k, mask=mask)
    tl.store(value_cache_ptr + dst + offs, v, mask=mask)


def kv_cache_copy_blocks(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_mapping: torch.Tensor,
    *,
    block: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy block src to block dst of both caches for every (src, dst) row of block_mapping.

    Args:
        key_cache: (num_blocks, block_size, H, D) bf16/fp16/fp32, contiguous; updated in place.
        value_cache: same shape and dtype, contiguous; updated in place.
        block_mapping: (P, 2) int32/int64 (src, dst) block pairs, each in [0, num_blocks).
        block: Elements per program (power of two); None = min(next_pow2(block numel), 1024).
        num_warps: Warps per program; None = 4.

    Returns:
        (key_cache, value_cache): the tensors passed in, updated.

    Raises:
        ValueError: The shapes, dtypes or layout do not fit (a pair with a block id out of range
            is skipped; check_inputs raises for it).
    """
    if key_cache.dim() < 2 or value_cache.shape != key_cache.shape:
        raise ValueError(
            f"caches must be (blocks, ...) of one shape; got {tuple(key_cache.shape)}, "
            f"{tuple(value_cache.shape)}"
        )
    if value_cache.dtype != key_cache.dtype:
        raise ValueError(f"cache dtypes differ: {key_cache.dtype}, {value_cache.dtype}")
    if not (key_cache.is_contiguous() and value_cache.is_contiguous()):
        raise ValueError("caches must be contiguous: a block is copied as one flat run")
    if (
        block_mapping.dim() != 2
        or block_mapping.shape[1] != 2
        or block_mapping.dtype not in (torch.int32, torch.int64)
    ):
        raise ValueError(
            f"block_mapping must be (P, 2) int32/int64; got {tuple(block_mapping.shape)} "
            f"{block_mapping.dtype}"
        )
    num_blocks = key_cache.shape[0]
    if block_mapping.numel() == 0:
        return key_cache, value_cache
    block_numel = key_cache[0].numel()
    cfg = {"block": min(triton.next_power_of_2(block_numel), 1024), "num_warps": 4}
    given = {"block": block, "num_warps": num_warps}
    cfg.update({name: val for name, val in given.items() if val is not None})
    mapping = block_mapping.contiguous()
    grid = (mapping.shape[0], triton.cdiv(block_numel, cfg["block"]))
    _kv_cache_copy_blocks_kernel[grid](
        key_cache, value_cache, mapping,
        block_numel, num_blocks,
        mapping.stride(0),
        BLOCK=cfg["block"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return key_cache, value_cache


def check_inputs(key_cache: torch.Tensor, block_mapping: torch.Tensor) -> None:
    """Raise ValueError if a block id lies outside [0, num_blocks) (reads the mapping: a sync).

    Outside the timed path: the launcher does not read block_mapping on the host; its kernel skips
    the pairs with such ids instead.
    """
    num_blocks = key_cache.shape[0]
    if block_mapping.numel() and (
        int(block_mapping.min()) < 0 or int(block_mapping.max()) >= num_blocks
    ):
        raise ValueError(f"block_mapping ids must lie in [0, {num_blocks})")


def reference(
    key_cache: torch.Tensor, value_cache: torch.Tensor, block_mapping: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Set block dst = block src of both caches for every pair, in place (as the kernel)."""
    src, dst = block_mapping[:, 0].long(), block_mapping[:, 1].long()
    key_cache[dst] = key_cache[src]  # the gather on the right is a copy: no overlap hazard
    value_cache[dst] = value_cache[src]
    return key_cache, value_cache


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``shape = {"blocks", "block_size", "heads", "head_dim", "pairs"}``.

    Sources and destinations are disjoint random blocks (destinations distinct), as vLLM gives them.
    """
    nb, bs, h, d, p = (shape[k] for k in ("blocks", "block_size", "heads", "head_dim", "pairs"))
    perm = torch.randperm(nb, device=device)
    src = perm[torch.randint(0, nb - p, (p,), device=device)]  # may repeat: one block, many forks
    mapping = torch.stack([src, perm[nb - p :]], dim=1)
    return {
        "key_cache": torch.randn(nb, bs, h, d, device=device).to(dtype),
        "value_cache": torch.randn(nb, bs, h, d, device=device).to(dtype),
        "block_mapping": mapping,
    }
