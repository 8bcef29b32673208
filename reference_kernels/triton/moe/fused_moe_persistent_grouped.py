"""
---
id: fused_moe_persistent_grouped
title: Fused MoE, one-program device alignment, persistent grids over (expert block, N tile) items
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [moe-align-block-size, device-side-align, persistent-kernel, grouped-gemm, gather-rows,
  fused-silu-and-mul, fp32-intermediate, atomic-combine, fp32-accumulate]
status: reference
launcher: fused_moe_persistent_grouped
tuning:
  block_m: [16, 32, 64]
  block_n: [32, 16, 64]
  block_k: [32, 16, 64]
  programs_per_sm: [2, 1, 4]
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
  shapes: [{tokens: 5, hidden: 64, inter: 32, experts: 4, top_k: 2}, {tokens: 19, hidden: 80, inter: 24, experts: 3, top_k: 2}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured:
  - {device: NVIDIA H200, shape: fused_moe/0, dtype: bf16, latency_us: 305.792, sol_fraction: 0.1565, date: '2026-12-03'}
---
atrex30's fused_moe (out (T, H) fp32 = sum_j w_j * (SiLU(x W1g^T) * (x W1u^T)) W2^T, intermediate
kept in fp32) in three launches with no host glue. Align: one program histograms the T*k expert ids
chunk by chunk, pads each count to BLOCK_M, scans, then scatters every pair to its padded slot
(stable: a chunk-local rank from a CHUNK x CHUNK equality matrix plus a per-expert running cursor)
and writes each block's expert and the number of used blocks to device memory. Gate/up and down:
a persistent grid of programs_per_sm x SM-count programs strides over the work items (block, N
tile) of the worst-case padded layout; items past the used blocks cost one scalar compare. An item
gathers BLOCK_M rows of x, runs tl.dot chains against the gate and up tiles of its block's expert
(bf16 tensor cores, fp32 accumulate), stores SiLU(g) * u in fp32; the down item multiplies that by
W2 with 3xTF32 (fp32-accurate: the 1e-4 tolerance rules out bf16 or TF32 activations), scales by
the routing weight and atomically adds into the zeroed fp32 output (duplicate experts of a token
just add). Bytes: each expert's weights stream once per row block, x is gathered k times, the
fp32 activation makes one round trip (8 B per element). When it wins: prefill with many short
expert groups, where a launch of one program per worst-case tile would schedule mostly empty
tiles and the persistent loop keeps every SM busy. Limits: the align program is serial (about
T*k*(CHUNK + E) lane-ops, fine to ~64K pairs); the atomic combine is not bit-deterministic; decode
batches waste most of each block (use the token-loop design).
"""

import os

import torch
import triton
import triton.language as tl

ALIGN_CHUNK = 64


@triton.jit
def _align_one_program_kernel(
    ids_ptr, sorted_ptr, block_expert_ptr, used_ptr,
    N, E, MAX_BLOCKS,
    BLOCK_M: tl.constexpr, CHUNK: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_B: tl.constexpr,
):  # fmt: skip
    offs_e = tl.arange(0, BLOCK_E)
    lane = tl.arange(0, CHUNK)
    counts = tl.zeros((BLOCK_E,), dtype=tl.int32)
    for c0 in range(0, N, CHUNK):  # pass 1: expert histogram (bin E: padding lanes)
        ids = tl.load(ids_ptr + c0 + lane, mask=c0 + lane < N, other=E)
        counts += tl.histogram(ids, BLOCK_E)
    counts = tl.where(offs_e < E, counts, 0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, axis=0)
    cursor = ends - padded  # padded start of each expert
    tl.store(used_ptr, tl.sum(padded, axis=0) // BLOCK_M)
    for c0 in range(0, N, CHUNK):  # pass 2: stable scatter to padded slots
        offs = c0 + lane
        ids = tl.load(ids_ptr + offs, mask=offs < N, other=E)
        earlier = (ids[:, None] == ids[None, :]) & (lane[None, :] < lane[:, None])
        rank = tl.sum(earlier.to(tl.int32), axis=1)
        onehot = ids[:, None] == offs_e[None, :]
        base = tl.sum(tl.where(onehot, cursor[None, :], 0), axis=1)
        tl.store(sorted_ptr + base + rank, offs, mask=offs < N)
        cursor += tl.histogram(ids, BLOCK_E)
    for b0 in range(0, MAX_BLOCKS, BLOCK_B):  # expert of each block: experts ending at or before
        blocks = b0 + tl.arange(0, BLOCK_B)
        done = (ends[None, :] <= blocks[:, None] * BLOCK_M) & (offs_e[None, :] < E)
        expert = tl.minimum(tl.sum(done.to(tl.int32), axis=1), E - 1)
        tl.store(block_expert_ptr + blocks, expert, mask=blocks < MAX_BLOCKS)


@triton.jit
def _persistent_gate_up_kernel(
    x_ptr, w1_ptr, act_ptr, sorted_ptr, block_expert_ptr, used_ptr,
    N, H, INTER, MAX_BLOCKS,
    stride_xt, stride_we, stride_wn,
    TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    used = tl.load(used_ptr)
    n_tiles = tl.cdiv(INTER, BLOCK_N)
    for item in range(tl.program_id(0), MAX_BLOCKS * n_tiles, tl.num_programs(0)):
        blk = item // n_tiles
        if blk < used:
            expert = tl.load(block_expert_ptr + blk).to(tl.int64)
            offs_m = blk * BLOCK_M + tl.arange(0, BLOCK_M)
            pair = tl.load(sorted_ptr + offs_m)
            mask_m = pair < N
            token = (pair // TOP_K).to(tl.int64)
            offs_n = (item % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
            mask_n = offs_n < INTER
            offs_k = tl.arange(0, BLOCK_K)
            wg = w1_ptr + expert * stride_we + offs_n[None, :].to(tl.int64) * stride_wn
            acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, H, BLOCK_K):
                cols = k0 + offs_k
                mask_k = cols < H
                x = tl.load(x_ptr + token[:, None] * stride_xt + cols[None, :],
                            mask=mask_m[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
                mask_w = mask_k[:, None] & mask_n[None, :]
                g = tl.load(wg + cols[:, None], mask=mask_w, other=0.0)
                u = tl.load(wg + INTER * stride_wn + cols[:, None], mask=mask_w, other=0.0)
                if UPCAST:  # interpreter or fp32 inputs: fp32-accurate products
                    x = x.to(tl.float32)
                    acc_g += tl.dot(x, g.to(tl.float32), input_precision="ieee")
                    acc_u += tl.dot(x, u.to(tl.float32), input_precision="ieee")
                else:  # 16-bit inputs: exact products on tensor cores, fp32 accumulate
                    acc_g += tl.dot(x, g)
                    acc_u += tl.dot(x, u)
            act = acc_g * tl.sigmoid(acc_g) * acc_u  # fp32, never rounded
            a_ptrs = act_ptr + offs_m[:, None].to(tl.int64) * INTER + offs_n[None, :]
            tl.store(a_ptrs, act, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _persistent_down_kernel(
    act_ptr, w2_ptr, weights_ptr, out_ptr, sorted_ptr, block_expert_ptr, used_ptr,
    N, H, INTER, MAX_BLOCKS,
    stride_we, stride_wn,
    TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    used = tl.load(used_ptr)
    n_tiles = tl.cdiv(H, BLOCK_N)
    for item in range(tl.program_id(0), MAX_BLOCKS * n_tiles, tl.num_programs(0)):
        blk = item // n_tiles
        if blk < used:
            expert = tl.load(block_expert_ptr + blk).to(tl.int64)
            offs_m = blk * BLOCK_M + tl.arange(0, BLOCK_M)
            pair = tl.load(sorted_ptr + offs_m)
            mask_m = pair < N
            offs_n = (item % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
            mask_n = offs_n < H
            offs_k = tl.arange(0, BLOCK_K)
            w_cols = w2_ptr + expert * stride_we + offs_n[None, :].to(tl.int64) * stride_wn
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, INTER, BLOCK_K):
                cols = k0 + offs_k
                mask_k = cols < INTER
                a = tl.load(act_ptr + offs_m[:, None].to(tl.int64) * INTER + cols[None, :],
                            mask=mask_m[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
                w = tl.load(w_cols + cols[:, None], mask=mask_k[:, None] & mask_n[None, :],
                            other=0.0).to(tl.float32)  # fmt: skip
                acc += tl.dot(a, w, input_precision=PRECISION)
            rw = tl.load(weights_ptr + pair, mask=mask_m, other=0.0).to(tl.float32)
            token = (pair // TOP_K).to(tl.int64)
            tl.atomic_add(out_ptr + token[:, None] * H + offs_n[None, :], acc * rw[:, None],
                          mask=mask_m[:, None] & mask_n[None, :])  # fmt: skip


def _num_sms(device: torch.device) -> int:
    """Return the SM count of a CUDA device (4 elsewhere, e.g. the CPU interpreter)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return 4


def _check(hidden_states, w1, w2, topk_weights, topk_ids) -> None:
    """Raise ValueError unless the activations, weights and routing have matching shapes."""
    if hidden_states.dim() != 2 or w1.dim() != 3 or topk_ids.dim() != 2:
        raise ValueError("need hidden_states (T, H), w1 (E, 2I, H) and topk_ids (T, k)")
    t, h = hidden_states.shape
    e, i = w1.shape[0], w1.shape[1] // 2
    want = {"w1": (e, 2 * i, h), "w2": (e, h, i), "topk_weights": tuple(topk_ids.shape),
            "topk_ids": (t, topk_ids.shape[1])}  # fmt: skip
    got = {"w1": w1, "w2": w2, "topk_weights": topk_weights, "topk_ids": topk_ids}
    bad = [f"{k} {tuple(got[k].shape)} (want {v})" for k, v in want.items() if got[k].shape != v]
    if bad:
        raise ValueError("shape mismatch: " + ", ".join(bad))
    if topk_ids.dtype != torch.int32 or not w1.dtype == hidden_states.dtype == w2.dtype:
        raise ValueError(
            f"need int32 topk_ids and w1/w2 in hidden_states' dtype; got {topk_ids.dtype}, "
            f"{hidden_states.dtype}, {w1.dtype}, {w2.dtype}"
        )


def fused_moe_persistent_grouped(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    programs_per_sm: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the fused MoE output sum_j w_j * FFN_{e_j}(x) in fp32.

    Args:
        hidden_states: (T, H) bf16/fp16/fp32 activations.
        w1: (E, 2I, H) in hidden_states' dtype, gate rows [0, I) then up rows [I, 2I).
        w2: (E, H, I) in hidden_states' dtype.
        topk_weights: (T, k) routing weights (used in fp32).
        topk_ids: (T, k) int32 experts in [0, E) (repeats within a token allowed).
        block_m: Sorted slots per block and alignment size (power of two >= 16); None = 16.
        block_n: Output columns per work item (power of two >= 16); None = 32.
        block_k: Reduction depth per step (power of two >= 16); None = 32.
        programs_per_sm: Persistent programs per SM; None = 2.
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, H) fp32, contiguous.

    Raises:
        ValueError: The shapes, dtypes or tile sizes do not fit.
    """
    _check(hidden_states, w1, w2, topk_weights, topk_ids)
    bm, bn, bk = block_m or 16, block_n or 32, block_k or 32
    for name, value in (("block_m", bm), ("block_n", bn), ("block_k", bk)):
        if value & (value - 1) or value < 16:
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot); got {value}")
    t, h = hidden_states.shape
    e, i, k = w1.shape[0], w1.shape[1] // 2, topk_ids.shape[1]
    device = hidden_states.device
    out = torch.zeros((t, h), dtype=torch.float32, device=device)
    if t == 0:
        return out
    n = t * k
    max_len = n + min(e, n) * (bm - 1)
    max_blocks = triton.cdiv(max_len, bm)
    sorted_ids = torch.full((max_blocks * bm,), n, dtype=torch.int32, device=device)
    block_expert = torch.empty((max_blocks,), dtype=torch.int32, device=device)
    used = torch.empty((1,), dtype=torch.int32, device=device)
    ids = topk_ids.contiguous()
    _align_one_program_kernel[(1,)](
        ids, sorted_ids, block_expert, used, n, e, max_blocks,
        BLOCK_M=bm, CHUNK=ALIGN_CHUNK, BLOCK_E=triton.next_power_of_2(e + 1), BLOCK_B=64,
    )  # fmt: skip
    x, w1, w2 = hidden_states.contiguous(), w1.contiguous(), w2.contiguous()
    act = torch.empty((max_blocks * bm, i), dtype=torch.float32, device=device)
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    progs = _num_sms(device) * (programs_per_sm or 2)
    warps = num_warps or 4
    _persistent_gate_up_kernel[(min(progs, max_blocks * triton.cdiv(i, bn)),)](
        x, w1, act, sorted_ids, block_expert, used, n, h, i, max_blocks,
        x.stride(0), w1.stride(0), w1.stride(1),
        TOP_K=k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
        UPCAST=interp or x.dtype == torch.float32, num_warps=warps,
    )  # fmt: skip
    _persistent_down_kernel[(min(progs, max_blocks * triton.cdiv(h, bn)),)](
        act, w2, topk_weights.contiguous(), out, sorted_ids, block_expert, used,
        n, h, i, max_blocks, w2.stride(0), w2.stride(1),
        TOP_K=k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
        PRECISION="ieee" if interp else "tf32x3", num_warps=warps,
    )  # fmt: skip
    return out


def reference(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """Return the MoE output in fp32, expert by expert."""
    x = hidden_states.float()
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

    x ~ N(0, 1), w1 ~ N * H^-0.5, w2 ~ N * I^-0.5 (in ``dtype``), weights a softmax of N(0, 1),
    ids uniform (repeats within a token possible).
    """
    t, h, i = shape["tokens"], shape["hidden"], shape["inter"]
    e, k = shape["experts"], shape["top_k"]
    return {
        "hidden_states": torch.randn(t, h, device=device).to(dtype),
        "w1": (torch.randn(e, 2 * i, h, device=device) * h**-0.5).to(dtype),
        "w2": (torch.randn(e, h, i, device=device) * i**-0.5).to(dtype),
        "topk_weights": torch.softmax(torch.randn(t, k, device=device), dim=-1),
        "topk_ids": torch.randint(0, e, (t, k), dtype=torch.int32, device=device),
    }
