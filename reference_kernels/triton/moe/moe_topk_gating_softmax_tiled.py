"""
---
id: moe_topk_gating_softmax_tiled
title: MoE router, softmax over experts then top-k for a tile of tokens per program (2-D selection)
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, bf16, fp16]
bound: latency
techniques: [token-tile, fp32-softmax, iterative-argmax-topk, 2d-selection, optional-renormalize]
status: reference
launcher: moe_topk_gating_softmax_tiled
tuning:
  block_t: [8, 1, 2, 4, 16, 32]
  num_warps: [4, 1, 2, 8]
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
  - {device: NVIDIA H200, shape: moe_topk_gating_softmax/0, dtype: fp32, latency_us: 5.632, sol_fraction: 0.5284, date: '2026-12-04'}
---
Router of a mixture of experts with atrex30's moe_topk_gating_softmax semantics: probabilities =
softmax over the E experts in fp32, then the k largest per token in descending order (ties to the
lower expert id), weights fp32 and ids int32, optionally renormalised to sum to one over the k.
Program i owns BLOCK_T tokens as one (BLOCK_T, next_pow2(E)) register tile: the softmax is a row
max, exp2 and row sum over the tile, and each of the k selection rounds is a row max, the lowest
column holding it (a row min over a where), and a knock-out of that column, all on the whole tile;
the k results collect in a (BLOCK_T, next_pow2(k)) tile that is stored with one 2-D store per
output. Against moe_topk_gating_softmax (one token per program), one program serves BLOCK_T tokens:
the 4 to 8 warps get BLOCK_T * E lanes of work instead of E (128-256), which matters when E is small
against the warp count and T is large (prefill routing of 10^4..10^6 tokens). Bytes per token: E
logits read once, 8 B written per selected expert. Limits: BLOCK_T * next_pow2(E) values live in
registers (keep it <= ~8K, e.g. BLOCK_T = 8 at E = 1024); the k rounds are serial (k * E compares
per token); no grouped (DeepSeek group-limited) routing and no correction bias.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _topk_gating_tiled_kernel(
    # pointers
    logits_ptr,
    w_ptr,
    ids_ptr,
    # sizes
    T,
    E,
    TOP_K,
    # strides (elements)
    stride_lt,
    stride_le,
    # meta
    RENORMALIZE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)[None, :]
    row_mask = rows < T
    mask = row_mask[:, None] & (cols < E)
    x = tl.load(logits_ptr + rows.to(tl.int64)[:, None] * stride_lt + cols * stride_le,
                mask=mask, other=-float("inf")).to(tl.float32)  # fmt: skip
    x = tl.where(row_mask[:, None], x, 0.0)  # rows past T: finite, never stored
    e = tl.exp2((x - tl.max(x, axis=1)[:, None]) * 1.4426950408889634)
    p = e / tl.sum(e, axis=1)[:, None]
    p = tl.where(cols < E, p, -1.0)  # padded experts never win

    kcols = tl.arange(0, BLOCK_K)[None, :]
    weights = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.float32)
    ids = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.int32)
    for r in range(0, TOP_K):
        best = tl.max(p, axis=1)  # (BLOCK_T,)
        arg = tl.min(tl.where(p == best[:, None], cols, BLOCK_E), axis=1)  # lowest id on ties
        weights = tl.where(kcols == r, best[:, None], weights)
        ids = tl.where(kcols == r, arg[:, None], ids)
        p = tl.where(cols == arg[:, None], -1.0, p)
    if RENORMALIZE:
        weights = weights / tl.sum(weights, axis=1)[:, None]

    out = rows.to(tl.int64)[:, None] * TOP_K + kcols
    out_mask = row_mask[:, None] & (kcols < TOP_K)
    tl.store(w_ptr + out, weights, mask=out_mask)
    tl.store(ids_ptr + out, ids, mask=out_mask)


def moe_topk_gating_softmax_tiled(
    gating_output: torch.Tensor,
    top_k: int,
    renormalize: bool = False,
    *,
    block_t: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax each token's router logits and return its top-k weights and expert ids.

    Args:
        gating_output: (T, E) fp32/bf16/fp16 router logits, any strides.
        top_k: Experts per token, 1 <= top_k <= E.
        renormalize: Divide the k weights by their sum.
        block_t: Tokens per program (power of two); None keeps about 4K values per program.
        num_warps: Warps per program; None = 4.

    Returns:
        (topk_weights (T, top_k) fp32, topk_ids (T, top_k) int32), in descending weight order.

    Raises:
        ValueError: gating_output is not 2D, top_k is out of range, or block_t is not a power
            of two.
    """
    if gating_output.dim() != 2:
        raise ValueError(f"need gating_output (T, E); got {tuple(gating_output.shape)}")
    t, e = gating_output.shape
    if not 1 <= top_k <= e:
        raise ValueError(f"top_k must be in [1, {e}]; got {top_k}")
    block_e = triton.next_power_of_2(e)
    bt = block_t or max(1, min(32, 4096 // block_e, triton.next_power_of_2(max(t, 1))))
    if bt & (bt - 1):
        raise ValueError(f"block_t must be a power of two; got {bt}")
    device = gating_output.device
    weights = torch.empty((t, top_k), dtype=torch.float32, device=device)
    ids = torch.empty((t, top_k), dtype=torch.int32, device=device)
    if t == 0:
        return weights, ids
    _topk_gating_tiled_kernel[(triton.cdiv(t, bt),)](
        gating_output, weights, ids,
        t, e, top_k,
        gating_output.stride(0), gating_output.stride(1),
        RENORMALIZE=bool(renormalize), BLOCK_T=bt, BLOCK_E=block_e,
        BLOCK_K=triton.next_power_of_2(top_k), num_warps=num_warps or 4,
    )  # fmt: skip
    return weights, ids


def reference(
    gating_output: torch.Tensor, top_k: int, renormalize: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the fp32 softmax's top-k (weights, int32 ids), optionally renormalised."""
    probs = torch.softmax(gating_output.float(), dim=-1)
    weights, ids = probs.topk(top_k, dim=-1, largest=True, sorted=True)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "experts", "top_k"}`` (+ ``"renormalize"``), N(0, 1)."""
    logits = torch.randn(shape["tokens"], shape["experts"], device=device).to(dtype)
    return {
        "gating_output": logits,
        "top_k": shape["top_k"],
        "renormalize": shape.get("renormalize", False),
    }
