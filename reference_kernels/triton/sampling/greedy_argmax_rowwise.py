"""
---
id: greedy_argmax_rowwise
title: Greedy decoding argmax per vocab row with lane-wise running maxima and one final reduction
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, lane-wise-accumulator, lowest-index-tie-break]
status: reference
launcher: greedy_argmax_rowwise
tuning:
  block_v: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  logits: {shape: [T, V], dtypes: [bf16, fp16, fp32], aliases: [x, scores]}
returns:
  - {name: next_tokens, shape: [T], dtype: int64}
problem:
  shapes: [{rows: 3, vocab: 1000}, {rows: 9, vocab: 64}]
  dtypes: [fp32, bf16]
measured: []
---
Greedy sampling: the index of the largest logit of every row, ties going to the lowest index (as
torch.argmax). One program per row walks the vocab in BLOCK_V chunks and keeps, per lane, the best
value seen and its column; a lane only replaces its value on a strictly larger one, so each lane
holds its first maximum. After the loop one max reduction and one min-of-index reduction over the
lanes pick the lowest column among the row maxima: a single cross-lane reduction per row instead of
one per chunk, so the loop is pure loads and compares. Bytes: the logit row is read once (2 B per
logit in bf16) and 8 B are written per row. Limits: one program per row, so a decode batch of a few
rows uses a few SMs (a split-row variant would combine per-split winners); NaN logits are not
handled (torch.argmax returns a NaN's index, this kernel ignores NaNs); the comparisons run in fp32.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _greedy_argmax_rowwise_kernel(
    # pointers
    x_ptr,
    out_ptr,  # int64 (T,)
    # sizes
    V,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    # meta
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    x_row = x_ptr + row * stride_xm
    offs = tl.arange(0, BLOCK_V)

    # per-lane running maximum and the column where the lane first saw it
    best = tl.full((BLOCK_V,), float("-inf"), tl.float32)
    best_col = offs
    for start in range(0, V, BLOCK_V):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        better = x > best  # strict: an equal value later in the row never wins
        best = tl.where(better, x, best)
        best_col = tl.where(better, cols, best_col)

    # one cross-lane reduction: lowest column among the lanes holding the row maximum
    row_max = tl.max(best, axis=0)
    winner = tl.min(tl.where((best == row_max) & (best_col < V), best_col, V), axis=0)
    # an all -inf row leaves every lane at -inf, so the winner is column 0 (as torch.argmax)
    tl.store(out_ptr + row, winner.to(tl.int64))


def _launch_config(v: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_v = min(triton.next_power_of_2(v), 4096)
    return {"block_v": block_v, "num_warps": min(max(block_v // 256, 1), 16)}


def greedy_argmax_rowwise(
    logits: torch.Tensor,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the argmax of every logit row (ties to the lowest index).

    Args:
        logits: (T, V) bf16/fp16/fp32, last dimension contiguous, V >= 1.
        block_v: Vocab chunk per loop step (power of two); None = min(next_pow2(V), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        next_tokens: (T,) int64.

    Raises:
        ValueError: logits is not 2D floating point, or V is 0.
    """
    if logits.dim() != 2 or logits.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(
            f"logits must be (T, V) bf16/fp16/fp32; got {tuple(logits.shape)} {logits.dtype}"
        )
    if logits.shape[1] == 0:
        raise ValueError("logits has an empty vocab dimension (V = 0); argmax is undefined")
    x = logits if logits.stride(-1) == 1 else logits.contiguous()
    t, v = x.shape
    out = torch.empty((t,), dtype=torch.int64, device=x.device)
    if t == 0:
        return out
    cfg = _launch_config(v)
    given = {"block_v": block_v, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _greedy_argmax_rowwise_kernel[(t,)](
        x, out,
        v,
        x.stride(0),
        BLOCK_V=cfg["block_v"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out


def reference(logits: torch.Tensor) -> torch.Tensor:
    """Return torch.argmax over the last dimension (ties to the lowest index)."""
    return torch.argmax(logits.float(), dim=-1)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"logits"}`` for ``shape = {"rows", "vocab"}``; N(0, 1) logits."""
    return {"logits": torch.randn(shape["rows"], shape["vocab"], device=device).to(dtype)}
