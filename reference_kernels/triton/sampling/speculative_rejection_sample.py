"""
---
id: speculative_rejection_sample
title: Speculative-decoding rejection sampling, first rejection found in one tile, resample by race
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32]
bound: memory
techniques:
  [row-per-program, rejection-sampling, exponential-race, first-index-min, chunked-row-loop]
status: reference
launcher: speculative_rejection_sample
tuning:
  block_v: [2048, 256, 512, 1024, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  draft_token_ids: {shape: [B, K], dtypes: [int32, int64]}
  draft_probs: {shape: [B, K, V], dtypes: [fp32]}
  target_probs: {shape: [B, K, V], dtypes: [fp32]}
  bonus_token_ids: {shape: [B], dtypes: [int32, int64]}
  uniform_samples: {shape: [B, K], dtypes: [fp32], aliases: [uniform]}
  exponential_noise: {shape: [B, K, V], dtypes: [fp32]}
returns:
  - {name: output_token_ids, shape: [B, K + 1], dtype: int64}
  - {name: num_accepted, shape: [B], dtype: int32}
problem:
  shapes: [{batch: 6, k: 4, vocab: 300}, {batch: 3, k: 1, vocab: 64}]
  dtypes: [fp32]
measured: []
---
The acceptance step of speculative decoding with K draft tokens per sequence. Draft token k is
accepted when u_k < p_target(d_k) / p_draft(d_k); at the first rejection r the token is resampled
from max(0, p_target - p_draft) normalised, and the rest of the row is -1; if all K are accepted,
the bonus token (sampled from the target's extra position upstream) follows. One program per
sequence: it gathers the K draft probabilities in one BLOCK_K tile, finds r as the minimum index of
the rejected positions (no sequential loop over k), writes the accepted prefix, and only if r < K
streams row r of both distributions in BLOCK_V chunks once. The resample uses an exponential race:
argmax_i q_i / E_i with E_i ~ Exp(1) is a sample from q / sum(q), so the normalisation (and a second
pass for the sum) is never needed; ties go to the lowest index. Traffic: 3 * K gathered floats plus
12 bytes per vocab entry for the one rejected row (p_t, p_d, E). Limits: noise is given (for
reproducibility), E must be > 0; K <= 64; if p_target == p_draft on the whole rejected row
(impossible in exact arithmetic) token 0 is returned.
"""

import torch
import triton
import triton.language as tl

MAX_K = 64


@triton.jit
def _spec_rejection_kernel(
    # pointers
    draft_ids_ptr,
    draft_probs_ptr,
    target_probs_ptr,
    bonus_ptr,
    uniform_ptr,
    noise_ptr,
    out_ptr,
    num_acc_ptr,
    # sizes
    K,
    V,
    # meta
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)  # int64: (b * K + k) * V may pass 2^31
    offs_k = tl.arange(0, BLOCK_K)
    mask_k = offs_k < K
    ids = tl.load(draft_ids_ptr + b * K + offs_k, mask=mask_k, other=0).to(tl.int64)
    prob_offs = (b * K + offs_k) * V + ids
    p_d = tl.load(draft_probs_ptr + prob_offs, mask=mask_k, other=1.0)
    p_t = tl.load(target_probs_ptr + prob_offs, mask=mask_k, other=1.0)
    u = tl.load(uniform_ptr + b * K + offs_k, mask=mask_k, other=0.0)
    rejected = (u >= p_t / p_d) & mask_k
    r = tl.min(tl.where(rejected, offs_k, K), axis=0)  # first rejection, K when none

    out_row = out_ptr + b * (K + 1)
    # position r is left to the branch below, so each slot is written exactly once
    tl.store(out_row + offs_k, tl.where(offs_k < r, ids, -1), mask=mask_k & (offs_k != r))
    tl.store(num_acc_ptr + b, r.to(tl.int32))
    if r < K:
        # resample at r: argmax of max(p_t - p_d, 0) / E, lowest index on ties
        base = (b * K + r) * V
        offs_v = tl.arange(0, BLOCK_V)
        best = tl.full((BLOCK_V,), -1.0, tl.float32)
        best_idx = tl.zeros((BLOCK_V,), tl.int64)
        for start in range(0, V, BLOCK_V):
            cols = start + offs_v
            mask = cols < V
            pt = tl.load(target_probs_ptr + base + cols, mask=mask, other=0.0)
            pd = tl.load(draft_probs_ptr + base + cols, mask=mask, other=0.0)
            e = tl.load(noise_ptr + base + cols, mask=mask, other=1.0)
            score = tl.where(mask, tl.maximum(pt - pd, 0.0) / e, -1.0)
            better = score > best  # strict: an earlier chunk keeps a tie
            best = tl.where(better, score, best)
            best_idx = tl.where(better, cols.to(tl.int64), best_idx)
        top = tl.max(best, axis=0)
        token = tl.min(tl.where(best == top, best_idx, V), axis=0)
        tl.store(out_row + r, token)
        tl.store(out_row + K, tl.full((), -1, tl.int64))
    else:
        tl.store(out_row + K, tl.load(bonus_ptr + b).to(tl.int64))


def speculative_rejection_sample(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    uniform_samples: torch.Tensor,
    exponential_noise: torch.Tensor,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Accept or reject K draft tokens per sequence and resample at the first rejection.

    Args:
        draft_token_ids: (B, K) int32/int64 draft tokens, K <= 64.
        draft_probs: (B, K, V) fp32 draft distributions.
        target_probs: (B, K, V) fp32 target distributions at the K draft positions.
        bonus_token_ids: (B,) int32/int64 token emitted when all K drafts are accepted.
        uniform_samples: (B, K) fp32 in [0, 1), one acceptance draw per draft token.
        exponential_noise: (B, K, V) fp32 Exp(1) samples (> 0) for the resampling race.
        block_v: Chunk width of the vocab loop (a power of two); None = min(next_pow2(V), 2048).
        num_warps: Warps per program; None picks by block_v.

    Returns:
        (output_token_ids, num_accepted): (B, K + 1) int64 with -1 after the emitted tokens, and
        (B,) int32 accepted draft count.

    Raises:
        ValueError: Mismatched shapes, wrong dtypes, K > 64 or a bad block_v.
    """
    if draft_token_ids.dim() != 2 or draft_token_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"draft_token_ids must be (B, K) int32/int64; got "
                         f"{tuple(draft_token_ids.shape)} {draft_token_ids.dtype}")  # fmt: skip
    b, k = draft_token_ids.shape
    if k > MAX_K:
        raise ValueError(f"K = {k} draft tokens > {MAX_K}")
    if draft_probs.dim() != 3 or draft_probs.shape[:2] != (b, k):
        raise ValueError(f"draft_probs must be ({b}, {k}, V); got {tuple(draft_probs.shape)}")
    v = draft_probs.shape[2]
    for name, tensor, shape in (("draft_probs", draft_probs, (b, k, v)),
                                ("target_probs", target_probs, (b, k, v)),
                                ("uniform_samples", uniform_samples, (b, k)),
                                ("exponential_noise", exponential_noise, (b, k, v))):  # fmt: skip
        if tensor.shape != shape or tensor.dtype != torch.float32:
            raise ValueError(
                f"{name} must be {shape} fp32; got {tuple(tensor.shape)} {tensor.dtype}"
            )
    if bonus_token_ids.shape != (b,) or bonus_token_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"bonus_token_ids must be ({b},) int32/int64; got "
                         f"{tuple(bonus_token_ids.shape)} {bonus_token_ids.dtype}")  # fmt: skip
    if block_v is None:
        block_v = min(triton.next_power_of_2(max(v, 1)), 2048)
    if block_v < 1 or block_v & (block_v - 1):
        raise ValueError(f"block_v must be a power of two; got {block_v}")
    device = draft_probs.device
    out = torch.empty((b, k + 1), dtype=torch.int64, device=device)
    num_acc = torch.empty((b,), dtype=torch.int32, device=device)
    if b == 0:
        return out, num_acc
    _spec_rejection_kernel[(b,)](
        draft_token_ids.contiguous(), draft_probs.contiguous(), target_probs.contiguous(),
        bonus_token_ids.contiguous(), uniform_samples.contiguous(),
        exponential_noise.contiguous(), out, num_acc,
        k, v,
        BLOCK_K=triton.next_power_of_2(max(k, 1)), BLOCK_V=block_v,
        num_warps=num_warps or min(max(block_v // 256, 1), 8),
    )  # fmt: skip
    return out, num_acc


def reference(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    uniform_samples: torch.Tensor,
    exponential_noise: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the same (output_token_ids, num_accepted) with a per-sequence Python loop."""
    b, k = draft_token_ids.shape
    out = torch.full((b, k + 1), -1, dtype=torch.int64)
    num_acc = torch.zeros((b,), dtype=torch.int32)
    for i in range(b):
        for j in range(k + 1):
            if j == k:
                out[i, j] = bonus_token_ids[i]
                break
            d = int(draft_token_ids[i, j])
            if uniform_samples[i, j] < target_probs[i, j, d] / draft_probs[i, j, d]:
                out[i, j] = d
                num_acc[i] += 1
                continue
            score = (target_probs[i, j] - draft_probs[i, j]).clamp(min=0) / exponential_noise[i, j]
            out[i, j] = torch.argmax(score)  # first index of the maximum
            break
    return out.to(draft_probs.device), num_acc.to(draft_probs.device)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return the launcher's inputs for ``shape = {"batch", "k", "vocab"}`` (drafts from p_draft).

    Target and draft distributions are softmaxes of correlated logits, so some drafts are accepted
    and some rejected; dtype is ignored (probabilities are fp32).
    """
    b, k, v = shape["batch"], shape["k"], shape["vocab"]
    base = 2.0 * torch.randn(b, k, v)
    draft = torch.softmax(base + 0.7 * torch.randn(b, k, v), dim=-1)
    target = torch.softmax(base + 0.7 * torch.randn(b, k, v), dim=-1)
    ids = torch.multinomial(draft.reshape(-1, v), 1).reshape(b, k)
    return {
        "draft_token_ids": ids.to(device),
        "draft_probs": draft.to(device),
        "target_probs": target.to(device),
        "bonus_token_ids": torch.randint(0, v, (b,)).to(device),
        "uniform_samples": torch.rand(b, k).to(device),
        "exponential_noise": (-torch.log1p(-torch.rand(b, k, v))).clamp(min=1e-20).to(device),
    }
