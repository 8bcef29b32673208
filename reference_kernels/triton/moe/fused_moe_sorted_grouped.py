"""
---
id: fused_moe_sorted_grouped
title: Fused MoE over expert-sorted blocks, gate/up GEMM with SiLU-mul epilogue, weighted down GEMM
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [moe-align-block-size, grouped-gemm, gather-rows, fused-silu-and-mul,
  routing-weight-epilogue, deterministic-combine, fp32-accumulate]
status: reference
launcher: fused_moe_sorted_grouped
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [64, 32, 128]
  block_k: [64, 32, 128]
  num_warps: [4, 8]
  num_stages: [3, 2, 4]
args:
  hidden: {shape: [T, H], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, x]}
  w1: {shape: [E, 2*I, H], like: hidden, aliases: [w13, gate_up_proj]}
  w2: {shape: [E, H, I], like: hidden, aliases: [down_proj]}
  topk_weights: {shape: [T, TOPK], dtypes: [fp32], aliases: [routing_weights]}
  topk_ids: {shape: [T, TOPK], dtypes: [int32], aliases: [selected_experts]}
returns:
  - {name: out, shape: [T, H], dtype: fp32}
problem:
  shapes: [{tokens: 5, hidden: 64, inter: 32, experts: 4, top_k: 2}, {tokens: 1, hidden: 48, inter: 40, experts: 8, top_k: 3}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.01
  rtol: 0.01
measured: []
---
Prefill-style fused MoE out (T, H) fp32 = sum over the k routed slots of w * (SiLU(x W1g^T) * (x
W1u^T)) W2^T, in six launches. Alignment: a histogram kernel adds per-chunk expert counts
atomically, a one-program kernel turns them into padded offsets (no host sync, no torch math), and a
scatter kernel claims slots with atomic cursors (order within an expert is arbitrary, which is fine:
every slot keeps its own output row); a GEMM block takes its expert from its first slot. Gate/up:
one program per (block of BLOCK_M sorted slots, BLOCK_N intermediate columns) gathers its rows of x,
runs two tl.dot chains against the gate and up halves of that block's expert W1 sharing each x tile,
and applies SiLU(g) * u in fp32 in the epilogue, writing the activation once in the input dtype
(rows in sorted order). Down: the same grid over H multiplies by W2 of the block's expert and scales
by the routing weight; each slot owns a row of an fp32 (T*k, H) buffer, and a combine kernel sums
each token's k rows in a fixed order (deterministic, duplicated experts in a token just add). Bytes:
each expert's weights stream once per row block (2 B/elt bf16), x is gathered k times, the
activation makes one round trip (2 B/elt) and the slot buffer one (4 B/elt). Limits: padding wastes
up to BLOCK_M - 1 rows per expert (decode batches waste most of each block; see the token-loop
sibling), blocks past num_tokens_post_pad exit early but are launched, and no split-K or persistent
scheduling. The activation rounded to the input dtype and the bf16 MMAs leave a relative error of
about 1e-3, outside atrex30 fused_moe's fp32 tolerance (1e-4), which asks for fp32 intermediates.
"""

import os

import torch
import triton
import triton.language as tl

ALIGN_CHUNK = 256  # routed pairs per program of the count/scatter kernels


@triton.jit
def _fused_moe_count_kernel(ids_ptr, counts_ptr, NUM_PAIRS, E, CHUNK: tl.constexpr,
                            BLOCK_E: tl.constexpr):  # fmt: skip
    # per-chunk histogram (masked lanes fall in spare bin E), then one atomic per non-empty expert
    offs = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    ids = tl.load(ids_ptr + offs, mask=offs < NUM_PAIRS, other=E)
    hist = tl.histogram(ids, BLOCK_E)
    offs_e = tl.arange(0, BLOCK_E)
    tl.atomic_add(counts_ptr + offs_e, hist, mask=(offs_e < E) & (hist > 0))


@triton.jit
def _fused_moe_scatter_kernel(ids_ptr, cursor_ptr, sorted_ptr, NUM_PAIRS, CHUNK: tl.constexpr):
    # each pair claims the next free slot of its expert; lanes of one expert get distinct slots
    offs = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < NUM_PAIRS
    ids = tl.load(ids_ptr + offs, mask=mask, other=0)
    slot = tl.atomic_add(cursor_ptr + ids, 1, mask=mask)
    tl.store(sorted_ptr + slot, offs, mask=mask)


@triton.jit
def _fused_moe_offsets_kernel(counts_ptr, cursor_ptr, E, BLOCK_M: tl.constexpr,
                              BLOCK_E: tl.constexpr):  # fmt: skip
    # each expert's first slot: the exclusive prefix sum of the counts padded to BLOCK_M
    offs_e = tl.arange(0, BLOCK_E)
    counts = tl.load(counts_ptr + offs_e, mask=offs_e < E, other=0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    tl.store(cursor_ptr + offs_e, tl.cumsum(padded, 0) - padded, mask=offs_e < E)


@triton.jit
def _fused_moe_gate_up_kernel(
    # pointers
    x_ptr,  # (T, H) hidden states
    w1_ptr,  # (E, 2I, H): rows [0, I) gate, [I, 2I) up
    act_ptr,  # (max_len, I) activation, rows in sorted-slot order
    sorted_ptr,  # int32 (max_len,) flat pair index or sentinel NUM_PAIRS
    ids_ptr,  # int32 (T * k,) expert of each routed pair
    # sizes
    NUM_PAIRS,
    H,
    INTER,
    # strides (elements)
    stride_xt,
    stride_xh,
    stride_we,
    stride_wn,
    stride_wk,
    stride_am,
    stride_an,
    # meta
    TOP_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_b = tl.program_id(0)
    pid_n = tl.program_id(1)
    # a block's first slot is a real pair (naming its expert) unless the block is all padding
    first = tl.load(sorted_ptr + pid_b * BLOCK_M)
    if first >= NUM_PAIRS:
        return
    expert = tl.load(ids_ptr + first).to(tl.int64)

    # the block's sorted slots -> token rows to gather (padding slots are masked)
    offs_m = pid_b * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + offs_m)
    mask_m = pair < NUM_PAIRS
    token = (pair // TOP_K).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < INTER
    offs_k = tl.arange(0, BLOCK_K)

    x_ptrs = x_ptr + token[:, None] * stride_xt + offs_k[None, :] * stride_xh
    wg_ptrs = (w1_ptr + expert * stride_we + offs_n[None, :].to(tl.int64) * stride_wn
               + offs_k[:, None] * stride_wk)  # fmt: skip
    wu_ptrs = wg_ptrs + INTER * stride_wn  # the up half starts I rows further

    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32 accumulators
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, H, BLOCK_K):
        mask_k = offs_k < H - k_start
        x = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        wg = tl.load(wg_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        wu = tl.load(wu_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            x = x.to(tl.float32)
            acc_g = tl.dot(x, wg.to(tl.float32), acc_g, input_precision="ieee")
            acc_u = tl.dot(x, wu.to(tl.float32), acc_u, input_precision="ieee")
        else:
            acc_g = tl.dot(x, wg, acc_g)  # one x tile feeds both MMAs
            acc_u = tl.dot(x, wu, acc_u)
        x_ptrs += BLOCK_K * stride_xh
        wg_ptrs += BLOCK_K * stride_wk
        wu_ptrs += BLOCK_K * stride_wk

    # epilogue: SiLU(gate) * up in fp32, one rounding to the activation dtype
    act = acc_g * tl.sigmoid(acc_g) * acc_u
    act_ptrs = act_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_n[None, :] * stride_an
    tl.store(act_ptrs, act.to(act_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _fused_moe_down_kernel(
    # pointers
    act_ptr,  # (max_len, I) activation, sorted-slot rows
    w2_ptr,  # (E, H, I)
    weights_ptr,  # fp32 (T * k,) routing weights
    slot_out_ptr,  # fp32 (T * k, H) weighted expert output per routed slot
    sorted_ptr,
    ids_ptr,
    # sizes
    NUM_PAIRS,
    H,
    INTER,
    # strides (elements)
    stride_am,
    stride_ak,
    stride_we,
    stride_wn,
    stride_wk,
    stride_sm,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_b = tl.program_id(0)
    pid_n = tl.program_id(1)
    # a block's first slot is a real pair (naming its expert) unless the block is all padding
    first = tl.load(sorted_ptr + pid_b * BLOCK_M)
    if first >= NUM_PAIRS:
        return
    expert = tl.load(ids_ptr + first).to(tl.int64)

    offs_m = pid_b * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + offs_m)
    mask_m = pair < NUM_PAIRS
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < H
    offs_k = tl.arange(0, BLOCK_K)

    a_ptrs = act_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = (w2_ptr + expert * stride_we + offs_n[None, :].to(tl.int64) * stride_wn
              + offs_k[:, None] * stride_wk)  # fmt: skip
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32 accumulation
    for k_start in range(0, INTER, BLOCK_K):
        mask_k = offs_k < INTER - k_start
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST:
            acc = tl.dot(a.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, w, acc)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk

    # epilogue: routing weight, then each slot's own row (no atomics, no races)
    weight = tl.load(weights_ptr + pair, mask=mask_m, other=0.0)
    acc = acc * weight[:, None]
    out_ptrs = slot_out_ptr + pair[:, None].to(tl.int64) * stride_sm + offs_n[None, :]
    tl.store(out_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _fused_moe_combine_kernel(slot_out_ptr, out_ptr, H, TOP_K: tl.constexpr,
                              BLOCK_H: tl.constexpr):  # fmt: skip
    # out[t] = sum_j slot_out[t * k + j], in slot order (deterministic)
    token = tl.program_id(0).to(tl.int64)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    total = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        total += tl.load(slot_out_ptr + (token * TOP_K + j) * H + offs_h, mask=mask_h, other=0.0)
    tl.store(out_ptr + token * H + offs_h, total, mask=mask_h)


def _launch_config(num_pairs: int, num_experts: int) -> dict[str, int]:
    """Return tiles: BLOCK_M follows the mean slots per expert (less padding for small batches)."""
    per_expert = num_pairs / max(num_experts, 1)
    if per_expert <= 16:
        return {"block_m": 16, "block_n": 64, "block_k": 128, "num_warps": 4, "num_stages": 3}
    if per_expert <= 64:
        return {"block_m": 64, "block_n": 64, "block_k": 64, "num_warps": 4, "num_stages": 3}
    # two fp32 accumulators (gate and up): 64 x 128 each keeps them at 64 registers a thread
    return {"block_m": 64, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 3}


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _align(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, ...]:
    """Return (sorted pair ids padded per expert to block_m, flat expert ids, block count)."""
    device = topk_ids.device
    ids = topk_ids.contiguous().view(-1)
    num_pairs = ids.numel()
    max_len = num_pairs + min(num_experts, num_pairs) * (block_m - 1)
    grid = (triton.cdiv(num_pairs, ALIGN_CHUNK),)
    counts = torch.zeros(num_experts, dtype=torch.int32, device=device)
    _fused_moe_count_kernel[grid](ids, counts, num_pairs, num_experts, CHUNK=ALIGN_CHUNK,
                                  BLOCK_E=triton.next_power_of_2(num_experts + 1))  # fmt: skip
    cursor = torch.empty(num_experts, dtype=torch.int32, device=device)
    _fused_moe_offsets_kernel[(1,)](counts, cursor, num_experts, BLOCK_M=block_m,
                                   BLOCK_E=triton.next_power_of_2(num_experts))  # fmt: skip
    sorted_ids = torch.full((max_len,), num_pairs, dtype=torch.int32, device=device)
    _fused_moe_scatter_kernel[grid](ids, cursor, sorted_ids, num_pairs, CHUNK=ALIGN_CHUNK)
    return sorted_ids, ids, triton.cdiv(max_len, block_m)


def fused_moe_sorted_grouped(
    hidden: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return the MoE output sum_j w_j * FFN_{e_j}(x) for every token.

    Args:
        hidden: (T, H) bf16/fp16/fp32 token activations.
        w1: (E, 2I, H) same dtype: gate rows [0, INTER), up rows [INTER, 2I).
        w2: (E, H, I) same dtype.
        topk_weights: (T, k) fp32 routing weights.
        topk_ids: (T, k) int32 experts in [0, E); repeats within a token add up.
        block_m: Sorted slots per block (also the alignment block size); None picks by load.
        block_n: Output columns per program (power of two >= 16); None picks.
        block_k: Reduction step (power of two >= 16); None picks.
        num_warps: Warps per GEMM program; None picks.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        out: (T, H) fp32, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    shapes = (
        f"hidden {tuple(hidden.shape)}, w1 {tuple(w1.shape)}, w2 {tuple(w2.shape)}, "
        f"topk_weights {tuple(topk_weights.shape)}, topk_ids {tuple(topk_ids.shape)}"
    )
    if hidden.dim() != 2 or w1.dim() != 3 or w2.dim() != 3 or topk_ids.dim() != 2:
        raise ValueError(f"need hidden (T, H), w1 (E, 2I, H), w2 (E, H, I), topk (T, k); {shapes}")
    (t, h), (e, two_i, _) = hidden.shape, w1.shape
    i = two_i // 2
    if w1.shape != (e, 2 * i, h) or w2.shape != (e, h, i) or topk_ids.shape != topk_weights.shape:
        raise ValueError(f"need hidden (T, H), w1 (E, 2I, H), w2 (E, H, I), topk (T, k); {shapes}")
    if topk_ids.shape[0] != t or topk_ids.dtype != torch.int32 or w1.dtype != hidden.dtype:
        raise ValueError(f"need int32 topk_ids with T={t} rows and w1 in {hidden.dtype}")
    top_k = topk_ids.shape[1]
    out = torch.empty((t, h), dtype=torch.float32, device=hidden.device)
    if t == 0:
        return out
    cfg = _launch_config(t * top_k, e)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    sorted_ids, flat_ids, num_blocks = _align(topk_ids, e, cfg["block_m"])
    act = torch.empty((sorted_ids.numel(), i), dtype=hidden.dtype, device=hidden.device)
    slot_out = torch.empty((t * top_k, h), dtype=torch.float32, device=hidden.device)
    weights = topk_weights.contiguous().view(-1)  # any float: applied in fp32 in the kernel
    meta = {"BLOCK_M": cfg["block_m"], "BLOCK_N": cfg["block_n"], "BLOCK_K": cfg["block_k"],
            "UPCAST": _interpreting(), "num_warps": cfg["num_warps"],
            "num_stages": cfg["num_stages"]}  # fmt: skip
    _fused_moe_gate_up_kernel[(num_blocks, triton.cdiv(i, cfg["block_n"]))](
        hidden, w1, act, sorted_ids, flat_ids,
        t * top_k, h, i,
        hidden.stride(0), hidden.stride(1),
        w1.stride(0), w1.stride(1), w1.stride(2),
        act.stride(0), act.stride(1),
        TOP_K=top_k, **meta,
    )  # fmt: skip
    _fused_moe_down_kernel[(num_blocks, triton.cdiv(h, cfg["block_n"]))](
        act, w2, weights, slot_out, sorted_ids, flat_ids,
        t * top_k, h, i,
        act.stride(0), act.stride(1),
        w2.stride(0), w2.stride(1), w2.stride(2),
        slot_out.stride(0),
        **meta,
    )  # fmt: skip
    block_h = min(1024, triton.next_power_of_2(h))
    _fused_moe_combine_kernel[(t, triton.cdiv(h, block_h))](
        slot_out, out, h, TOP_K=top_k, BLOCK_H=block_h, num_warps=4
    )
    return out


def reference(
    hidden: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """Return the MoE output in fp32, expert by expert."""
    x = hidden.float()
    inter = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for expert in range(w1.shape[0]):
        token, slot = (topk_ids == expert).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        gate_up = x[token] @ w1[expert].float().T
        act = torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        y = act @ w2[expert].float().T * topk_weights[token, slot].float()[:, None]
        out.index_add_(0, token, y)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return launcher inputs for ``{"tokens", "hidden", "inter", "experts", "top_k"}``.

    x ~ N(0, 1) (a post-norm activation), w1 ~ N * H^-0.5, w2 ~ N * I^-0.5, weights a softmax of
    N(0, 1), ids uniform (repeats within a token possible).
    """
    t, h, i = shape["tokens"], shape["hidden"], shape["inter"]
    e, k = shape["experts"], shape["top_k"]
    return {
        "hidden": torch.randn(t, h, device=device).to(dtype),
        "w1": (torch.randn(e, 2 * i, h, device=device) * h**-0.5).to(dtype),
        "w2": (torch.randn(e, h, i, device=device) * i**-0.5).to(dtype),
        "topk_weights": torch.softmax(torch.randn(t, k, device=device), dim=-1),
        "topk_ids": torch.randint(0, e, (t, k), dtype=torch.int32, device=device),
    }
