"""
---
id: moe_topk_gating_softmax_sorted
title: MoE router, fp32 softmax then one bitonic tl.sort of packed (probability, expert) keys
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, bf16, fp16]
bound: latency
techniques: [row-per-program, fp32-softmax, packed-key-sort, bitonic-sort-topk,
  optional-renormalize]
status: reference
launcher: moe_topk_gating_softmax_sorted
tuning:
  num_warps: [2, 1, 4, 8]
args:
  gating_output:
    {shape: [T, E], dtypes: [fp32, bf16, fp16], layout: any, aliases: [router_logits, logits]}
  top_k: {type: int, aliases: [topk, k, num_experts_per_tok]}
  renormalize: {type: bool, default: false, aliases: [normalize, norm_topk_prob]}
returns:
  - {name: topk_weights, shape: [T, top_k], dtype: fp32}
  - {name: topk_ids, shape: [T, top_k], dtype: int32}
problem:
  shapes: [{tokens: 7, experts: 24, top_k: 5}, {tokens: 3, experts: 160, top_k: 8, renormalize: true}]
  dtypes: [fp32, bf16]
measured:
  - {device: NVIDIA H200, shape: moe_topk_gating_softmax/0, dtype: fp32, latency_us: 4.352, sol_fraction: 0.6324, date: '2026-12-04'}
---
Router top-k without k serial reductions: one program per token loads its (E,) logits, takes an
fp32 softmax (max-subtracted exp, one division), then packs every expert into one int64 key, the
probability's IEEE bits (monotonic for non-negative floats) in the high word and BLOCK_E - 1 - e in
the low word, so one descending tl.sort (a bitonic network, log2(E)^2 / 2 compare-exchange stages
in registers) orders by probability with ties going to the lower expert id. Padded lanes get key -1
and sort last. The first k lanes of the sorted vector are unpacked (bit-cast back to fp32, id from
the low word) and stored with a lane mask, so any k <= E costs the same. Bytes per token: E logits
read once, 8 B written per selected expert. When it wins: large k (k >= 8) or when k varies, where
the iterative design's k full-row max reductions add up; the sort's cost is fixed by E. Limits: the
sort is over next_power_of_2(E) int64 lanes in registers (fine to a few thousand experts); for k of
1 or 2 the iterative argmax is cheaper; no grouped (DeepSeek) routing and no bias term.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_topk_sorted_kernel(
    logits_ptr,  # (T, E)
    weights_ptr,  # fp32 (T, k), contiguous
    ids_ptr,  # int32 (T, k), contiguous
    E,
    TOP_K,
    stride_lt,
    stride_le,
    BLOCK_E: tl.constexpr,  # next_power_of_2(E)
    RENORMALIZE: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    offs_e = tl.arange(0, BLOCK_E)
    mask_e = offs_e < E
    logits = tl.load(logits_ptr + token * stride_lt + offs_e * stride_le, mask=mask_e,
                     other=-float("inf")).to(tl.float32)  # fmt: skip
    row_max = tl.max(logits, axis=0)
    num = tl.where(mask_e, tl.exp(logits - row_max), 0.0)
    probs = num / tl.sum(num, axis=0)

    # key = bits(prob) << 32 | (BLOCK_E - 1 - e): descending key = descending prob, then lower id
    bits = probs.to(tl.int32, bitcast=True).to(tl.int64)
    keys = (bits << 32) | (BLOCK_E - 1 - offs_e).to(tl.int64)
    keys = tl.where(mask_e, keys, -1)
    keys = tl.sort(keys, descending=True)

    top_w = (keys >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    top_i = (BLOCK_E - 1 - (keys & 0xFFFFFFFF)).to(tl.int32)
    mask_k = offs_e < TOP_K
    if RENORMALIZE:
        top_w = top_w / tl.sum(tl.where(mask_k, top_w, 0.0), axis=0)
    tl.store(weights_ptr + token * TOP_K + offs_e, top_w, mask=mask_k)
    tl.store(ids_ptr + token * TOP_K + offs_e, top_i, mask=mask_k)


def moe_topk_gating_softmax_sorted(
    gating_output: torch.Tensor,
    top_k: int,
    renormalize: bool = False,
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the top-k softmax routing weights and expert ids of every token.

    Args:
        gating_output: (T, E) fp32/bf16/fp16 router logits, any strides.
        top_k: Experts per token, 1 <= top_k <= E.
        renormalize: Divide the k weights by their sum.
        num_warps: Warps per program; None picks one warp per 128 experts (2 to 8).

    Returns:
        topk_weights: (T, top_k) fp32, descending per row.
        topk_ids: (T, top_k) int32, ties to the lower expert id.

    Raises:
        ValueError: The shape, dtype or top_k do not fit.
    """
    if gating_output.dim() != 2 or not gating_output.dtype.is_floating_point:
        raise ValueError(
            f"need float gating_output (T, E); got {tuple(gating_output.shape)} "
            f"{gating_output.dtype}"
        )
    t, e = gating_output.shape
    if not 1 <= top_k <= e:
        raise ValueError(f"need 1 <= top_k <= E={e}; got top_k={top_k}")
    weights = torch.empty((t, top_k), dtype=torch.float32, device=gating_output.device)
    ids = torch.empty((t, top_k), dtype=torch.int32, device=gating_output.device)
    if t == 0:
        return weights, ids
    warps = num_warps or max(2, min(8, triton.cdiv(e, 128)))
    _moe_topk_sorted_kernel[(t,)](
        gating_output, weights, ids, e, top_k,
        gating_output.stride(0), gating_output.stride(1),
        BLOCK_E=triton.next_power_of_2(e), RENORMALIZE=renormalize, num_warps=warps,
    )  # fmt: skip
    return weights, ids


def reference(
    gating_output: torch.Tensor, top_k: int, renormalize: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return torch.topk of the fp32 softmax (sorted), optionally renormalised over the k."""
    probs = torch.softmax(gating_output.float(), dim=-1)
    weights, ids = probs.topk(top_k, dim=-1, largest=True, sorted=True)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "experts", "top_k"}`` (+ optional ``"renormalize"``).

    Logits ~ N(0, 1) in ``dtype`` (continuous, so ties have probability zero in fp32).
    """
    logits = torch.randn(shape["tokens"], shape["experts"], device=device).to(dtype)
    return {"gating_output": logits, "top_k": shape["top_k"],
            "renormalize": shape.get("renormalize", False)}  # fmt: skip
