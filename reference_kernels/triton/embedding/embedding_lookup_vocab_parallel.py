"""
---
id: embedding_lookup_vocab_parallel
title: Vocab-sharded embedding lookup, (tokens x hidden) tiles, zero rows for ids outside the shard
op_family: embedding
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [tiled-rows, gather, masked-loads, fused-shard-mask, tensor-parallel]
status: reference
launcher: embedding_lookup_vocab_parallel
tuning:
  block_t: [4, 1, 2, 8, 16]
  block_h: [512, 128, 256, 1024, 2048]
  num_warps: [4, 1, 2, 8]
args:
  ids: {shape: [T], dtypes: [int32, int64], aliases: [input_ids, input, token_ids]}
  weight: {shape: [VS, H], dtypes: [bf16, fp16, fp32], aliases: [embedding, shard, table]}
  vocab_start_index: {type: int, default: 0, aliases: [vocab_start, start]}
  vocab_end_index: {type: int, aliases: [vocab_end, end]}
returns:
  - {name: out, shape: [T, H], dtype: weight}
problem:
  shapes: [{tokens: 7, vocab: 100, hidden: 300}, {tokens: 33, vocab: 50, hidden: 64, shards: 3, rank: 2}]
  dtypes: [fp32, bf16]
measured: []
---
The per-rank step of a tensor-parallel (vocab-sharded) embedding: this rank holds table rows
[vocab_start_index, vocab_end_index) as weight[0 : end - start]; a token whose id falls in that
range gets its row, every other token gets zeros, and an all-reduce across ranks (not part of this
kernel) then sums the partial outputs into the full lookup. The shard test, the id shift and the
zero fill are fused into the gather: each program owns a (BLOCK_T tokens x BLOCK_H hidden) tile,
loads BLOCK_T ids, and issues the row loads with the mask "id in shard", so out-of-shard tokens
read nothing and store zeros (no separate mask tensor, no masked_fill pass). Stacking tokens per
program keeps several rows' loads in flight for short hidden sizes, and the grid over hidden
blocks spreads few tokens over many SMs (decode). Bytes: one read per in-shard element, one write
per output element (2 + 2 B in bf16), 4-8 B per id per hidden block. Limits: rows of the shard past
end - start (padding) are never read; ids are not otherwise checked; row offsets are int64.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _embedding_lookup_vocab_parallel_kernel(
    # pointers
    ids_ptr,
    w_ptr,
    out_ptr,
    # sizes
    T,
    H,
    vocab_start,
    vocab_end,
    # strides (elements; the last dim is contiguous)
    stride_wv,
    stride_ot,
    # meta
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_t = offs_t < T
    mask_h = offs_h < H

    ids = tl.load(ids_ptr + offs_t, mask=mask_t, other=0).to(tl.int64)
    in_shard = mask_t & (ids >= vocab_start) & (ids < vocab_end)
    local = tl.where(in_shard, ids - vocab_start, 0)  # int64: local * stride can pass 2^31
    # out-of-shard tokens issue no loads and get the other=0 zeros
    rows = tl.load(
        w_ptr + local[:, None] * stride_wv + offs_h[None, :],
        mask=in_shard[:, None] & mask_h[None, :],
        other=0.0,
    )
    out_ptrs = out_ptr + offs_t[:, None].to(tl.int64) * stride_ot + offs_h[None, :]
    tl.store(out_ptrs, rows, mask=mask_t[:, None] & mask_h[None, :])


def _launch_config(t: int, h: int) -> dict[str, int]:
    """Return the tile: up to 1024 hidden columns, tokens stacked to about 4K elements."""
    block_h = min(1024, triton.next_power_of_2(h))
    block_t = max(1, min(16, 4096 // block_h, triton.next_power_of_2(t)))
    return {"block_t": block_t, "block_h": block_h, "num_warps": 4}


def embedding_lookup_vocab_parallel(
    ids: torch.Tensor,
    weight: torch.Tensor,
    vocab_start_index: int = 0,
    vocab_end_index: int | None = None,
    *,
    block_t: int | None = None,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return this shard's partial lookup: weight[id - start] for ids in [start, end), else 0.

    Args:
        ids: int32/int64 global token ids of any shape.
        weight: (VS, H) bf16/fp16/fp32 shard, rows for ids start .. end - 1 first.
        vocab_start_index: First global id this shard holds.
        vocab_end_index: One past the last; None = vocab_start_index + VS.
        block_t: Tokens per program (power of two); None picks by H.
        block_h: Hidden columns per program (power of two); None = min(next_pow2(H), 1024).
        num_warps: Warps per program; None = 4.

    Returns:
        out: ids.shape + (H,) in weight's dtype, contiguous.

    Raises:
        ValueError: Wrong dtypes or rank, or a shard range the table cannot hold.
    """
    if ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"ids must be int32/int64; got {ids.dtype}")
    if weight.dim() != 2 or weight.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(
            f"weight must be (VS, H) bf16/fp16/fp32; got {tuple(weight.shape)} {weight.dtype}"
        )
    end = vocab_start_index + weight.shape[0] if vocab_end_index is None else vocab_end_index
    if not 0 <= vocab_start_index <= end or end - vocab_start_index > weight.shape[0]:
        raise ValueError(
            f"shard range [vocab_start_index={vocab_start_index}, vocab_end_index={end}) must "
            f"be non-negative, ordered and at most the {weight.shape[0]} rows of weight"
        )
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    flat = ids.reshape(-1).contiguous()
    t, h = flat.numel(), w.shape[1]
    out = torch.empty((t, h), dtype=w.dtype, device=w.device)
    if out.numel() == 0:
        return out.reshape(*ids.shape, h)
    cfg = _launch_config(t, h)
    given = {"block_t": block_t, "block_h": block_h, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(t, cfg["block_t"]), triton.cdiv(h, cfg["block_h"]))
    _embedding_lookup_vocab_parallel_kernel[grid](
        flat, w, out,
        t, h, vocab_start_index, end,
        w.stride(0), out.stride(0),
        BLOCK_T=cfg["block_t"], BLOCK_H=cfg["block_h"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out.reshape(*ids.shape, h)


def reference(
    ids: torch.Tensor,
    weight: torch.Tensor,
    vocab_start_index: int = 0,
    vocab_end_index: int | None = None,
) -> torch.Tensor:
    """Return the shard's lookup with zeros for out-of-shard ids (masked_fill, as vLLM does)."""
    end = vocab_start_index + weight.shape[0] if vocab_end_index is None else vocab_end_index
    outside = (ids < vocab_start_index) | (ids >= end)
    local = torch.where(outside, 0, ids - vocab_start_index)
    return torch.nn.functional.embedding(local, weight).masked_fill(outside[..., None], 0.0)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "vocab", "hidden", "shards", "rank"}``.

    Global ids are uniform over the full vocab; the shard is rank's contiguous slice of a
    ceil(vocab / shards)-row partition, its table N(0, 1) * 0.02.
    """
    vocab, shards, rank = shape["vocab"], shape.get("shards", 2), shape.get("rank", 0)
    per = -(-vocab // shards)
    start, end = rank * per, min(vocab, (rank + 1) * per)
    ids = torch.randint(0, vocab, (shape["tokens"],), device=device)
    weight = (torch.randn(per, shape["hidden"], device=device) * 0.02).to(dtype)
    return {"ids": ids, "weight": weight, "vocab_start_index": start, "vocab_end_index": end}
