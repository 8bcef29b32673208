"""
---
id: moe_topk_gating_softmax_renorm_bitonic
title: MoE router, fp32 softmax then a bitonic top-k network (sort k-groups, merge pairwise)
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, bf16, fp16]
bound: latency
techniques: [row-per-program, fp32-softmax, bitonic-topk, packed-sort-keys, pairwise-merge,
  optional-renormalize]
status: reference
launcher: moe_topk_gating_softmax_renorm_bitonic
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
  shapes: [{tokens: 7, experts: 24, top_k: 5}, {tokens: 3, experts: 128, top_k: 8, renormalize: true}]
  dtypes: [fp32, bf16]
measured:
  - {device: NVIDIA H200, shape: moe_topk_gating_softmax/0, dtype: fp32, latency_us: 4.576, sol_fraction: 0.6294, date: '2026-12-03'}
---
atrex30's moe_topk_gating_softmax (fp32 softmax over E experts, the k largest in descending
order, ids int32; optional renormalisation over the k, off in atrex30) with a bitonic top-k
network instead of k serial argmax rounds or a full sort of the row. One program per token holds
the row; each probability becomes an int64 key (fp32 bits, which order like the values for p >=
0, in the high word; 2^31 - 1 - expert in the low word, so equal probabilities rank the lower
expert first; padding lanes get -1). The row is cut into groups of KP = next_power_of_2(k) keys
and every group is bitonic-sorted in registers (log KP (log KP + 1) / 2 compare-exchange stages,
even groups descending and odd ascending). Then log2(E / KP) merge rounds: the elementwise max of
a descending and an ascending neighbour is a bitonic sequence holding the top KP of both, and log
KP half-cleaner stages sort it again. So the network costs E * log KP * (log KP + log(E / KP))
compares, e.g. E = 256, k = 8: 3 * 8 stages of 128 exchanges, against k * E for argmax rounds and E
log^2 E / 2 for a full sort. Bytes: E logits read once, 8 B written per selected expert: latency
bound. Limits: k <= 16; the merge keeps the tensor shape fixed (partners are combined and broadcast
back) so registers hold the full E keys throughout; E <= 4096.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _compare_exchange(x, desc, G: tl.constexpr, KP: tl.constexpr, D: tl.constexpr):
    """Exchange key pairs at distance D inside each of G groups; desc: (G, KP // 2D, D) order."""
    y = tl.reshape(x, (G, KP // (2 * D), 2, D))
    sel = tl.arange(0, 2)[None, None, :, None]
    lo = tl.sum(tl.where(sel == 0, y, 0), axis=2)
    hi = tl.sum(tl.where(sel == 1, y, 0), axis=2)
    big = tl.maximum(lo, hi)
    small = tl.minimum(lo, hi)
    first = tl.where(desc, big, small)
    second = tl.where(desc, small, big)
    return tl.reshape(tl.where(sel == 0, first[:, :, None, :], second[:, :, None, :]), (G, KP))


@triton.jit
def _pair_desc(
    G: tl.constexpr, KP: tl.constexpr, D: tl.constexpr, SZ: tl.constexpr, SHIFT: tl.constexpr
):
    """Order of each exchange: group parity (bit SHIFT of g) xor the SZ-block parity inside it."""
    g = tl.arange(0, G)[:, None, None]
    pos = tl.arange(0, KP // (2 * D))[None, :, None] * (2 * D) + tl.arange(0, D)[None, None, :]
    return ((g >> SHIFT) & 1) == ((pos // SZ) & 1)


@triton.jit
def _gating_bitonic_kernel(
    logits_ptr,
    weights_ptr,  # fp32 (T, k)
    ids_ptr,  # int32 (T, k)
    E,
    stride_lt,
    stride_le,
    TOP_K: tl.constexpr,
    KP: tl.constexpr,  # group size, next_power_of_2(TOP_K) >= 2
    LOG_KP: tl.constexpr,
    G: tl.constexpr,  # BLOCK_E // KP groups
    LOG_G: tl.constexpr,
    RENORMALIZE: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, G * KP)
    mask = offs < E
    logits = tl.load(logits_ptr + token * stride_lt + offs * stride_le, mask=mask,
                     other=-float("inf")).to(tl.float32)  # fmt: skip
    num = tl.where(mask, tl.exp(logits - tl.max(logits, axis=0)), 0.0)
    probs = num / tl.sum(num, axis=0)
    bits = probs.to(tl.int32, bitcast=True).to(tl.int64)
    keys = tl.where(mask, (bits << 32) | (2147483647 - offs).to(tl.int64), -1)
    x = tl.reshape(keys, (G, KP))

    # 1) bitonic-sort every group: even groups descending, odd ascending
    for p in tl.static_range(1, LOG_KP + 1):
        for q in tl.static_range(p):
            x = _compare_exchange(x, _pair_desc(G, KP, (1 << p) >> (q + 1), 1 << p, 0), G, KP,
                                  (1 << p) >> (q + 1))  # fmt: skip
    # 2) merge rounds: max(descending, ascending neighbour) is bitonic with their top KP
    for r in tl.static_range(LOG_G):
        y = tl.reshape(x, (G >> (r + 1), 2, 1 << r, KP))
        m = tl.max(y, axis=1)
        x = tl.reshape(tl.broadcast_to(m[:, None, :, :], (G >> (r + 1), 2, 1 << r, KP)), (G, KP))
        for q in tl.static_range(LOG_KP):
            x = _compare_exchange(x, _pair_desc(G, KP, KP >> (q + 1), KP, r + 1), G, KP,
                                  KP >> (q + 1))  # fmt: skip
    top = tl.max(x, axis=0)  # every group now holds the same descending top KP

    offs_k = tl.arange(0, KP)
    mask_k = offs_k < TOP_K
    w = (top >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    ids = (2147483647 - (top & 2147483647)).to(tl.int32)
    if RENORMALIZE:
        w = w / tl.sum(tl.where(mask_k, w, 0.0), axis=0)
    tl.store(weights_ptr + token * TOP_K + offs_k, w, mask=mask_k)
    tl.store(ids_ptr + token * TOP_K + offs_k, ids, mask=mask_k)


def moe_topk_gating_softmax_renorm_bitonic(
    gating_output: torch.Tensor,
    top_k: int,
    renormalize: bool = False,
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the top-k softmax routing weights and expert ids of every token.

    Args:
        gating_output: (T, E) fp32/bf16/fp16 router logits, any strides, E <= 4096.
        top_k: Experts per token, 1 <= top_k <= min(16, E).
        renormalize: Divide the k weights by their sum.
        num_warps: Warps per program; None = 2 (4 from 512 experts).

    Returns:
        topk_weights: (T, top_k) fp32, descending per row.
        topk_ids: (T, top_k) int32, ties to the lower expert id.

    Raises:
        ValueError: The shape, dtype or top_k do not fit.
    """
    if gating_output.dim() != 2 or not gating_output.dtype.is_floating_point:
        raise ValueError(f"need float gating_output (T, E); got {tuple(gating_output.shape)}")
    t, e = gating_output.shape
    if not 1 <= e <= 4096:
        raise ValueError(f"need 1 <= E <= 4096 experts; got E={e}")
    if not 1 <= top_k <= min(16, e):
        raise ValueError(f"need 1 <= top_k <= min(16, E={e}); got top_k={top_k}")
    weights = torch.empty((t, top_k), dtype=torch.float32, device=gating_output.device)
    ids = torch.empty((t, top_k), dtype=torch.int32, device=gating_output.device)
    if t == 0:
        return weights, ids
    kp = max(2, triton.next_power_of_2(top_k))
    block_e = max(triton.next_power_of_2(e), kp)
    g = block_e // kp
    _gating_bitonic_kernel[(t,)](
        gating_output, weights, ids,
        e, gating_output.stride(0), gating_output.stride(1),
        TOP_K=top_k, KP=kp, LOG_KP=kp.bit_length() - 1, G=g, LOG_G=g.bit_length() - 1,
        RENORMALIZE=renormalize, num_warps=num_warps or (4 if e >= 512 else 2),
    )  # fmt: skip
    return weights, ids


def reference(
    gating_output: torch.Tensor, top_k: int, renormalize: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return fp32 softmax then torch.topk, optionally renormalised."""
    probs = torch.softmax(gating_output.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"gating_output", "top_k", "renormalize"}`` for ``{"tokens", "experts", "top_k"}``

    Logits ~ N(0, 1) in ``dtype``; ``renormalize`` comes from the shape (default False).
    """
    logits = torch.randn(shape["tokens"], shape["experts"], device=device).to(dtype)
    return {"gating_output": logits, "top_k": shape["top_k"],
            "renormalize": shape.get("renormalize", False)}  # fmt: skip
