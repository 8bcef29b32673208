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
  num_tokens: {type: int, aliases: [total_tokens, num_actual_tokens]}
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
sequence. The output length num_tokens (= cu_seqlens[-1]) is the caller's host-side count, as in
vLLM's num_actual_tokens, so the launcher never reads cu_seqlens on the host. Limits: one program
per sequence, so one very long prompt is filled by a single program (still only 8 bytes per token
of stores); cu_seqlens must be non-decreasing, start at 0 and end at num_tokens (check_inputs
verifies it with a host sync, outside the launch; the kernel drops tokens past num_tokens); the
output is int64 whatever the input dtype.
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
    # sizes
    num_tokens,  # length of pos: tokens past it are never written
    # meta
    HAS_CONTEXT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    b = tl.program_id(0)
    start = tl.load(cu_ptr + b).to(tl.int64)
    end = tl.minimum(tl.load(cu_ptr + b + 1).to(tl.int64), num_tokens)
    offset = tl.load(ctx_ptr + b).to(tl.int64) if HAS_CONTEXT else 0
    offs = tl.arange(0, BLOCK)
    for base in range(start, end, BLOCK):
        tokens = base + offs
        tl.store(pos_ptr + tokens, tokens - start + offset, mask=tokens < end)


def arange_positions_varlen(
    cu_seqlens: torch.Tensor,
    num_tokens: int,
    context_lens: torch.Tensor | None = None,
    *,
    block: int = 256,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return each packed token's position within its sequence (plus its context length).

    Args:
        cu_seqlens: (B + 1,) int32/int64, non-decreasing, cu_seqlens[0] == 0.
        num_tokens: cu_seqlens[-1], the packed token count, known on the host.
        context_lens: Optional (B,) int32/int64 offsets added to each sequence's positions.
        block: Tokens per loop step (a power of two).
        num_warps: Warps per program; None = 4.

    Returns:
        positions: (num_tokens,) int64.

    Raises:
        ValueError: Bad dtypes or shapes, a negative num_tokens or a bad block (check_inputs
            checks cu_seqlens' values).
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
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0; got {num_tokens}")
    if context_lens is not None and (
        context_lens.shape != (b,) or context_lens.dtype not in (torch.int32, torch.int64)
    ):
        raise ValueError(f"context_lens must be ({b},) int32/int64; got "
                         f"{tuple(context_lens.shape)} {context_lens.dtype}")  # fmt: skip
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two; got {block}")
    positions = torch.empty((num_tokens,), dtype=torch.int64, device=cu_seqlens.device)
    if num_tokens == 0 or b == 0:
        return positions
    cu = cu_seqlens.contiguous()
    ctx = cu if context_lens is None else context_lens.contiguous()  # unused when absent
    _arange_positions_kernel[(b,)](
        cu, ctx, positions,
        num_tokens,
        HAS_CONTEXT=context_lens is not None, BLOCK=block, num_warps=num_warps or 4,
    )  # fmt: skip
    return positions


def check_inputs(cu_seqlens: torch.Tensor, num_tokens: int) -> None:
    """Raise ValueError unless cu_seqlens starts at 0, never decreases and ends at num_tokens.

    Reads cu_seqlens on the host (a sync), so it stays out of the launcher.
    """
    b = cu_seqlens.numel() - 1
    if int(cu_seqlens[0]) != 0 or (b > 0 and bool((cu_seqlens[1:] < cu_seqlens[:-1]).any())):
        raise ValueError("cu_seqlens must start at 0 and be non-decreasing")
    if int(cu_seqlens[-1]) != num_tokens:
        raise ValueError(f"num_tokens {num_tokens} != cu_seqlens[-1] {int(cu_seqlens[-1])}")


def reference(
    cu_seqlens: torch.Tensor, num_tokens: int, context_lens: torch.Tensor | None = None
) -> torch.Tensor:
    """Return the positions by repeat_interleave of the sequence starts (num_tokens: unused)."""
    cu = cu_seqlens.long()
    lengths = cu[1:] - cu[:-1]
    starts = torch.repeat_interleave(cu[:-1], lengths)
    pos = torch.arange(int(cu[-1]), device=cu.device) - starts
    if context_lens is not None:
        pos = pos + torch.repeat_interleave(context_lens.long(), lengths)
    return pos


def make_inputs(shape: dict, dtype: torch.dtype = torch.int32, device: str = "cpu") -> dict:
    """Return ``{"cu_seqlens", "num_tokens", "context_lens"}`` for ``{"seqlens", "context"}``.

    dtype is the index dtype (int32 or int64); float dtypes fall back to int32.
    """
    idx = dtype if dtype in (torch.int32, torch.int64) else torch.int32
    lens = torch.tensor(shape["seqlens"], dtype=torch.int64)
    cu = torch.zeros(len(lens) + 1, dtype=torch.int64)
    cu[1:] = torch.cumsum(lens, 0)
    ctx = torch.randint(0, 50, (len(lens),)) if shape.get("context", False) else None
    return {
        "cu_seqlens": cu.to(idx).to(device),
        "num_tokens": int(lens.sum()),
        "context_lens": None if ctx is None else ctx.to(idx).to(device),
    }
