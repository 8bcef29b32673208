"""
---
id: fused_moe_token_loop
title: Decode fused MoE, one GEMV program per (token, routed slot, output tile), atomic combine
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [decode-specialised, gemv, no-sorting, fused-silu-and-mul, routing-weight-epilogue,
  fp32-atomic-add, fp32-accumulate]
status: reference
launcher: fused_moe_token_loop
tuning:
  block_n: [32, 16, 64]
  block_k: [128, 64, 256]
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
  shapes: [{tokens: 5, hidden: 64, inter: 32, experts: 4, top_k: 2}, {tokens: 1, hidden: 48, inter: 40, experts: 8, top_k: 3}]
  dtypes: [fp32, bf16]
  atol: 0.01
  rtol: 0.01
measured:
  - {device: NVIDIA H200, shape: fused_moe/0, dtype: bf16, latency_us: 897.728, sol_fraction: 0.0533, date: '2026-12-03'}
---
Fused MoE out (T, H) fp32 = sum over the k routed slots of w * (SiLU(x W1g^T) * (x W1u^T)) W2^T for
decode batches (T*k up to a few dozen), with no alignment or sorting at all: the routed pair's
expert id is read straight from topk_ids. Launch 1 runs one program per (pair, BLOCK_N columns of
the intermediate I): it streams the gate and up rows of that expert's W1 in (BLOCK_N, BLOCK_K)
tiles, multiplies by the token's x chunk on the CUDA cores (a GEMV: broadcast multiply plus a row
sum into fp32 vectors, since one token cannot fill a 16-row MMA), and writes SiLU(g) * u in fp32 to
a (T*k, I) scratch. Launch 2 runs one program per (pair, BLOCK_N columns of H) over W2, scales by
the routing weight and adds into the zeroed fp32 output with atomics (so a token's k slots, repeated
experts included, sum in no fixed order: not bitwise deterministic). Bytes: every routed pair reads
its expert's 3*H*I weights once (2 B/elt bf16), which is the whole cost at decode; x and the scratch
are tiny. Limits: pairs that share an expert re-read its weights (from L2 at best), so once T*k
exceeds the number of experts the sorted grouped-GEMM sibling wins; no tensor cores.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _fused_moe_token_loop_gate_up_kernel(
    # pointers
    x_ptr,  # (T, H) hidden states
    w1_ptr,  # (E, 2I, H): rows [0, I) gate, [I, 2I) up
    ids_ptr,  # int32 (T * k,) expert of each routed pair
    act_ptr,  # fp32 (T * k, I) SiLU(gate) * up per pair
    # sizes
    H,
    INTER,
    # strides (elements)
    stride_xt,
    stride_xh,
    stride_we,
    stride_wn,
    stride_wk,
    # meta
    TOP_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pair = tl.program_id(0)
    token = pair // TOP_K
    expert = tl.load(ids_ptr + pair).to(tl.int64)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < INTER
    offs_k = tl.arange(0, BLOCK_K)

    x_row = x_ptr + token.to(tl.int64) * stride_xt
    wg_rows = w1_ptr + expert * stride_we + offs_n[:, None].to(tl.int64) * stride_wn
    wu_rows = wg_rows + INTER * stride_wn  # the up half starts I rows further

    acc_g = tl.zeros((BLOCK_N,), dtype=tl.float32)  # fp32 dot products
    acc_u = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k_start in range(0, H, BLOCK_K):
        kk = k_start + offs_k
        mask_k = kk < H
        mask_w = mask_n[:, None] & mask_k[None, :]
        # fp32 right after the loads (also what the CPU interpreter needs for bf16)
        x = tl.load(x_row + kk * stride_xh, mask=mask_k, other=0.0).to(tl.float32)
        wg = tl.load(wg_rows + kk[None, :] * stride_wk, mask=mask_w, other=0.0).to(tl.float32)
        wu = tl.load(wu_rows + kk[None, :] * stride_wk, mask=mask_w, other=0.0).to(tl.float32)
        # GEMV step: one token cannot fill an MMA, so multiply-add on CUDA cores
        acc_g += tl.sum(wg * x[None, :], axis=1)
        acc_u += tl.sum(wu * x[None, :], axis=1)

    act = acc_g * tl.sigmoid(acc_g) * acc_u  # SiLU(gate) * up in fp32
    tl.store(act_ptr + pair.to(tl.int64) * INTER + offs_n, act, mask=mask_n)


@triton.jit
def _fused_moe_token_loop_down_kernel(
    # pointers
    act_ptr,  # fp32 (T * k, I)
    w2_ptr,  # (E, H, I)
    ids_ptr,  # int32 (T * k,)
    weights_ptr,  # (T * k,) routing weights, any float dtype (upcast in the kernel)
    out_ptr,  # fp32 (T, H), zeroed
    # sizes
    H,
    INTER,
    # strides (elements)
    stride_we,
    stride_wn,
    stride_wk,
    stride_ot,
    # meta
    TOP_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pair = tl.program_id(0)
    token = pair // TOP_K
    expert = tl.load(ids_ptr + pair).to(tl.int64)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < H
    offs_k = tl.arange(0, BLOCK_K)

    act_row = act_ptr + pair.to(tl.int64) * INTER
    w_rows = w2_ptr + expert * stride_we + offs_n[:, None].to(tl.int64) * stride_wn
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)  # fp32 dot products
    for k_start in range(0, INTER, BLOCK_K):
        kk = k_start + offs_k
        mask_k = kk < INTER
        a = tl.load(act_row + kk, mask=mask_k, other=0.0)
        w = tl.load(w_rows + kk[None, :] * stride_wk, mask=mask_n[:, None] & mask_k[None, :],
                    other=0.0).to(tl.float32)  # fmt: skip
        acc += tl.sum(w * a[None, :], axis=1)

    # routing weight, then combine the token's k slots with fp32 atomics (order-free)
    y = acc * tl.load(weights_ptr + pair).to(tl.float32)
    out_ptrs = out_ptr + token.to(tl.int64) * stride_ot + offs_n
    tl.atomic_add(out_ptrs, y, mask=mask_n, sem="relaxed")


def _launch_config(h: int, i: int) -> dict[str, int]:
    """Return the GEMV tile: 32 output rows x 128-wide K chunks, narrower for tiny layers."""
    block_n = 32 if min(h, i) >= 32 else 16
    return {"block_n": block_n, "block_k": 128, "num_warps": 4}


def fused_moe_token_loop(
    hidden: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the MoE output sum_j w_j * FFN_{e_j}(x) for every token, decode-style.

    Args:
        hidden: (T, H) bf16/fp16/fp32 token activations.
        w1: (E, 2I, H) same dtype: gate rows [0, INTER), up rows [INTER, 2I).
        w2: (E, H, I) same dtype.
        topk_weights: (T, k) fp32 routing weights.
        topk_ids: (T, k) int32 experts in [0, E); repeats within a token add up.
        block_n: Output rows of W per program (power of two); None picks.
        block_k: Reduction chunk (power of two); None = 128.
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, H) fp32, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if hidden.dim() != 2 or w1.dim() != 3 or w2.dim() != 3 or topk_ids.dim() != 2:
        raise ValueError(
            f"need hidden (T, H), w1 (E, 2I, H), w2 (E, H, I), topk_ids (T, k); got "
            f"{tuple(hidden.shape)}, {tuple(w1.shape)}, {tuple(w2.shape)}, {tuple(topk_ids.shape)}"
        )
    t, h = hidden.shape
    e, two_i, _ = w1.shape
    i = two_i // 2
    if w1.shape != (e, 2 * i, h) or w2.shape != (e, h, i) or topk_ids.shape != topk_weights.shape:
        raise ValueError(
            f"need w1 (E, 2I, {h}), w2 (E, {h}, I) and matching topk tensors; got w1 "
            f"{tuple(w1.shape)}, w2 {tuple(w2.shape)}, topk_weights {tuple(topk_weights.shape)}"
        )
    if topk_ids.shape[0] != t or topk_ids.dtype != torch.int32:
        raise ValueError(f"need int32 topk_ids with T={t} rows; got {topk_ids.dtype}")
    top_k = topk_ids.shape[1]
    out = torch.zeros((t, h), dtype=torch.float32, device=hidden.device)  # atomic target
    if t == 0:
        return out
    cfg = _launch_config(h, i)
    given = {"block_n": block_n, "block_k": block_k, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    ids = topk_ids.contiguous().view(-1)
    weights = topk_weights.contiguous().view(-1)
    act = torch.empty((t * top_k, i), dtype=torch.float32, device=hidden.device)
    meta = {"TOP_K": top_k, "BLOCK_N": cfg["block_n"], "BLOCK_K": cfg["block_k"],
            "num_warps": cfg["num_warps"]}  # fmt: skip
    _fused_moe_token_loop_gate_up_kernel[(t * top_k, triton.cdiv(i, cfg["block_n"]))](
        hidden, w1, ids, act,
        h, i,
        hidden.stride(0), hidden.stride(1),
        w1.stride(0), w1.stride(1), w1.stride(2),
        **meta,
    )  # fmt: skip
    _fused_moe_token_loop_down_kernel[(t * top_k, triton.cdiv(h, cfg["block_n"]))](
        act, w2, ids, weights, out,
        h, i,
        w2.stride(0), w2.stride(1), w2.stride(2),
        out.stride(0),
        **meta,
    )  # fmt: skip
    return out


def reference(
    hidden: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """Return the MoE output in fp32, one routed slot at a time."""
    x = hidden.float()
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
