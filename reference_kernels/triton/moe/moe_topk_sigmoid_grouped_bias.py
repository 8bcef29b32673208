"""
---
id: moe_topk_sigmoid_grouped_bias
title: DeepSeek-V3 router, sigmoid scores plus correction bias, group-limited top-k, scaled weights
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, bf16, fp16]
bound: memory
techniques: [row-per-program, sigmoid-scoring, correction-bias, group-limited-routing,
  top2-group-score, iterative-argmax-topk, 2d-group-tile, renormalize, fp32-accumulate]
status: reference
launcher: moe_topk_sigmoid_grouped_bias
tuning:
  num_warps: [2, 1, 4, 8]
args:
  gating_output:
    {shape: [T, E], dtypes: [fp32, bf16, fp16], layout: any, aliases: [router_logits, logits]}
  correction_bias: {shape: [E], dtypes: [float], aliases: [e_score_correction_bias, bias]}
  top_k: {type: int, aliases: [topk, k, num_experts_per_tok]}
  num_expert_group: {type: int, aliases: [n_group, num_groups]}
  topk_group: {type: int, aliases: [topk_groups]}
  renormalize: {type: bool, default: true, aliases: [normalize, norm_topk_prob]}
  routed_scaling_factor: {type: float, default: 1.0, aliases: [scaling_factor]}
returns:
  - {name: topk_weights, shape: [T, top_k], dtype: fp32}
  - {name: topk_ids, shape: [T, top_k], dtype: int32}
problem:
  shapes: [{tokens: 5, experts: 64, groups: 8, topk_group: 4, top_k: 8}, {tokens: 3, experts: 24, groups: 3, topk_group: 2, top_k: 5, renormalize: false, scale: 1.0}]
  dtypes: [fp32, bf16]
measured: []
---
Group-limited routing as DeepSeek-V3 defines it, in our own formulation: s = sigmoid(logits) (fp32);
the choice score c = s + bias, where the learned correction bias steers load balance but never
enters the weights; the E experts form G equal contiguous groups, each group scored by the sum of
its two largest c; the topk_group best groups survive and every expert outside them is excluded;
the top_k experts by c among the survivors are selected (descending c, ties to the lower id); their
weights are the UNBIASED s, divided by their sum when renormalize is set, then multiplied by
routed_scaling_factor. One program per token holds the row as a (G, E/G) register tile (both padded
to powers of two, padding at -inf), so the per-group top-2 is two row maxima (the first knocked out
by index), group selection is topk_group rounds of argmax over a G vector, and expert selection is
top_k rounds of a 2-D argmax over the masked tile; weights and ids are collected in small vectors
and stored once. Bytes per token: E logits (2-4 B each) in, 8 B per selected expert out; the work
is a few hundred compares, so the kernel is launch- and latency-bound for decode and
bandwidth-bound only at tens of thousands of tokens. Limits: E/G >= 2 (top-2 per group); G and
E/G up to 64 each and top_k <= 16 (unrolled rounds); one program per token keeps few warps busy at
E = 256 (use 1-2 warps).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_sigmoid_grouped_kernel(
    # pointers
    logits_ptr,  # (T, E)
    bias_ptr,  # (E,)
    weights_ptr,  # fp32 (T, TOP_K)
    ids_ptr,  # int32 (T, TOP_K)
    # sizes
    GROUPS,
    PER_GROUP,
    # strides (elements)
    stride_lt,
    stride_le,
    stride_wt,
    stride_it,
    # scalars
    scale,
    # meta
    TOP_K: tl.constexpr,
    TOPK_GROUP: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_TOPK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs_g = tl.arange(0, BLOCK_G)
    offs_e = tl.arange(0, BLOCK_E)
    valid = (offs_g < GROUPS)[:, None] & (offs_e < PER_GROUP)[None, :]
    expert = offs_g[:, None] * PER_GROUP + offs_e[None, :]  # (G, E/G) expert ids
    flat = offs_g[:, None] * BLOCK_E + offs_e[None, :]  # tile index for knock-outs
    logit = tl.load(logits_ptr + row * stride_lt + expert * stride_le, mask=valid, other=0.0)
    score = tl.sigmoid(logit.to(tl.float32))
    bias = tl.load(bias_ptr + expert, mask=valid, other=0.0).to(tl.float32)
    choice = tl.where(valid, score + bias, float("-inf"))

    # group score: the sum of the two largest choice scores of each group
    first = tl.max(choice, axis=1)
    first_at = tl.min(tl.where(choice == first[:, None], offs_e[None, :], BLOCK_E), axis=1)
    second = tl.max(tl.where(offs_e[None, :] == first_at[:, None], float("-inf"), choice), axis=1)
    group_score = tl.where(offs_g < GROUPS, first + second, float("-inf"))

    # keep the TOPK_GROUP best groups, exclude every expert of the others
    keep = offs_g < 0
    for _ in tl.static_range(TOPK_GROUP):
        best = tl.max(group_score, axis=0)
        best_g = tl.min(tl.where(group_score == best, offs_g, BLOCK_G), axis=0)
        keep = keep | (offs_g == best_g)
        group_score = tl.where(offs_g == best_g, float("-inf"), group_score)
    choice = tl.where(keep[:, None], choice, float("-inf"))

    # top_k experts by choice score; weights are the unbiased sigmoid scores
    offs_k = tl.arange(0, BLOCK_TOPK)
    top_w = tl.zeros((BLOCK_TOPK,), dtype=tl.float32)
    top_id = tl.zeros((BLOCK_TOPK,), dtype=tl.int32)
    for j in tl.static_range(TOP_K):
        best = tl.max(tl.max(choice, axis=1), axis=0)
        at = tl.min(tl.min(tl.where(choice == best, flat, BLOCK_G * BLOCK_E), axis=1), axis=0)
        hit = flat == at
        top_w = tl.where(offs_k == j, tl.sum(tl.sum(tl.where(hit, score, 0.0), 1), 0), top_w)
        top_id = tl.where(offs_k == j, tl.sum(tl.sum(tl.where(hit, expert, 0), 1), 0), top_id)
        choice = tl.where(hit, float("-inf"), choice)
    if RENORMALIZE:
        top_w = top_w / tl.sum(top_w, axis=0)
    mask_k = offs_k < TOP_K
    tl.store(weights_ptr + row * stride_wt + offs_k, top_w * scale, mask=mask_k)
    tl.store(ids_ptr + row * stride_it + offs_k, top_id, mask=mask_k)


def moe_topk_sigmoid_grouped_bias(
    gating_output: torch.Tensor,
    correction_bias: torch.Tensor,
    top_k: int,
    num_expert_group: int,
    topk_group: int,
    renormalize: bool = True,
    routed_scaling_factor: float = 1.0,
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return DeepSeek-V3 routing: (topk_weights fp32, topk_ids int32), both (T, top_k).

    Args:
        gating_output: (T, E) router logits, fp32/bf16/fp16, any strides.
        correction_bias: (E,) float bias added to the scores for selection only.
        top_k: Experts per token (1..16, within the kept groups' experts).
        num_expert_group: G, the number of equal contiguous expert groups (E % G == 0).
        topk_group: Groups kept per token (1..G).
        renormalize: Divide the selected scores by their sum.
        routed_scaling_factor: Multiplies the final weights.
        num_warps: Warps per program; None = 2.

    Returns:
        (topk_weights, topk_ids): fp32 and int32, (T, top_k), in descending choice score.

    Raises:
        ValueError: The shapes or the group parameters do not fit.
    """
    if gating_output.dim() != 2:
        raise ValueError(f"need gating_output (T, E); got {tuple(gating_output.shape)}")
    t, e = gating_output.shape
    if tuple(correction_bias.shape) != (e,):
        raise ValueError(f"need correction_bias ({e},); got {tuple(correction_bias.shape)}")
    g = num_expert_group
    if g < 1 or e % g or e // g < 2 or e // g > 64 or g > 64:
        raise ValueError(
            f"num_expert_group = {g} must divide E = {e} into groups of 2..64 experts (G <= 64)"
        )
    if not 1 <= topk_group <= g or not 1 <= top_k <= min(16, topk_group * (e // g)):
        raise ValueError(
            f"need 1 <= topk_group <= {g} and 1 <= top_k <= min(16, experts in the kept groups); "
            f"got topk_group = {topk_group}, top_k = {top_k}"
        )
    weights = torch.empty((t, top_k), dtype=torch.float32, device=gating_output.device)
    ids = torch.empty((t, top_k), dtype=torch.int32, device=gating_output.device)
    if t == 0:
        return weights, ids
    _moe_sigmoid_grouped_kernel[(t,)](
        gating_output, correction_bias.contiguous(), weights, ids,
        g, e // g,
        gating_output.stride(0), gating_output.stride(1), weights.stride(0), ids.stride(0),
        float(routed_scaling_factor),
        TOP_K=top_k, TOPK_GROUP=topk_group, RENORMALIZE=bool(renormalize),
        BLOCK_G=triton.next_power_of_2(g), BLOCK_E=triton.next_power_of_2(e // g),
        BLOCK_TOPK=triton.next_power_of_2(top_k), num_warps=num_warps or 2,
    )  # fmt: skip
    return weights, ids


def reference(
    gating_output: torch.Tensor,
    correction_bias: torch.Tensor,
    top_k: int,
    num_expert_group: int,
    topk_group: int,
    renormalize: bool = True,
    routed_scaling_factor: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the same routing with torch.topk (sorted, descending) in fp32."""
    t, e = gating_output.shape
    scores = torch.sigmoid(gating_output.float())
    choice = scores + correction_bias.float()[None, :]
    grouped = choice.view(t, num_expert_group, -1)
    group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
    kept = group_scores.topk(topk_group, dim=-1).indices
    group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, kept, True)
    expert_mask = group_mask[:, :, None].expand_as(grouped).reshape(t, e)
    ids = choice.masked_fill(~expert_mask, float("-inf")).topk(top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights * routed_scaling_factor, ids.to(torch.int32)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return router inputs for ``{"tokens", "experts", "groups", "topk_group", "top_k"}``.

    Logits ~ N(0, 1) in ``dtype``, bias ~ N(0, 0.1) fp32; optional ``"scale"`` (default 2.5, as
    DeepSeek-V3) and ``"renormalize"`` (default True).
    """
    t, e = shape["tokens"], shape["experts"]
    return {
        "gating_output": torch.randn(t, e, device=device).to(dtype),
        "correction_bias": torch.randn(e, device=device) * 0.1,
        "top_k": shape["top_k"],
        "num_expert_group": shape["groups"],
        "topk_group": shape["topk_group"],
        "renormalize": shape.get("renormalize", True),
        "routed_scaling_factor": shape.get("scale", 2.5),
    }
