"""
---
id: fused_moe_down_split_k_atomic
title: Fused MoE over expert-aligned blocks, down projection split over K with fp32 atomic adds
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [in-kernel-align, tl-histogram, one-hot-rank-scan, grouped-gemm, row-gather,
  fused-silu-and-mul, split-k, split-bf16-activation, routing-weight-epilogue,
  fp32-atomic-add, fp32-accumulate]
status: reference
launcher: fused_moe_down_split_k_atomic
tuning:
  block_m: [16, 32, 64]
  block_n: [64, 32, 128]
  block_k: [64, 32, 128]
  split_k: [4, 1, 2, 8]
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
measured:
  - {device: NVIDIA H200, shape: fused_moe/0, dtype: bf16, latency_us: 361.408, sol_fraction: 0.1324, date: '2026-12-03'}
---
atrex30's fused_moe (fp32 out, fp32 intermediate) as four launches with no host sync. Routing: a
histogram launch and one scan-and-scatter program (ranks from a one-hot scan, so the order is the
stable sort's) lay the T*k pairs out expert-major, padded to BLOCK_M-row blocks, each block tagged
with its expert. Gate/up: one program per (block, BLOCK_N columns of I) gathers its pairs' token
rows, runs the gate and up MMAs against the block's expert and writes SiLU(g) * u in fp32 per
sorted slot. Down: the reduction over I is split SPLIT_K ways, so the grid is (blocks, H tiles,
SPLIT_K): each program computes a partial (BLOCK_M, BLOCK_N) product over its slice of I (the fp32
activation split into a bf16 high part and a bf16 remainder: two exact-product MMAs, ~16 mantissa
bits), multiplies each row by its routing weight and atomically adds it in fp32 straight into
out[token]: the K split, the k slots of a token and repeated experts all combine in the same
atomic, so there is no (T*k, H) per-slot buffer and no final reduction launch. Split-K multiplies
the program count of the down GEMM, which fills the GPU when blocks x H tiles is small (decode and
small batches with large I, e.g. Mixtral's 14336). Bytes: weights of the routed experts once per
row block, activations 4 B per pair and I element written once and read once. Limits: fp32
atomics are not bitwise deterministic; atomics cost 2x the output traffic per split; padding rows
of each block do wasted MMA work when experts get few pairs.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _hist_kernel(ids_ptr, counts_ptr, N, E, CHUNK: tl.constexpr, BLOCK_E: tl.constexpr):
    offs = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    e = tl.load(ids_ptr + offs, mask=offs < N, other=-1)
    ok = (e >= 0) & (e < E)
    hist = tl.histogram(tl.where(ok, e, BLOCK_E - 1), BLOCK_E)  # invalid ids -> the last bin
    bins = tl.arange(0, BLOCK_E)
    hist -= tl.where(bins == BLOCK_E - 1, tl.sum((~ok).to(tl.int32), axis=0), 0)
    tl.atomic_add(counts_ptr + bins, hist, mask=(bins < E) & (hist > 0))


@triton.jit
def _scan_scatter_kernel(ids_ptr, counts_ptr, sorted_ptr, expert_ids_ptr, num_post_ptr, N, E,
                         BM: tl.constexpr, CHUNK: tl.constexpr, BLOCK_E: tl.constexpr):  # fmt: skip
    experts = tl.arange(0, BLOCK_E)
    counts = tl.load(counts_ptr + experts, mask=experts < E, other=0)
    blocks = (counts + BM - 1) // BM
    block_end = tl.cumsum(blocks, axis=0)
    start = (block_end - blocks) * BM
    total_blocks = tl.sum(blocks, axis=0)
    tl.store(num_post_ptr, total_blocks * BM)
    for b0 in range(0, total_blocks, CHUNK):
        bi = b0 + tl.arange(0, CHUNK)
        owner = tl.sum((block_end[None, :] <= bi[:, None]).to(tl.int32), axis=1)
        tl.store(expert_ids_ptr + bi, owner, mask=bi < total_blocks)
    cursor = tl.zeros((BLOCK_E,), dtype=tl.int32)
    for off in range(0, N, CHUNK):
        offs = off + tl.arange(0, CHUNK)
        e = tl.load(ids_ptr + offs, mask=offs < N, other=-1)
        onehot = (e[:, None] == experts[None, :]).to(tl.int32)
        rank = tl.sum(tl.cumsum(onehot, axis=0) * onehot, axis=1) - 1
        base = tl.sum(onehot * (start + cursor)[None, :], axis=1)
        tl.store(sorted_ptr + base + rank, offs, mask=(e >= 0) & (e < E))
        cursor += tl.sum(onehot, axis=0)


@triton.jit
def _gate_up_kernel(
    x_ptr, w1_ptr, act_ptr, sorted_ptr, expert_ids_ptr, num_post_ptr,
    NUM_PAIRS, H, INTER,
    stride_xt, stride_we, stride_wn, stride_wk,
    TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    pid_b = tl.program_id(0)
    if pid_b * BLOCK_M < tl.load(num_post_ptr):  # the grid is sized for the worst case
        expert = tl.load(expert_ids_ptr + pid_b).to(tl.int64)
        offs_m = pid_b * BLOCK_M + tl.arange(0, BLOCK_M)
        pair = tl.load(sorted_ptr + offs_m)
        mask_m = pair < NUM_PAIRS
        token = (pair // TOP_K).to(tl.int64)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = offs_n < INTER
        offs_k = tl.arange(0, BLOCK_K)
        x_ptrs = x_ptr + token[:, None] * stride_xt + offs_k[None, :]
        wg_ptrs = (w1_ptr + expert * stride_we + offs_n[None, :].to(tl.int64) * stride_wn
                   + offs_k[:, None] * stride_wk)  # fmt: skip
        acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, H, BLOCK_K):
            mask_k = offs_k < H - k0
            x = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
            wg = tl.load(wg_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            wu = tl.load(wg_ptrs + INTER * stride_wn, mask=mask_k[:, None] & mask_n[None, :],
                         other=0.0)  # fmt: skip
            if UPCAST:
                x = x.to(tl.float32)
                acc_g = tl.dot(x, wg.to(tl.float32), acc_g, input_precision="ieee")
                acc_u = tl.dot(x, wu.to(tl.float32), acc_u, input_precision="ieee")
            else:
                acc_g = tl.dot(x, wg, acc_g)
                acc_u = tl.dot(x, wu, acc_u)
            x_ptrs += BLOCK_K
            wg_ptrs += BLOCK_K * stride_wk
        act = acc_g * tl.sigmoid(acc_g) * acc_u  # fp32 SiLU(gate) * up
        act_ptrs = act_ptr + offs_m[:, None].to(tl.int64) * INTER + offs_n[None, :]
        tl.store(act_ptrs, act, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _down_split_k_kernel(
    act_ptr, w2_ptr, weights_ptr, out_ptr, sorted_ptr, expert_ids_ptr, num_post_ptr,
    NUM_PAIRS, H, INTER, K_PER_SPLIT,
    stride_we, stride_wn, stride_wk, stride_ot,
    TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_BF16: tl.constexpr,
):  # fmt: skip
    pid_b = tl.program_id(0)
    if pid_b * BLOCK_M < tl.load(num_post_ptr):
        expert = tl.load(expert_ids_ptr + pid_b).to(tl.int64)
        offs_m = pid_b * BLOCK_M + tl.arange(0, BLOCK_M)
        pair = tl.load(sorted_ptr + offs_m)
        mask_m = pair < NUM_PAIRS
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = offs_n < H
        k_lo = tl.program_id(2) * K_PER_SPLIT  # this program's slice of I
        k_hi = tl.minimum(k_lo + K_PER_SPLIT, INTER)
        offs_k = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            kk = k0 + offs_k
            mask_k = kk < k_hi
            a = tl.load(act_ptr + offs_m[:, None].to(tl.int64) * INTER + kk[None, :],
                        mask=mask_m[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
            w = tl.load(w2_ptr + expert * stride_we + offs_n[None, :].to(tl.int64) * stride_wn
                        + kk[:, None] * stride_wk, mask=mask_k[:, None] & mask_n[None, :],
                        other=0.0)  # fmt: skip
            if SPLIT_BF16:
                hi = a.to(tl.bfloat16)  # fp32 = bf16 high part + bf16 remainder
                acc = tl.dot(hi, w, acc)
                acc = tl.dot((a - hi.to(tl.float32)).to(tl.bfloat16), w, acc)
            else:
                acc = tl.dot(a, w.to(tl.float32), acc, input_precision="ieee")
        rw = tl.load(weights_ptr + pair, mask=mask_m, other=0.0).to(tl.float32)
        token = (pair // TOP_K).to(tl.int64)
        out_ptrs = out_ptr + token[:, None] * stride_ot + offs_n[None, :]
        tl.atomic_add(out_ptrs, acc * rw[:, None], mask=mask_m[:, None] & mask_n[None, :],
                      sem="relaxed")  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def fused_moe_down_split_k_atomic(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    split_k: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return sum_j topk_weights[:, j] * FFN_{topk_ids[:, j]}(hidden_states) in fp32.

    Args:
        hidden_states: (T, H) bf16/fp16/fp32, H contiguous.
        w1: (E, 2I, H) same dtype: gate rows [0, I), up rows [I, 2I).
        w2: (E, H, I) same dtype.
        topk_weights: (T, k) fp32 routing weights.
        topk_ids: (T, k) int32 experts in [0, E) (E <= 1024); repeats within a token add up.
        block_m: Sorted pairs per block (power of two >= 16); None = 16.
        block_n: Output columns per program (power of two >= 16); None = 64.
        block_k: Reduction step (power of two >= 16); None = 64.
        split_k: Slices of I in the down projection (>= 1); None = 4.
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
    if topk_ids.shape[0] != t or topk_ids.dtype != torch.int32 or not 1 <= e <= 1024:
        raise ValueError(
            f"need int32 topk_ids with T={t} rows and 1 <= E <= 1024; got {topk_ids.dtype}, E={e}"
        )
    cfg = {"block_m": block_m or 16, "block_n": block_n or 64, "block_k": block_k or 64}
    for name, value in cfg.items():
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot); got {value}")
    splits = split_k or 4
    if splits < 1:
        raise ValueError(f"split_k must be >= 1; got {splits}")
    out = torch.zeros((t, h), dtype=torch.float32, device=hidden_states.device)  # atomic target
    n = topk_ids.numel()
    if n == 0:
        return out
    dev, bm, warps = hidden_states.device, cfg["block_m"], num_warps or 4
    x = hidden_states if hidden_states.stride(1) == 1 else hidden_states.contiguous()
    ids = topk_ids.contiguous().view(-1)
    max_blocks = triton.cdiv(n, bm) + min(e, n)  # every non-empty expert adds at most one block
    sorted_ids = torch.full((max_blocks * bm,), n, dtype=torch.int32, device=dev)
    expert_ids = torch.zeros((max_blocks,), dtype=torch.int32, device=dev)
    counts = torch.zeros((e,), dtype=torch.int32, device=dev)
    num_post = torch.zeros((1,), dtype=torch.int32, device=dev)
    block_e = max(16, triton.next_power_of_2(e))
    _hist_kernel[(triton.cdiv(n, 64),)](ids, counts, n, e, CHUNK=64, BLOCK_E=block_e)
    _scan_scatter_kernel[(1,)](ids, counts, sorted_ids, expert_ids, num_post, n, e,
                               BM=bm, CHUNK=64, BLOCK_E=block_e)  # fmt: skip
    act = torch.empty((max_blocks * bm, i), dtype=torch.float32, device=dev)
    upcast = _interpreting() or x.dtype == torch.float32  # fp32: exact fp32 dots, no TF32
    _gate_up_kernel[(max_blocks, triton.cdiv(i, cfg["block_n"]))](
        x, w1, act, sorted_ids, expert_ids, num_post, n, h, i,
        x.stride(0), w1.stride(0), w1.stride(1), w1.stride(2),
        TOP_K=topk_ids.shape[1], BLOCK_M=bm, BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        UPCAST=upcast, num_warps=warps,
    )  # fmt: skip
    k_per_split = triton.cdiv(triton.cdiv(i, splits), cfg["block_k"]) * cfg["block_k"]
    _down_split_k_kernel[(max_blocks, triton.cdiv(h, cfg["block_n"]), triton.cdiv(i, k_per_split))](
        act, w2, topk_weights.contiguous().view(-1), out, sorted_ids, expert_ids, num_post,
        n, h, i, k_per_split,
        w2.stride(0), w2.stride(1), w2.stride(2), out.stride(0),
        TOP_K=topk_ids.shape[1], BLOCK_M=bm, BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        SPLIT_BF16=not upcast and w2.dtype == torch.bfloat16, num_warps=warps,
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
