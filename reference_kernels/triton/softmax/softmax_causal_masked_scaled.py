"""
---
id: softmax_causal_masked_scaled
title: Attention-score softmax with the scale and the causal mask fused, one row per program
op_family: softmax
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, fp16, bf16]
bound: memory
techniques: [row-per-program, fused-scale, causal-mask, masked-loads, max-subtraction]
status: reference
launcher: softmax_causal_masked_scaled
tuning:
  num_warps: [4, 1, 2, 8, 16]
args:
  scores: {shape: [..., Q, K], dtypes: [fp32, fp16, bf16], aliases: [x, attn_scores, logits]}
  scale: {type: float, default: 1.0, aliases: [sm_scale, softmax_scale]}
  offset: {type: int, default: 0, aliases: [causal_offset, diagonal]}
returns:
  - {name: probs, shape: [..., Q, K], dtype: scores}
problem:
  shapes: [{batch: 1, heads: 2, q: 5, k: 9}, {batch: 2, heads: 1, q: 6, k: 6, offset: -2, scale: -0.5}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
The unfused-attention probability step: probs = softmax(scale * scores) over the key axis with the
causal mask applied first (key column c of query row q is dropped, i.e. gets -inf, when c > q +
offset; offset = K - Q aligns the last query with the last key when a KV cache precedes the new
queries). One program per (batch..., q) row holds the whole row in registers (BLOCK_K =
next_pow2(K)) and LOADS ONLY the visible columns c <= q + offset: in a square causal matrix half of
the reads never happen. Scale, mask, max, exp, sum and the division run in fp32 and the row is
stored once, zeros on the masked columns. A row with no visible column (q + offset < 0) is defined
as all zeros rather than the 0/0 NaN of an eager masked_fill + softmax. Bytes per element: about
(visible fraction) reads + 1 write; one exponential per visible element. Limits: K <= 32768 (the
row is in registers); one program per row, so few long rows leave SMs idle; the mask is only the
causal triangle (no padding or sliding window).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_causal_masked_scaled_kernel(
    # pointers
    s_ptr,
    p_ptr,
    # sizes
    Q,
    K,
    # strides (elements; the last dim is contiguous)
    stride_sr,
    stride_pr,
    # scalars
    scale,
    offset,
    # meta
    BLOCK_K: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # flattened (batch..., q); int64 for row * stride
    q = row % Q
    cols = tl.arange(0, BLOCK_K)
    in_row = cols < K
    visible = in_row & (cols <= q + offset)  # causal: keys up to q + offset

    # masked lanes are never read: they load -inf directly
    x = tl.load(s_ptr + row * stride_sr + cols, mask=visible, other=float("-inf"))
    x = x.to(tl.float32) * scale
    x = tl.where(visible, x, float("-inf"))  # a -inf score stays -inf whatever the scale's sign
    row_max = tl.max(x, axis=0)
    row_max = tl.where(row_max == float("-inf"), 0.0, row_max)  # fully masked row: no NaN
    e = tl.exp(x - row_max)  # exactly 0 on masked lanes
    total = tl.sum(e, axis=0)
    probs = e / tl.where(total > 0.0, total, 1.0)  # fully masked: 0 / 1 = zeros
    tl.store(p_ptr + row * stride_pr + cols, probs.to(p_ptr.dtype.element_ty), mask=in_row)


def softmax_causal_masked_scaled(
    scores: torch.Tensor,
    scale: float = 1.0,
    offset: int = 0,
    *,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return softmax(scale * scores) over the last axis with keys c > q + offset masked out.

    Args:
        scores: (..., Q, K) fp32/fp16/bf16 attention scores, last dimension contiguous.
        scale: Multiplies the scores before the mask and the softmax (e.g. 1 / sqrt(head_dim)).
        offset: Query row q sees keys 0..q + offset (0: square causal; K - Q: bottom-right
            aligned, as with a KV cache); rows with q + offset < 0 come out all zeros.
        num_warps: Warps per program; None picks by row width.

    Returns:
        probs: same shape and dtype as ``scores``, contiguous; computed in fp32, rounded once.

    Raises:
        ValueError: scores has fewer than 2 dimensions, is not floating point, or K is 0 or
            above 32768.
    """
    if scores.dim() < 2 or not scores.is_floating_point():
        raise ValueError(
            f"scores must be float (..., Q, K); got {scores.dtype} {tuple(scores.shape)}"
        )
    q_len, k_len = scores.shape[-2], scores.shape[-1]
    if not 1 <= k_len <= 32768:
        raise ValueError(f"key length K must be in 1..32768 (row in registers); got {k_len}")
    s2 = scores.reshape(-1, k_len)
    if s2.stride(-1) != 1:
        s2 = s2.contiguous()
    probs = torch.empty((s2.shape[0], k_len), dtype=scores.dtype, device=scores.device)
    if probs.numel() == 0:
        return probs.reshape(scores.shape)
    block_k = triton.next_power_of_2(k_len)
    warps = num_warps if num_warps is not None else min(max(block_k // 256, 1), 16)
    _softmax_causal_masked_scaled_kernel[(s2.shape[0],)](
        s2, probs,
        q_len, k_len,
        s2.stride(0), probs.stride(0),
        float(scale), int(offset),
        BLOCK_K=block_k,
        num_warps=warps,
    )  # fmt: skip
    return probs.reshape(scores.shape)


def reference(scores: torch.Tensor, scale: float = 1.0, offset: int = 0) -> torch.Tensor:
    """Return the masked, scaled softmax in fp32 (fully masked rows = 0), cast to scores' dtype."""
    q_len, k_len = scores.shape[-2], scores.shape[-1]
    q = torch.arange(q_len, device=scores.device)[:, None]
    masked = torch.arange(k_len, device=scores.device)[None, :] > q + offset
    x = (scores.float() * scale).masked_fill(masked, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    return torch.where(masked.all(dim=-1, keepdim=True), 0.0, probs).to(scores.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"batch", "heads", "q", "k"}`` (+ ``"offset"``): N(0, 1) * 4 scores."""
    b, h, q, k = shape["batch"], shape["heads"], shape["q"], shape["k"]
    scores = (4.0 * torch.randn(b, h, q, k, device=device)).to(dtype)
    return {
        "scores": scores,
        "scale": shape.get("scale", 0.125),
        "offset": shape.get("offset", k - q),
    }
