"""
---
id: arange_positions_varlen
title: Position of every token within its sequence from cu_seqlens, one program per sequence
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int32, int64]
bound: memory
techniques: [segment-per-program, varlen, cu-seqlens, arange-fill, chunked-loop]
status: reference
launcher: arange_positions_varlen
tuning:
  block: [256, 64, 128, 512, 1024]
  num_warps: [4, 1, 2, 8]
args:
  cu_seqlens: {shape: [B + 1], dtypes: [int32, int64], aliases: [cu_seqlens_q, query_start_loc]}
  context_lens:
    {shape: [B], dtypes: [int32, int64], optional: true, aliases: [num_computed_tokens]}
returns:
  - {name: positions, shape: ['?'], dtype: int64}
problem:
  shapes: [{seqlens: [5, 0, 300, 33]}, {seqlens: [1], context: true}]
  dtypes: [int64, int32]
measured: []
---
Positions for RoPE and causal masks in a packed (varlen) batch: for every token t of sequence b,
with cu_seqlens[b] <= t < cu_seqlens[b + 1], positions[t] = t - cu_seqlens[b] + context_lens[b]
(context_lens = tokens already in the KV cache under chunked prefill or decode; 0 when omitted).
One program per sequence reads its two boundaries and its offset once and fills its range with an
arange in BLOCK-wide chunks: no search for the owning sequence (a token-parallel design needs a
binary search over cu_seqlens per token) and no scan. Bytes: 8 written per token, 8-16 read per
sequence. Limits: one program per sequence, so one very long prompt is filled by a single program
(still only 8 bytes per token of stores); cu_seqlens must be non-decreasing and start at 0 (checked
on the host, which syncs); the output is int64 whatever the input dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _arange_positions_kernel(
    # pointers
    cu_ptr,
    ctx_ptr,
    pos_ptr,
    # meta
    HAS_CONTEXT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    b = tl.program_id(0)
    start = tl.load(cu_ptr + b).to(tl.int64)
    end = tl.load(cu_ptr + b + 1).to(tl.int64)
    offset = tl.load(ctx_ptr + b).to(tl.int64) if HAS_CONTEXT else 0
    offs = tl.arange(0, BLOCK)
    for base in range(start, end, BLOCK):
        tokens = base + offs
        tl.store(pos_ptr + tokens, tokens - start + offset, mask=tokens < end)


def arange_positions_varlen(
    cu_seqlens: torch.Tensor,
    context_lens: torch.Tensor | None = None,
    *,
    block: int = 256,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return each packed token's position within its sequence (plus its context length).

    Args:
        cu_seqlens: (B + 1,) int32/int64, non-decreasing, cu_seqlens[0] == 0.
        context_lens: Optional (B,) int32/int64 offsets added to each sequence's positions.
        block: Tokens per loop step (a power of two).
        num_warps: Warps per program; None = 4.

    Returns:
        positions: (cu_seqlens[-1],) int64.

    Raises:
        ValueError: Bad dtypes or shapes, cu_seqlens not starting at 0 or decreasing, a bad block.
    """
    if (
        cu_seqlens.dim() != 1
        or cu_seqlens.numel() < 1
        or cu_seqlens.dtype
        not in (
            torch.int32,
            torch.int64,
        )
    ):
        raise ValueError(f"cu_seqlens must be 1-D int32/int64 with B + 1 >= 1 entries; got "
                         f"{tuple(cu_seqlens.shape)} {cu_seqlens.dtype}")  # fmt: skip
    b = cu_seqlens.numel() - 1
    if int(cu_seqlens[0]) != 0 or (b > 0 and bool((cu_seqlens[1:] < cu_seqlens[:-1]).any())):
        raise ValueError("cu_seqlens must start at 0 and be non-decreasing")
    if context_lens is not None and (
        context_lens.shape != (b,) or context_lens.dtype not in (torch.int32, torch.int64)
    ):
        raise ValueError(f"context_lens must be ({b},) int32/int64; got "
                         f"{tuple(context_lens.shape)} {context_lens.dtype}")  # fmt: skip
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two; got {block}")
    total = int(cu_seqlens[-1])
    positions = torch.empty((total,), dtype=torch.int64, device=cu_seqlens.device)
    if total == 0:
        return positions
    cu = cu_seqlens.contiguous()
    ctx = cu if context_lens is None else context_lens.contiguous()  # unused when absent
    _arange_positions_kernel[(b,)](
        cu, ctx, positions,
        HAS_CONTEXT=context_lens is not None, BLOCK=block, num_warps=num_warps or 4,
    )  # fmt: skip
    return positions


def reference(cu_seqlens: torch.Tensor, context_lens: torch.Tensor | None = None) -> torch.Tensor:
    """Return the positions by repeat_interleave of the sequence starts."""
    cu = cu_seqlens.long()
    lengths = cu[1:] - cu[:-1]
    starts = torch.repeat_interleave(cu[:-1], lengths)
    pos = torch.arange(int(cu[-1]), device=cu.device) - starts
    if context_lens is not None:
        pos = pos + torch.repeat_interleave(context_lens.long(), lengths)
    return pos


def make_inputs(shape: dict, dtype: torch.dtype = torch.int32, device: str = "cpu") -> dict:
    """Return ``{"cu_seqlens", "context_lens"}`` for ``shape = {"seqlens": [...], "context"}``.

    dtype is the index dtype (int32 or int64); float dtypes fall back to int32.
    """
    idx = dtype if dtype in (torch.int32, torch.int64) else torch.int32
    lens = torch.tensor(shape["seqlens"], dtype=torch.int64)
    cu = torch.zeros(len(lens) + 1, dtype=torch.int64)
    cu[1:] = torch.cumsum(lens, 0)
    ctx = torch.randint(0, 50, (len(lens),)) if shape.get("context", False) else None
    return {
        "cu_seqlens": cu.to(idx).to(device),
        "context_lens": None if ctx is None else ctx.to(idx).to(device),
    }
