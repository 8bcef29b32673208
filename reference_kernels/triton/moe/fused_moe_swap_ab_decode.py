"""
---
id: fused_moe_swap_ab_decode
title: Decode fused MoE with swapped operands, expert weights on the MMA's M side, pairs on N
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [swap-ab, decode-specialised, no-sorting, expert-stationary, masked-pair-columns,
  fused-silu-and-mul, split-bf16-activation, routing-weight-epilogue, fp32-atomic-add,
  fp32-accumulate]
status: reference
launcher: fused_moe_swap_ab_decode
tuning:
  block_n: [64, 32, 128]
  block_k: [64, 32, 128]
  block_p: [16, 32, 64]
  num_warps: [4, 2, 8]
args:
  hidden_states: {shape: [T, H], dtypes: [bf16, fp16, fp32], aliases: [hidden, x]}
  w1: {shape: [E, 2*I, H], like: hidden_states, aliases: [w13, gate_up_proj]}
  w2: {shape: [E, H, I], like: hidden_states, aliases: [down_proj]}
  topk_weights: {shape: [T, TOPK], dtypes: [fp32], aliases: [routing_weights]}
  topk_ids: {shape: [T, TOPK], dtypes: [int32], aliases: [selected_experts]}
returns:
  - {name: out, shape: [T, H], dtype: fp32}
problem:
  shapes: [{tokens: 3, hidden: 40, inter: 100, experts: 4, top_k: 2}, {tokens: 9, hidden: 72, inter: 20, experts: 3, top_k: 3}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured:
  - {device: NVIDIA H200, shape: fused_moe/0, dtype: bf16, latency_us: 790.624, sol_fraction: 0.0605, date: '2026-12-03'}
---
atrex30's fused_moe (out = sum_j w_j * (SiLU(x W1g^T) * (x W1u^T)) W2^T per token, fp32 out and
fp32 intermediate) for decode, where each expert sees only 1 to 4 of the routed pairs. A normal
grouped GEMM puts the pairs on the MMA's M side (16 or 64 rows) and wastes most of it; here the
operands are swapped: each program owns one expert and BLOCK_N rows of its weight (the MMA's M
side, full) and computes W_tile @ X^T, whose narrow N side (BLOCK_P >= 16 columns) holds routed
pairs. No sorting or alignment pass: the program reads the T*k expert ids in BLOCK_P chunks, keeps
the columns whose pair chose its expert (others are masked to zero and skipped when a chunk has
none), so every expert's weights stream from HBM exactly once per chunk, which at decode is the
whole cost (2 B per weight element in bf16, 3*H*I per routed expert). Launch 1 writes SiLU(g) * u
in fp32 per pair; launch 2 computes W2_tile @ act^T, where the fp32 activation is split into a
bf16 high part and a bf16 remainder (two bf16 MMAs, about 16 mantissa bits, well inside fp32's
1e-4), scales each column by its routing weight and adds it into the fp32 output with atomics (a
token's k slots, repeats included, sum in no fixed order: not bitwise deterministic). Limits:
programs of experts nobody chose exit at once, but the grid is E x tiles; beyond a few dozen pairs
the weights are re-streamed per chunk, so prefill wants the sorted grouped GEMM.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _swap_ab_gate_up_kernel(
    x_ptr, w1_ptr, ids_ptr, act_ptr,
    NUM_PAIRS, H, INTER,
    stride_xt, stride_we, stride_wn, stride_wk,
    TOP_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    expert = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # rows of W1 (gate half)
    mask_n = offs_n < INTER
    offs_k = tl.arange(0, BLOCK_K)
    wg_base = w1_ptr + expert.to(tl.int64) * stride_we + offs_n[:, None].to(tl.int64) * stride_wn
    for p0 in range(0, NUM_PAIRS, BLOCK_P):
        pairs = p0 + tl.arange(0, BLOCK_P)
        ids = tl.load(ids_ptr + pairs, mask=pairs < NUM_PAIRS, other=-1)
        mine = ids == expert
        if tl.sum(mine.to(tl.int32), axis=0) > 0:
            token = (pairs // TOP_K).to(tl.int64)
            acc_g = tl.zeros((BLOCK_N, BLOCK_P), dtype=tl.float32)  # (weight rows, pairs)
            acc_u = tl.zeros((BLOCK_N, BLOCK_P), dtype=tl.float32)
            for k0 in range(0, H, BLOCK_K):
                kk = k0 + offs_k
                mask_w = mask_n[:, None] & (kk < H)[None, :]
                wg = tl.load(wg_base + kk[None, :] * stride_wk, mask=mask_w, other=0.0)
                wu = tl.load(wg_base + INTER * stride_wn + kk[None, :] * stride_wk, mask=mask_w,
                             other=0.0)  # fmt: skip
                # X^T (BLOCK_K, BLOCK_P): the pairs' token rows, other experts' columns zero
                xt = tl.load(x_ptr + token[None, :] * stride_xt + kk[:, None],
                             mask=mine[None, :] & (kk < H)[:, None], other=0.0)  # fmt: skip
                if UPCAST:
                    xt = xt.to(tl.float32)
                    acc_g = tl.dot(wg.to(tl.float32), xt, acc_g, input_precision="ieee")
                    acc_u = tl.dot(wu.to(tl.float32), xt, acc_u, input_precision="ieee")
                else:
                    acc_g = tl.dot(wg, xt, acc_g)  # weights fill the MMA's M side
                    acc_u = tl.dot(wu, xt, acc_u)
            act = acc_g * tl.sigmoid(acc_g) * acc_u  # fp32 SiLU(gate) * up
            act_ptrs = act_ptr + pairs[None, :].to(tl.int64) * INTER + offs_n[:, None]
            tl.store(act_ptrs, act, mask=mask_n[:, None] & mine[None, :])


@triton.jit
def _swap_ab_down_kernel(
    act_ptr, w2_ptr, ids_ptr, weights_ptr, out_ptr,
    NUM_PAIRS, H, INTER,
    stride_we, stride_wn, stride_wk, stride_ot,
    TOP_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr,
    SPLIT_BF16: tl.constexpr,
):  # fmt: skip
    expert = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # rows of W2 = output columns
    mask_n = offs_n < H
    offs_k = tl.arange(0, BLOCK_K)
    w_base = w2_ptr + expert.to(tl.int64) * stride_we + offs_n[:, None].to(tl.int64) * stride_wn
    for p0 in range(0, NUM_PAIRS, BLOCK_P):
        pairs = p0 + tl.arange(0, BLOCK_P)
        ids = tl.load(ids_ptr + pairs, mask=pairs < NUM_PAIRS, other=-1)
        mine = ids == expert
        if tl.sum(mine.to(tl.int32), axis=0) > 0:
            acc = tl.zeros((BLOCK_N, BLOCK_P), dtype=tl.float32)
            for k0 in range(0, INTER, BLOCK_K):
                kk = k0 + offs_k
                w = tl.load(w_base + kk[None, :] * stride_wk,
                            mask=mask_n[:, None] & (kk < INTER)[None, :], other=0.0)  # fmt: skip
                at = tl.load(act_ptr + pairs[None, :].to(tl.int64) * INTER + kk[:, None],
                             mask=mine[None, :] & (kk < INTER)[:, None], other=0.0)  # fmt: skip
                if SPLIT_BF16:
                    # fp32 activation = bf16 high part + bf16 remainder: two exact-product MMAs
                    hi = at.to(tl.bfloat16)
                    lo = (at - hi.to(tl.float32)).to(tl.bfloat16)
                    acc = tl.dot(w, hi, acc)
                    acc = tl.dot(w, lo, acc)
                else:
                    acc = tl.dot(w.to(tl.float32), at, acc, input_precision="ieee")
            rw = tl.load(weights_ptr + pairs, mask=mine, other=0.0).to(tl.float32)
            token = (pairs // TOP_K).to(tl.int64)
            out_ptrs = out_ptr + token[None, :] * stride_ot + offs_n[:, None]
            tl.atomic_add(out_ptrs, acc * rw[None, :], mask=mask_n[:, None] & mine[None, :],
                          sem="relaxed")  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def fused_moe_swap_ab_decode(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    block_n: int | None = None,
    block_k: int | None = None,
    block_p: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return sum_j topk_weights[:, j] * FFN_{topk_ids[:, j]}(hidden_states) in fp32.

    Args:
        hidden_states: (T, H) bf16/fp16/fp32, H contiguous.
        w1: (E, 2I, H) same dtype: gate rows [0, I), up rows [I, 2I).
        w2: (E, H, I) same dtype.
        topk_weights: (T, k) fp32 routing weights.
        topk_ids: (T, k) int32 experts in [0, E); repeats within a token add up.
        block_n: Weight rows per program (power of two >= 16); None = 64.
        block_k: Reduction step (power of two >= 16); None = 64.
        block_p: Routed pairs per chunk, the MMA's N side (power of two >= 16); None = 16.
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, H) fp32, contiguous.

    Raises:
        ValueError: The shapes, dtypes or tiles do not fit.
    """
    if hidden_states.dim() != 2 or w1.dim() != 3 or w2.dim() != 3 or topk_ids.dim() != 2:
        raise ValueError(
            f"need hidden_states (T, H), w1 (E, 2I, H), w2 (E, H, I), topk_ids (T, k); got "
            f"{tuple(hidden_states.shape)}, {tuple(w1.shape)}, {tuple(w2.shape)}, "
            f"{tuple(topk_ids.shape)}"
        )
    t, h = hidden_states.shape
    e, two_i, _ = w1.shape
    i = two_i // 2
    if w1.shape != (e, 2 * i, h) or w2.shape != (e, h, i) or topk_ids.shape != topk_weights.shape:
        raise ValueError(
            f"need w1 (E, 2I, {h}), w2 (E, {h}, I) and matching topk tensors; got w1 "
            f"{tuple(w1.shape)}, w2 {tuple(w2.shape)}, topk_weights {tuple(topk_weights.shape)}"
        )
    if topk_ids.shape[0] != t or topk_ids.dtype != torch.int32 or w1.dtype != hidden_states.dtype:
        raise ValueError(
            f"need int32 topk_ids with T={t} rows and w1 in hidden_states' dtype; got "
            f"{topk_ids.dtype}, {w1.dtype}"
        )
    cfg = {"block_n": block_n or 64, "block_k": block_k or 64, "block_p": block_p or 16}
    for name, value in cfg.items():
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot); got {value}")
    out = torch.zeros((t, h), dtype=torch.float32, device=hidden_states.device)  # atomic target
    if t == 0 or e == 0:
        return out
    x = hidden_states if hidden_states.stride(1) == 1 else hidden_states.contiguous()
    num_pairs = topk_ids.numel()
    ids = topk_ids.contiguous().view(-1)
    weights = topk_weights.contiguous().view(-1)
    act = torch.empty((num_pairs, i), dtype=torch.float32, device=x.device)
    upcast = _interpreting() or x.dtype == torch.float32  # fp32: exact fp32 dots, no TF32
    meta = {"TOP_K": topk_ids.shape[1], "BLOCK_N": cfg["block_n"], "BLOCK_K": cfg["block_k"],
            "BLOCK_P": cfg["block_p"], "num_warps": num_warps or 4}  # fmt: skip
    _swap_ab_gate_up_kernel[(e, triton.cdiv(i, cfg["block_n"]))](
        x, w1, ids, act, num_pairs, h, i,
        x.stride(0), w1.stride(0), w1.stride(1), w1.stride(2), UPCAST=upcast, **meta,
    )  # fmt: skip
    split = not upcast and w2.dtype == torch.bfloat16
    _swap_ab_down_kernel[(e, triton.cdiv(h, cfg["block_n"]))](
        act, w2, ids, weights, out, num_pairs, h, i,
        w2.stride(0), w2.stride(1), w2.stride(2), out.stride(0), SPLIT_BF16=split, **meta,
    )  # fmt: skip
    return out


def reference(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """Return the MoE output in fp32, one routed slot at a time."""
    x = hidden_states.float()
    inter = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for slot in range(topk_ids.shape[1]):
        expert = topk_ids[:, slot].long()
        gate_up = torch.einsum("th,tnh->tn", x, w1[expert].float())
        act = torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        out += torch.einsum("ti,thi->th", act, w2[expert].float()) * topk_weights[:, slot, None]
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return launcher inputs for ``{"tokens", "hidden", "inter", "experts", "top_k"}``.

    As atrex30: x ~ N * 0.1, w1 ~ N * H^-0.5, w2 ~ N * I^-0.5, weights a softmax of N(0, 1), ids
    uniform (repeats within a token possible).
    """
    t, h, i = shape["tokens"], shape["hidden"], shape["inter"]
    e, k = shape["experts"], shape["top_k"]
    return {
        "hidden_states": (torch.randn(t, h, device=device) * 0.1).to(dtype),
        "w1": (torch.randn(e, 2 * i, h, device=device) * h**-0.5).to(dtype),
        "w2": (torch.randn(e, h, i, device=device) * i**-0.5).to(dtype),
        "topk_weights": torch.softmax(torch.randn(t, k, device=device), dim=-1),
        "topk_ids": torch.randint(0, e, (t, k), dtype=torch.int32, device=device),
    }
