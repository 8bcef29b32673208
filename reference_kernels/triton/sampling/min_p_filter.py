"""
---
id: min_p_filter
title: Min-p probability filter, row max then masked write in two chunked passes of one program
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, two-pass, lane-wise-accumulator, l2-reread]
status: reference
launcher: min_p_filter
tuning:
  block_v: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  probs: {shape: [T, V], dtypes: [bf16, fp16, fp32], aliases: [x, scores]}
  min_p: {type: float, default: 0.05, aliases: [minp, p]}
returns:
  - {name: out, shape: [T, V], dtype: probs}
problem:
  shapes: [{rows: 3, vocab: 1000}, {rows: 9, vocab: 64, min_p: 0.3}]
  dtypes: [fp32, bf16]
measured: []
---
Min-p sampling filter: a probability is kept when p >= min_p * max(p) of its row, the rest become 0
(not renormalised), so the cut scales with the model's confidence. One program per row makes two
passes over the row in BLOCK_V chunks: the first keeps a per-lane running maximum (no cross-lane
reduction inside the loop) and reduces it once; the second reloads each chunk, compares against the
fp32 threshold min_p * max and writes. The threshold is computed once per row in fp32 and the
comparison is exact, so the kernel matches a PyTorch reference that does the same product bit for
bit. Bytes per entry: two reads (the second mostly from L2 for rows up to a few MB; a 150K-wide fp32
row is 600 KB) and one write, e.g. 6 B in bf16. Limits: one program per row; a row that fits in one
chunk still reloads it (cheap, from L1/L2); NaNs are not handled; min_p > 1 drops every entry that
is not the maximum and is rejected.
Not atrex30's topk_filter: that operator keeps each row's k largest logits (a rank
cut on logits, the rest -inf), while this is a min-p cut on probabilities (the rest 0).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _min_p_filter_kernel(
    # pointers
    p_ptr,
    out_ptr,
    # sizes
    V,
    # strides (elements; the last dim is contiguous)
    stride_pm,
    stride_om,
    # scalars
    min_p,
    # meta
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    p_row = p_ptr + row * stride_pm
    o_row = out_ptr + row * stride_om
    offs = tl.arange(0, BLOCK_V)

    # pass 1: row maximum, lane-wise in the loop and one reduction after it
    lane_max = tl.full((BLOCK_V,), float("-inf"), tl.float32)
    for start in range(0, V, BLOCK_V):
        cols = start + offs
        p = tl.load(p_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        lane_max = tl.maximum(lane_max, p)
    threshold = min_p * tl.max(lane_max, axis=0)  # fp32, once per row

    # pass 2: keep p >= threshold (the re-read hits L2 for rows of a few MB)
    for start in range(0, V, BLOCK_V):
        cols = start + offs
        mask = cols < V
        p = tl.load(p_row + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(o_row + cols, tl.where(p >= threshold, p, 0.0), mask=mask)


def _launch_config(v: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_v = min(triton.next_power_of_2(v), 4096)
    return {"block_v": block_v, "num_warps": min(max(block_v // 256, 1), 16)}


def min_p_filter(
    probs: torch.Tensor,
    min_p: float = 0.05,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Zero every probability below min_p times its row's maximum.

    Args:
        probs: (T, V) bf16/fp16/fp32 probabilities, last dimension contiguous.
        min_p: Relative threshold in [0, 1]; 0 keeps everything.
        block_v: Vocab chunk per loop step (power of two); None = min(next_pow2(V), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        out: (T, V) in ``probs``' dtype, contiguous; dropped entries are 0.

    Raises:
        ValueError: probs is not 2D floating point, or min_p is outside [0, 1].
    """
    if probs.dim() != 2 or probs.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(
            f"probs must be (T, V) bf16/fp16/fp32; got {tuple(probs.shape)} {probs.dtype}"
        )
    if not 0.0 <= min_p <= 1.0:
        raise ValueError(f"min_p must be in [0, 1]; got {min_p}")
    p = probs if probs.stride(-1) == 1 else probs.contiguous()
    t, v = p.shape
    out = torch.empty((t, v), dtype=p.dtype, device=p.device)
    if out.numel() == 0:
        return out
    cfg = _launch_config(v)
    given = {"block_v": block_v, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _min_p_filter_kernel[(t,)](
        p, out,
        v,
        p.stride(0), out.stride(0),
        float(min_p),
        BLOCK_V=cfg["block_v"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out


def reference(probs: torch.Tensor, min_p: float = 0.05) -> torch.Tensor:
    """Zero entries below min_p * row max (fp32 threshold), in the input dtype."""
    p = probs.float()
    threshold = min_p * p.amax(dim=-1, keepdim=True)
    return p.masked_fill(p < threshold, 0.0).to(probs.dtype)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"probs", "min_p"}`` for ``{"rows", "vocab"}`` (+ optional ``"min_p"``).

    Probabilities are softmax(N(0, 1) * 2) rows; min_p defaults to 0.1.
    """
    logits = torch.randn(shape["rows"], shape["vocab"], device=device) * 2.0
    probs = torch.softmax(logits, dim=-1).to(dtype)
    return {"probs": probs, "min_p": shape.get("min_p", 0.1)}
