"""
---
id: fused_moe_decode_expert_stationary
title: Decode fused MoE, one program per (expert, column tile) serving every pair routed to it
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [decode-specialised, expert-stationary, masked-pair-dot, no-sorting,
  fused-silu-and-mul, routing-weight-epilogue, fp32-atomic-add, fp32-accumulate, early-exit]
status: reference
launcher: fused_moe_decode_expert_stationary
tuning:
  block_p: [16, 32, 64]
  block_n: [32, 16, 64]
  block_k: [64, 32, 128]
  num_warps: [4, 2, 8]
args:
  hidden: {shape: [T, H], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, x]}
  w1: {shape: [E, 2*I, H], like: hidden, aliases: [w13, gate_up_proj]}
  w2: {shape: [E, H, I], like: hidden, aliases: [down_proj]}
  topk_weights: {shape: [T, TOPK], dtypes: [fp32], aliases: [routing_weights]}
  topk_ids: {shape: [T, TOPK], dtypes: [int32], aliases: [selected_experts]}
returns:
  - {name: out, shape: [T, H], dtype: fp32}
problem:
  shapes: [{tokens: 13, hidden: 96, inter: 40, experts: 6, top_k: 2}, {tokens: 7, hidden: 72, inter: 24, experts: 5, top_k: 3}]
  dtypes: [fp32, bf16]
measured:
  - {device: NVIDIA H200, shape: fused_moe/0, dtype: bf16, latency_us: 10369.792, sol_fraction: 0.0046, date: '2026-12-03'}
---
The atrex30 fused_moe (out (T, H) fp32 = sum over slots j of topk_weights[t, j] * (SiLU(x W1g^T) *
(x W1u^T)) W2^T with expert topk_ids[t, j], fp32 intermediates) for decode batches, organised
around the weights instead of the tokens. Launch 1 runs one program per (BLOCK_N columns of the
intermediate I, expert e): it reads the ids of a chunk of BLOCK_P routed pairs, returns at once if
none chose e, else streams e's gate and up rows in (BLOCK_K, BLOCK_N) tiles and multiplies them by
the (BLOCK_P, BLOCK_K) tile of the pairs' x rows, rows of pairs routed elsewhere zeroed by the
mask, writing SiLU(g) * u in fp32 to a (T*k, I) scratch for the hit rows. Launch 2 does the same
over (H columns, expert) with W2, scales by the routing weight and adds the hit rows into the
zeroed fp32 output with atomics. So each selected expert's 3*H*I weights leave HBM once per chunk
of BLOCK_P pairs however many pairs picked it, where a per-(token, slot) GEMV design
(fused_moe_token_loop) reads them once per pick: with 64 pairs over 8 experts that is 8x less weight
traffic, and unselected experts cost one id load. The masked rows waste MMA work, which is free at
decode where the kernel is bandwidth-bound. The dots take fp32 operands with input_precision
"ieee", so the intermediate stays fp32 as the atrex30 tolerance (1e-4) demands. Limits: past a
few hundred pairs every program re-reads its weights per pair chunk (use the sorted grouped-GEMM
sibling for prefill); the atomic combine is not bitwise deterministic; ieee dots run on CUDA
cores, which only the bandwidth-bound decode regime hides.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_stationary_gate_up_kernel(
    # pointers
    x_ptr,  # (T, H)
    w1_ptr,  # (E, 2I, H): rows [0, I) gate, [I, 2I) up
    ids_ptr,  # int32 (P,) expert of each routed pair, P = T * k
    act_ptr,  # fp32 (P, I)
    # sizes
    P,
    H,
    INTER,
    # strides (elements)
    stride_xt,
    stride_we,
    stride_wn,
    stride_wk,
    stride_ap,
    # meta
    TOP_K: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    expert = tl.program_id(1)
    mask_n = offs_n < INTER
    offs_k = tl.arange(0, BLOCK_K)
    w_base = w1_ptr + expert.to(tl.int64) * stride_we + offs_n[None, :].to(tl.int64) * stride_wn
    for p_start in range(0, P, BLOCK_P):
        offs_p = p_start + tl.arange(0, BLOCK_P)
        ids = tl.load(ids_ptr + offs_p, mask=offs_p < P, other=-1)
        hit = ids == expert
        if tl.max(hit.to(tl.int32), axis=0) > 0:  # skip chunks that never chose this expert
            x_rows = x_ptr + (offs_p // TOP_K).to(tl.int64)[:, None] * stride_xt
            acc_g = tl.zeros((BLOCK_P, BLOCK_N), dtype=tl.float32)
            acc_u = tl.zeros((BLOCK_P, BLOCK_N), dtype=tl.float32)
            for k_start in range(0, H, BLOCK_K):
                cols = k_start + offs_k
                mask_k = cols < H
                x = tl.load(x_rows + cols[None, :], mask=hit[:, None] & mask_k[None, :], other=0.0)
                w_ptrs = w_base + cols[:, None] * stride_wk
                mask_w = mask_k[:, None] & mask_n[None, :]
                g = tl.load(w_ptrs, mask=mask_w, other=0.0).to(tl.float32)
                u = tl.load(w_ptrs + INTER * stride_wn, mask=mask_w, other=0.0).to(tl.float32)
                x = x.to(tl.float32)
                acc_g = tl.dot(x, g, acc_g, input_precision="ieee")
                acc_u = tl.dot(x, u, acc_u, input_precision="ieee")
            act = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u  # fp32 SiLU(g) * u
            a_ptrs = act_ptr + offs_p[:, None].to(tl.int64) * stride_ap + offs_n[None, :]
            tl.store(a_ptrs, act, mask=hit[:, None] & mask_n[None, :])


@triton.jit
def _moe_stationary_down_kernel(
    # pointers
    act_ptr,  # fp32 (P, I)
    w2_ptr,  # (E, H, I)
    ids_ptr,  # int32 (P,)
    wts_ptr,  # fp32 (P,) routing weights
    out_ptr,  # fp32 (T, H), zeroed
    # sizes
    P,
    H,
    INTER,
    # strides (elements)
    stride_ap,
    stride_we,
    stride_wn,
    stride_wk,
    stride_ot,
    # meta
    TOP_K: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    expert = tl.program_id(1)
    mask_n = offs_n < H
    offs_k = tl.arange(0, BLOCK_K)
    w_base = w2_ptr + expert.to(tl.int64) * stride_we + offs_n[None, :].to(tl.int64) * stride_wn
    for p_start in range(0, P, BLOCK_P):
        offs_p = p_start + tl.arange(0, BLOCK_P)
        ids = tl.load(ids_ptr + offs_p, mask=offs_p < P, other=-1)
        hit = ids == expert
        if tl.max(hit.to(tl.int32), axis=0) > 0:
            a_rows = act_ptr + offs_p[:, None].to(tl.int64) * stride_ap
            acc = tl.zeros((BLOCK_P, BLOCK_N), dtype=tl.float32)
            for k_start in range(0, INTER, BLOCK_K):
                cols = k_start + offs_k
                mask_k = cols < INTER
                a = tl.load(a_rows + cols[None, :], mask=hit[:, None] & mask_k[None, :], other=0.0)
                w = tl.load(w_base + cols[:, None] * stride_wk,
                            mask=mask_k[:, None] & mask_n[None, :], other=0.0)  # fmt: skip
                acc = tl.dot(a, w.to(tl.float32), acc, input_precision="ieee")
            wts = tl.load(wts_ptr + offs_p, mask=hit, other=0.0)
            o_ptrs = out_ptr + (offs_p // TOP_K).to(tl.int64)[:, None] * stride_ot + offs_n[None, :]
            # a token's slots (repeated experts included) meet here: order-free fp32 atomics
            tl.atomic_add(o_ptrs, acc * wts[:, None], mask=hit[:, None] & mask_n[None, :],
                          sem="relaxed")  # fmt: skip


def _launch_config(num_pairs: int) -> dict[str, int]:
    """Return a pair chunk covering small decode batches in one pass, and the tiles."""
    block_p = min(64, max(16, triton.next_power_of_2(num_pairs)))
    return {"block_p": block_p, "block_n": 32, "block_k": 64, "num_warps": 4}


def fused_moe_decode_expert_stationary(
    hidden: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    block_p: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return sum_j topk_weights[:, j] * expert_{topk_ids[:, j]}(hidden) in fp32.

    Args:
        hidden: (T, H) bf16/fp16/fp32, rows contiguous.
        w1: (E, 2I, H) gate rows then up rows per expert, same dtype.
        w2: (E, H, I) down projections, same dtype.
        topk_weights: (T, k) fp32 routing weights.
        topk_ids: (T, k) int32 expert ids in [0, E).
        block_p: Routed pairs per chunk (power of two >= 16); None covers up to 64 at once.
        block_n: Output columns per program (power of two >= 16); None = 32.
        block_k: Reduction step (power of two >= 16); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, H) fp32.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if hidden.dim() != 2 or w1.dim() != 3 or w2.dim() != 3:
        raise ValueError(
            f"need hidden (T, H), w1 (E, 2I, H), w2 (E, H, I); got {tuple(hidden.shape)}, "
            f"{tuple(w1.shape)}, {tuple(w2.shape)}"
        )
    t, h = hidden.shape
    e, two_i, _ = w1.shape
    inter = two_i // 2
    if tuple(w1.shape) != (e, 2 * inter, h) or tuple(w2.shape) != (e, h, inter):
        raise ValueError(f"need w1 (E, 2I, {h}) and w2 (E, {h}, I); got {tuple(w1.shape)}, "
                         f"{tuple(w2.shape)}")  # fmt: skip
    if topk_ids.shape != topk_weights.shape or topk_ids.dim() != 2 or topk_ids.shape[0] != t:
        raise ValueError(f"need topk_ids and topk_weights ({t}, k); got {tuple(topk_ids.shape)} "
                         f"and {tuple(topk_weights.shape)}")  # fmt: skip
    if w1.dtype != hidden.dtype or w2.dtype != hidden.dtype:
        raise ValueError(
            f"need w1, w2 in hidden's dtype {hidden.dtype}; got {w1.dtype}, {w2.dtype}"
        )
    if topk_ids.dtype != torch.int32 or topk_weights.dtype != torch.float32:
        raise ValueError(f"need int32 topk_ids and fp32 topk_weights; got {topk_ids.dtype}, "
                         f"{topk_weights.dtype}")  # fmt: skip
    k = topk_ids.shape[1]
    pairs = t * k
    out = torch.zeros((t, h), dtype=torch.float32, device=hidden.device)
    if pairs == 0 or h == 0:
        return out
    cfg = _launch_config(pairs)
    given = {"block_p": block_p, "block_n": block_n, "block_k": block_k, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    x = hidden if hidden.stride(1) == 1 else hidden.contiguous()
    ids = topk_ids.contiguous().view(-1)
    wts = topk_weights.contiguous().view(-1)
    act = torch.empty((pairs, inter), dtype=torch.float32, device=hidden.device)
    meta = {"TOP_K": k, "BLOCK_P": cfg["block_p"], "BLOCK_N": cfg["block_n"],
            "BLOCK_K": cfg["block_k"], "num_warps": cfg["num_warps"]}  # fmt: skip
    _moe_stationary_gate_up_kernel[(triton.cdiv(inter, cfg["block_n"]), e)](
        x, w1, ids, act, pairs, h, inter,
        x.stride(0), w1.stride(0), w1.stride(1), w1.stride(2), act.stride(0), **meta,
    )  # fmt: skip
    _moe_stationary_down_kernel[(triton.cdiv(h, cfg["block_n"]), e)](
        act, w2, ids, wts, out, pairs, h, inter,
        act.stride(0), w2.stride(0), w2.stride(1), w2.stride(2), out.stride(0), **meta,
    )  # fmt: skip
    return out


def reference(
    hidden: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """Return the routed SiLU-gated FFN sum in fp32, one (token, slot) pair at a time."""
    t, k = topk_ids.shape
    inter = w2.shape[2]
    x = hidden.float()
    out = torch.zeros(t, x.shape[1], dtype=torch.float32, device=x.device)
    for j in range(k):
        for expert in topk_ids[:, j].unique().tolist():
            rows = (topk_ids[:, j] == expert).nonzero().squeeze(1)
            gate_up = x[rows] @ w1[expert].float().T
            act = torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]
            out[rows] += (act @ w2[expert].float().T) * topk_weights[rows, j, None].float()
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "hidden", "inter", "experts", "top_k"}`` (atrex30 scales).

    x ~ N(0, 1) * 0.1, w1 ~ N * H^-1/2, w2 ~ N * I^-1/2, softmax weights, uniform ids (repeats
    allowed, as in atrex30).
    """
    t, h, i, e, k = (shape[key] for key in ("tokens", "hidden", "inter", "experts", "top_k"))
    return {
        "hidden": (torch.randn(t, h, device=device) * 0.1).to(dtype),
        "w1": (torch.randn(e, 2 * i, h, device=device) * h**-0.5).to(dtype),
        "w2": (torch.randn(e, h, i, device=device) * i**-0.5).to(dtype),
        "topk_weights": torch.softmax(torch.randn(t, k, device=device), dim=-1),
        "topk_ids": torch.randint(0, e, (t, k), device=device, dtype=torch.int32),
    }
