"""
---
id: repetition_penalty_apply
title: Repetition penalty on each row's history tokens, a gather-scatter program per row
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, int32, int64]
bound: memory
techniques: [row-per-program, gather-scatter, copy-then-scatter, barrier, sparse-update]
status: reference
launcher: repetition_penalty_apply
tuning:
  block_v: [1024, 256, 4096]
  block_l: [256, 64, 1024]
  num_warps: [4, 1, 8]
args:
  logits: {shape: [B, V], dtypes: [fp32], aliases: [scores]}
  token_ids:
    {shape: [B, L], dtypes: [int32, int64], aliases: [input_ids, prev_tokens, output_tokens]}
  penalties: {shape: [B], dtypes: [fp32], aliases: [repetition_penalties, penalty]}
returns:
  - {name: out, shape: [B, V], dtype: fp32}
problem:
  shapes: [{rows: 3, vocab: 1000, history: 300}, {rows: 2, vocab: 50, history: 7}]
  dtypes: [fp32]
measured: []
---
The CTRL / Hugging Face repetition penalty: for every token id that occurs in row b's history
token_ids[b] (ids outside [0, V), e.g. the -1 padding of ragged histories, are ignored), out[b, id]
= logits[b, id] / penalty[b] if that logit is > 0, else logits[b, id] * penalty[b]; every other
entry is copied. A token that occurs several times is penalised once. One program per row first
copies the row (BLOCK_V chunks), then a barrier, then walks the history in BLOCK_L chunks: it
gathers the ORIGINAL logits at the ids and scatters the penalised values into the output. Reading
the input (never the output) makes duplicates harmless: every duplicate writes the same value, so no
dedup pass and no atomics are needed; the barrier orders the copy's stores before the scatter's
within the program. Bytes: a 4-byte read and write per logit for the copy plus 12-16 bytes per
history id (id, gather, scatter); the scatter touches L history lines, so for L << V the copy
dominates and the kernel runs at copy bandwidth. Limits: out of place (an in-place variant would
skip the copy but must dedup ids that span chunks); one program per row, so a single 150K row copies
on one SM; penalties are per row (a scalar is a (B,) tensor of one value).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _repetition_penalty_apply_kernel(
    # pointers
    logits_ptr,
    ids_ptr,
    pen_ptr,
    out_ptr,
    # sizes
    V,
    L,
    # strides (elements; the last dim is contiguous)
    stride_lb,
    stride_ib,
    stride_ob,
    # meta
    BLOCK_V: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    x_row = logits_ptr + row * stride_lb
    out_row = out_ptr + row * stride_ob
    offs_v = tl.arange(0, BLOCK_V)
    for start in range(0, V, BLOCK_V):  # 1) copy the row
        cols = start + offs_v
        mask = cols < V
        tl.store(out_row + cols, tl.load(x_row + cols, mask=mask), mask=mask)
    tl.debug_barrier()  # the copy's stores land before the scatter overwrites some of them

    penalty = tl.load(pen_ptr + row)
    offs_l = tl.arange(0, BLOCK_L)
    for start in range(0, L, BLOCK_L):  # 2) gather the original logits, scatter penalised ones
        pos = start + offs_l
        ids = tl.load(ids_ptr + row * stride_ib + pos, mask=pos < L, other=-1).to(tl.int64)
        valid = (pos < L) & (ids >= 0) & (ids < V)
        x = tl.load(x_row + ids, mask=valid, other=0.0)
        y = tl.where(x > 0, tl.math.div_rn(x, penalty), x * penalty)  # IEEE division, as torch
        tl.store(out_row + ids, y, mask=valid)


def repetition_penalty_apply(
    logits: torch.Tensor,
    token_ids: torch.Tensor,
    penalties: torch.Tensor,
    *,
    block_v: int = 1024,
    block_l: int = 256,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return logits with each row's history tokens penalised (divided if > 0, else multiplied).

    Args:
        logits: (B, V) fp32, last dimension contiguous.
        token_ids: (B, L) int32/int64 history ids; ids outside [0, V) are padding.
        penalties: (B,) fp32 per-row penalty (> 0; 1 leaves the row unchanged).
        block_v: Vocab chunk of the copy loop (power of two).
        block_l: History chunk of the scatter loop (power of two).
        num_warps: Warps per program.

    Returns:
        out: (B, V) fp32, a new tensor (logits is not modified).

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if logits.dim() != 2 or logits.dtype != torch.float32:
        raise ValueError(f"logits must be (B, V) fp32; got {tuple(logits.shape)} {logits.dtype}")
    b, v = logits.shape
    int_ids = token_ids.dtype in (torch.int32, torch.int64)
    if token_ids.dim() != 2 or token_ids.shape[0] != b or not int_ids:
        raise ValueError(
            f"token_ids must be ({b}, L) int32/int64 for logits {tuple(logits.shape)}; "
            f"got {tuple(token_ids.shape)} {token_ids.dtype}"
        )
    if tuple(penalties.shape) != (b,) or penalties.dtype != torch.float32:
        raise ValueError(
            f"penalties must be ({b},) fp32; got {tuple(penalties.shape)} {penalties.dtype}"
        )
    x = logits if logits.stride(-1) == 1 else logits.contiguous()
    ids = token_ids if token_ids.stride(-1) == 1 else token_ids.contiguous()
    out = torch.empty((b, v), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    _repetition_penalty_apply_kernel[(b,)](
        x, ids, penalties, out,
        v, ids.shape[1],
        x.stride(0), ids.stride(0), out.stride(0),
        BLOCK_V=block_v, BLOCK_L=block_l, num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(
    logits: torch.Tensor, token_ids: torch.Tensor, penalties: torch.Tensor
) -> torch.Tensor:
    """Return the penalised logits through a per-row boolean "seen" mask (no scatter)."""
    b, v = logits.shape
    ids = token_ids.long()
    valid = (ids >= 0) & (ids < v)
    seen = torch.zeros(b, v + 1, dtype=torch.bool, device=logits.device)
    seen.scatter_(1, torch.where(valid, ids, v), True)  # invalid ids land in a spare column
    seen = seen[:, :v]
    pen = penalties[:, None]
    penalised = torch.where(logits > 0, logits / pen, logits * pen)
    return torch.where(seen, penalised, logits)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return inputs for ``{"rows", "vocab", "history"}``: N(0, 1) logits, ids with repeats.

    ids are drawn from the first vocab / 4 tokens (so they repeat), with -1 padding at the tail
    of odd rows; penalties in [1.1, 2].
    """
    b, v, length = shape["rows"], shape["vocab"], shape["history"]
    logits = torch.randn(b, v, device=device).to(dtype)
    ids = torch.randint(0, max(v // 4, 1), (b, length), device=device)
    ids[1::2, length // 2 :] = -1
    penalties = 1.1 + 0.9 * torch.rand(b, device=device)
    return {"logits": logits, "token_ids": ids, "penalties": penalties}
