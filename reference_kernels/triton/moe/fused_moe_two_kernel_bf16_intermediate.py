"""
---
id: fused_moe_two_kernel_bf16_intermediate
title: Two-kernel fused MoE on token-order tiles with an in-tile expert loop, bf16 intermediate
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [no-sorting, token-order-tiles, in-tile-expert-loop, masked-rows, fused-silu-and-mul,
  bf16-intermediate, routing-weight-epilogue, weighted-scatter-add, fp32-atomic-add,
  fp32-accumulate]
status: reference
launcher: fused_moe_two_kernel_bf16_intermediate
tuning:
  round_act: [true, false]
  block_m: [32, 16, 64]
  block_n: [64, 32, 128]
  block_k: [64, 32, 128]
  num_warps: [4, 8]
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
  atol: 0.0001
  rtol: 0.01
measured:
  - {device: NVIDIA H200, shape: fused_moe/0, dtype: bf16, latency_us: 662.912, sol_fraction: 0.0722, date: '2026-12-03'}
---
Fused MoE (out = sum_j w_j * (SiLU(x W1g^T) * (x W1u^T)) W2^T, fp32 out) in exactly two launches
and no routing pass at all. The T*k (token, slot) pairs stay in their natural token-major order and
are cut into tiles of BLOCK_M consecutive pairs. Kernel 1, per (tile, BLOCK_N columns of I), loops
over the distinct experts present in the tile (next expert = the smallest id above the current
one): for each it runs the gate and up MMAs on the tile with the other rows masked to zero, and
keeps the rows of that expert; the epilogue applies SiLU(g) * u in fp32 and writes the
intermediate once, rounded to bf16 when round_act is on (the default: half the bytes of the
intermediate, and the down GEMM is then a single bf16 MMA) or in fp32 when off. Kernel 2 does the
same expert loop for the down projection (the fp32 intermediate is split into bf16 high and low
parts: two exact-product MMAs), scales each row by its routing weight and scatter-adds the rows
into out[token] with fp32 atomics. When it wins: few experts (E = 8 to 16, Mixtral-like) with many
tokens, where a tile holds most experts anyway and skipping the align/sort launches and the
permuted copies saves more than the masked MMA work costs. Limits: a tile with d distinct experts
does d passes over its weights (cost grows with E / k, so E = 128+ wants the sorted grouped GEMM);
the bf16 intermediate errs ~2^-9 relatively: atrex30's fused_moe demands fp32 intermediates (1e-4),
so pass round_act=False there; fp32 atomics are not bitwise deterministic.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gate_up_kernel(
    x_ptr, w1_ptr, ids_ptr, act_ptr,
    NUM_PAIRS, E, H, INTER,
    stride_xt, stride_we, stride_wn, stride_wk,
    TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # pairs, token-major order
    mask_m = offs_m < NUM_PAIRS
    ids = tl.load(ids_ptr + offs_m, mask=mask_m, other=E)
    token = (offs_m // TOP_K).to(tl.int64)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < INTER
    offs_k = tl.arange(0, BLOCK_K)
    act = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    expert = tl.min(ids, axis=0)
    while expert < E:  # one pass per distinct expert of the tile
        mine = ids == expert
        wg_base = (w1_ptr + expert.to(tl.int64) * stride_we
                   + offs_n[None, :].to(tl.int64) * stride_wn)  # fmt: skip
        acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, H, BLOCK_K):
            kk = k0 + offs_k
            mask_k = kk < H
            x = tl.load(x_ptr + token[:, None] * stride_xt + kk[None, :],
                        mask=mine[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
            w_mask = mask_k[:, None] & mask_n[None, :]
            wg = tl.load(wg_base + kk[:, None] * stride_wk, mask=w_mask, other=0.0)
            wu = tl.load(wg_base + INTER * stride_wn + kk[:, None] * stride_wk, mask=w_mask,
                         other=0.0)  # fmt: skip
            if UPCAST:
                x = x.to(tl.float32)
                acc_g = tl.dot(x, wg.to(tl.float32), acc_g, input_precision="ieee")
                acc_u = tl.dot(x, wu.to(tl.float32), acc_u, input_precision="ieee")
            else:
                acc_g = tl.dot(x, wg, acc_g)
                acc_u = tl.dot(x, wu, acc_u)
        act = tl.where(mine[:, None], acc_g * tl.sigmoid(acc_g) * acc_u, act)
        expert = tl.min(tl.where(ids > expert, ids, E), axis=0)
    act_ptrs = act_ptr + offs_m[:, None].to(tl.int64) * INTER + offs_n[None, :]
    tl.store(act_ptrs, act.to(act_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _down_scatter_kernel(
    act_ptr, w2_ptr, ids_ptr, weights_ptr, out_ptr,
    NUM_PAIRS, E, H, INTER,
    stride_we, stride_wn, stride_wk, stride_ot,
    TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    MODE: tl.constexpr,  # 0: fp32 ieee dot, 1: 16-bit act and weights, 2: split fp32 act to bf16
):  # fmt: skip
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < NUM_PAIRS
    ids = tl.load(ids_ptr + offs_m, mask=mask_m, other=E)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < H
    offs_k = tl.arange(0, BLOCK_K)
    y = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    expert = tl.min(ids, axis=0)
    while expert < E:
        mine = ids == expert
        w_base = (w2_ptr + expert.to(tl.int64) * stride_we
                  + offs_n[None, :].to(tl.int64) * stride_wn)  # fmt: skip
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, INTER, BLOCK_K):
            kk = k0 + offs_k
            mask_k = kk < INTER
            a = tl.load(act_ptr + offs_m[:, None].to(tl.int64) * INTER + kk[None, :],
                        mask=mine[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
            w = tl.load(w_base + kk[:, None] * stride_wk, mask=mask_k[:, None] & mask_n[None, :],
                        other=0.0)  # fmt: skip
            if MODE == 1:
                acc = tl.dot(a, w, acc)  # bf16 intermediate x bf16 weights, one MMA
            elif MODE == 2:
                hi = a.to(tl.bfloat16)
                acc = tl.dot(hi, w, acc)
                acc = tl.dot((a - hi.to(tl.float32)).to(tl.bfloat16), w, acc)
            else:
                acc = tl.dot(a.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
        y = tl.where(mine[:, None], acc, y)
        expert = tl.min(tl.where(ids > expert, ids, E), axis=0)
    rw = tl.load(weights_ptr + offs_m, mask=mask_m, other=0.0).to(tl.float32)
    token = (offs_m // TOP_K).to(tl.int64)
    tl.atomic_add(out_ptr + token[:, None] * stride_ot + offs_n[None, :], y * rw[:, None],
                  mask=mask_m[:, None] & mask_n[None, :], sem="relaxed")  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def fused_moe_two_kernel_bf16_intermediate(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    round_act: bool = True,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return sum_j topk_weights[:, j] * FFN_{topk_ids[:, j]}(hidden_states) in fp32.

    Args:
        hidden_states: (T, H) bf16/fp16/fp32, H contiguous.
        w1: (E, 2I, H) same dtype: gate rows [0, I), up rows [I, 2I).
        w2: (E, H, I) same dtype.
        topk_weights: (T, k) fp32 routing weights.
        topk_ids: (T, k) int32 experts in [0, E); repeats within a token add up.
        round_act: Store the intermediate in bf16 (True) or fp32 (False, fp32-exact results).
        block_m: Pairs per tile (power of two >= 16); None = 32.
        block_n: Output columns per program (power of two >= 16); None = 64.
        block_k: Reduction step (power of two >= 16); None = 64.
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
    if topk_ids.shape[0] != t or topk_ids.dtype != torch.int32:
        raise ValueError(f"need int32 topk_ids with T={t} rows; got {topk_ids.dtype}")
    cfg = {"block_m": block_m or 32, "block_n": block_n or 64, "block_k": block_k or 64}
    for name, value in cfg.items():
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot); got {value}")
    out = torch.zeros((t, h), dtype=torch.float32, device=hidden_states.device)  # atomic target
    n = topk_ids.numel()
    if n == 0:
        return out
    x = hidden_states if hidden_states.stride(1) == 1 else hidden_states.contiguous()
    ids = topk_ids.contiguous().view(-1)
    act = torch.empty((n, i), dtype=torch.bfloat16 if round_act else torch.float32, device=x.device)
    upcast = _interpreting() or x.dtype == torch.float32  # fp32: exact fp32 dots, no TF32
    meta = {"TOP_K": topk_ids.shape[1], "BLOCK_M": cfg["block_m"], "BLOCK_N": cfg["block_n"],
            "BLOCK_K": cfg["block_k"], "num_warps": num_warps or 4}  # fmt: skip
    tiles = triton.cdiv(n, cfg["block_m"])
    _gate_up_kernel[(tiles, triton.cdiv(i, cfg["block_n"]))](
        x, w1, ids, act, n, e, h, i,
        x.stride(0), w1.stride(0), w1.stride(1), w1.stride(2), UPCAST=upcast, **meta,
    )  # fmt: skip
    bf16_w = w2.dtype == torch.bfloat16 and not upcast
    mode = (1 if round_act else 2) if bf16_w else 0
    _down_scatter_kernel[(tiles, triton.cdiv(h, cfg["block_n"]))](
        act, w2, ids, topk_weights.contiguous().view(-1), out, n, e, h, i,
        w2.stride(0), w2.stride(1), w2.stride(2), out.stride(0), MODE=mode, **meta,
    )  # fmt: skip
    return out


def reference(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """Return the MoE output in fp32 with an fp32 intermediate (round_act=False's semantics)."""
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
    """Return inputs for ``{"tokens", "hidden", "inter", "experts", "top_k"}``, atrex30 scales."""
    t, h, i = shape["tokens"], shape["hidden"], shape["inter"]
    e, k = shape["experts"], shape["top_k"]
    return {
        "hidden_states": (torch.randn(t, h, device=device) * 0.1).to(dtype),
        "w1": (torch.randn(e, 2 * i, h, device=device) * h**-0.5).to(dtype),
        "w2": (torch.randn(e, h, i, device=device) * i**-0.5).to(dtype),
        "topk_weights": torch.softmax(torch.randn(t, k, device=device), dim=-1),
        "topk_ids": torch.randint(0, e, (t, k), dtype=torch.int32, device=device),
    }
