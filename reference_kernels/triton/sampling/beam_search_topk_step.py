"""
---
id: beam_search_topk_step
title: Beam-search step, running top-2K over beams x vocab with packed int64 keys and chunk skipping
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32]
bound: memory
techniques: [row-per-program, packed-int64-key, iterative-max-extraction, threshold-skip, fused-add]
status: reference
launcher: beam_search_topk_step
tuning:
  block_v: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  logprobs: {shape: [NB, K, V], dtypes: [fp32], aliases: [log_probs, token_logprobs, scores]}
  beam_scores: {shape: [NB, K], dtypes: [fp32], aliases: [cum_logprobs, running_scores]}
returns:
  - {name: values, shape: [NB, 2*K], dtype: fp32}
  - {name: beam_indices, shape: [NB, 2*K], dtype: int64}
  - {name: token_indices, shape: [NB, 2*K], dtype: int64}
problem:
  shapes: [{batch: 2, beams: 2, vocab: 300}, {batch: 3, beams: 1, vocab: 2}]
  dtypes: [fp32]
measured: []
---
One beam-search expansion: for each batch entry, score[k, v] = beam_scores[k] + logprobs[k, v]
over its K beams and the vocab, and the 2K best candidates (2K so that K survive after finished
hypotheses are removed) are returned in descending order with their beam and token ids; equal
scores are ordered by the smaller flat index k * V + v. One program per batch entry streams the K
rows in BLOCK_V chunks: the fused add happens in registers, and each candidate becomes one int64 key
(the fp32 score's order-preserving int32 key in the high word, ~flat index in the low word) so a
single tl.max finds both the best score and its position. The program keeps the running top-2K in
a register buffer; for each chunk whose best key beats the buffer's 2K-th key (most chunks fail
this test once the buffer is good, so they cost one read and one max), 2K rounds of max extraction
over chunk and buffer merge them. Bytes: the K * V logprobs read once; FLOPs: one add and compare
per candidate, plus 2K * BLOCK_V per merged chunk. Limits: NaN scores are not handled; K * V <
2^32; 2K <= K * V; intended for small beams (2K <= 64: the merge is O(K) passes); one program per
batch entry, so small batches with a huge vocab use few SMs (split the vocab, then merge).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _beam_topk_kernel(
    # pointers
    lp_ptr,  # (NB, K, V) fp32
    bs_ptr,  # (NB, K) fp32
    val_ptr,
    beam_ptr,
    tok_ptr,  # (NB, 2K) outputs
    # sizes
    V,
    # strides (elements; the last dim is contiguous)
    stride_lb,
    stride_lk,
    stride_bb,
    stride_ob,
    # meta
    K: tl.constexpr,
    TWO_K: tl.constexpr,
    KK: tl.constexpr,  # next power of two >= 2K
    BLOCK_V: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_V)
    lane = tl.arange(0, KK)
    sentinel = tl.full((), -(2**31), tl.int32).to(tl.int64) << 32  # below every non-NaN key
    buf = tl.full((KK,), 0, tl.int64) + sentinel
    low_mask = tl.full((), 0xFFFFFFFF, tl.int64)  # typed: a bare 0xFFFFFFFF would be uint32
    for k in range(K):
        base = tl.load(bs_ptr + b * stride_bb + k)
        row = lp_ptr + b * stride_lb + k * stride_lk
        for start in range(0, V, BLOCK_V):
            cols = start + offs
            mask = cols < V
            score = tl.load(row + cols, mask=mask, other=0.0) + base
            bits = score.to(tl.int32, bitcast=True)
            okey = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64)
            flat = cols.to(tl.int64) + k * V.to(tl.int64)  # int64: K * V may pass 2^31
            key = tl.where(mask, (okey << 32) | (low_mask - flat), sentinel)
            thresh = tl.min(tl.where(lane < TWO_K, buf, tl.max(buf, axis=0)), axis=0)
            if tl.max(key, axis=0) > thresh:  # else nothing in this chunk enters the top 2K
                merged = tl.full((KK,), 0, tl.int64) + sentinel
                for j in tl.static_range(TWO_K):
                    best = tl.maximum(tl.max(key, axis=0), tl.max(buf, axis=0))
                    merged = tl.where(lane == j, best, merged)
                    key = tl.where(key == best, sentinel, key)  # keys are unique: one removal
                    buf = tl.where(buf == best, sentinel, buf)
                buf = merged
    hi = (buf >> 32).to(tl.int32)
    value = tl.where(hi < 0, hi ^ 0x7FFFFFFF, hi).to(tl.float32, bitcast=True)
    flat = low_mask - (buf & low_mask)
    out = lane < TWO_K
    tl.store(val_ptr + b * stride_ob + lane, value, mask=out)
    tl.store(beam_ptr + b * stride_ob + lane, flat // V, mask=out)
    tl.store(tok_ptr + b * stride_ob + lane, flat % V, mask=out)


def beam_search_topk_step(
    logprobs: torch.Tensor,
    beam_scores: torch.Tensor,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return the top 2K of beam_scores[:, :, None] + logprobs over (beam, token), per batch entry.

    Args:
        logprobs: (NB, K, V) fp32 token log-probabilities per beam; last dimension contiguous.
        beam_scores: (NB, K) fp32 running log-probability of each beam.
        block_v: Vocab chunk per loop step (power of two); None = min(next_pow2(V), 1024).
        num_warps: Warps per program; None = 4.

    Returns:
        values: (NB, 2K) fp32, descending; beam_indices, token_indices: (NB, 2K) int64.

    Raises:
        ValueError: Bad shapes or dtypes, 2K > K * V, 2K > 64 or K * V >= 2^32.
    """
    if logprobs.dim() != 3 or logprobs.dtype != torch.float32:
        raise ValueError(f"logprobs must be (NB, K, V) fp32; got {logprobs.dtype} {logprobs.shape}")
    nb, k, v = logprobs.shape
    if beam_scores.shape != (nb, k) or beam_scores.dtype != torch.float32:
        raise ValueError(f"beam_scores must be ({nb}, {k}) fp32; got {beam_scores.shape}")
    if k < 1 or 2 * k > k * v or 2 * k > 64 or k * v >= 2**32:
        raise ValueError(f"need 1 <= K, 2K <= K * V, 2K <= 64 and K * V < 2^32; got K={k}, V={v}")
    lp = logprobs if logprobs.stride(-1) == 1 else logprobs.contiguous()
    bs = beam_scores.contiguous()
    values = torch.empty((nb, 2 * k), dtype=torch.float32, device=lp.device)
    beams = torch.empty((nb, 2 * k), dtype=torch.int64, device=lp.device)
    tokens = torch.empty((nb, 2 * k), dtype=torch.int64, device=lp.device)
    if nb == 0:
        return values, beams, tokens
    _beam_topk_kernel[(nb,)](
        lp, bs, values, beams, tokens,
        v,
        lp.stride(0), lp.stride(1), bs.stride(0), values.stride(0),
        K=k, TWO_K=2 * k, KK=triton.next_power_of_2(2 * k),
        BLOCK_V=block_v or min(triton.next_power_of_2(v), 1024),
        num_warps=num_warps or 4,
    )  # fmt: skip
    return values, beams, tokens


def reference(
    logprobs: torch.Tensor, beam_scores: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return torch.topk of the flattened (beam, token) scores, split into beam and token ids."""
    nb, k, v = logprobs.shape
    scores = (beam_scores[:, :, None] + logprobs).reshape(nb, k * v)
    values, flat = torch.topk(scores, 2 * k, dim=-1, sorted=True)
    return values, flat // v, flat % v


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"logprobs", "beam_scores"}`` for ``shape = {"batch", "beams", "vocab"}``."""
    nb, k, v = shape["batch"], shape["beams"], shape["vocab"]
    logprobs = torch.log_softmax(3.0 * torch.randn(nb, k, v, device=device), dim=-1)
    beam_scores = -5.0 * torch.rand(nb, k, device=device)
    return {"logprobs": logprobs.to(dtype), "beam_scores": beam_scores.to(dtype)}
