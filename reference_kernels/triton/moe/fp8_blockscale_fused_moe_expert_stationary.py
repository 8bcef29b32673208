"""
---
id: fp8_blockscale_fused_moe_expert_stationary
title: FP8 block-scaled MoE, one program per (expert, N tile) scanning the routing for its pairs
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [fp8_e4m3fn, bf16]
bound: memory
techniques: [expert-stationary, routing-scan, fp8-tl-dot, block-scaled-dequant, fused-silu-and-mul,
  skip-empty-chunks, deterministic-combine, fp32-accumulate]
status: reference
launcher: fp8_blockscale_fused_moe_expert_stationary
tuning:
  block_m: [16, 32, 64]
  block_n: [64, 32, 128]
  num_warps: [4, 2, 8]
args:
  hidden_states: {shape: [T, H], dtypes: [fp8_e4m3fn], aliases: [hidden, x]}
  w1: {shape: [E, 2*I, H], dtypes: [fp8_e4m3fn], aliases: [w13, gate_up_proj]}
  w2: {shape: [E, H, I], dtypes: [fp8_e4m3fn], aliases: [down_proj]}
  topk_weights: {shape: [T, TOPK], dtypes: [fp32], aliases: [routing_weights]}
  topk_ids: {shape: [T, TOPK], dtypes: [int32], aliases: [selected_experts]}
  a_scale: {shape: [T, ceil(H / 128)], dtypes: [fp32], aliases: [a_scales, x_scale]}
  fc1_scale: {shape: [E, ceil(2 * I / 128), ceil(H / 128)], dtypes: [fp32], aliases: [w1_scale]}
  fc2_scale: {shape: [E, ceil(H / 128), ceil(I / 128)], dtypes: [fp32], aliases: [w2_scale]}
returns: [{name: out, shape: [T, H], dtype: bf16}]
problem:
  shapes: [{tokens: 3, hidden: 200, inter: 96, experts: 5, top_k: 3}]
  dtypes: []
measured:
  - {device: NVIDIA H200, shape: fp8_blockscale_fused_moe/0, dtype: fp8_e4m3fn, latency_us: 376800.5524, sol_fraction: 0.0043, date: '2026-12-03'}
---
atrex30's fp8_blockscale_fused_moe (e4m3fn, x per 1x128 group, W1/W2 per 128x128 block, out bf16 =
sum_j w_j * (SiLU(x W1g^T) * (x W1u^T)) W2^T) with the weights stationary: no alignment pass, no
sort. Gate/up: one program per (expert, BLOCK_N intermediate columns) walks the flat routing in
BLOCK_M-pair chunks, skips a chunk with no pair for its expert (one vector compare and a sum), and
otherwise gathers the matching tokens' fp8 rows (other rows masked to 0) and runs, per 128-deep K
block, an fp8 tl.dot for gate and for up whose fp32 partials are scaled by the x group scales and
the W1 block scales before accumulating; SiLU(g) * u goes in fp32 to the pair's row of a (T*k, I)
scratch. Down: the same walk over (expert, BLOCK_N of H) with W2 (activation and W2 as bf16 on the
tensor cores; fp8 -> bf16 is exact), times the routing weight, into the pair's own fp32 row; a
combine program per (token, H tile) sums the k rows in slot order and stores bf16 (deterministic,
no atomics). Bytes: in decode every routed expert's weights are read once per N tile, whatever the
number of tokens that chose it, and unrouted experts read only the T*k ids. When it wins: decode and
small prefills (T*k up to a few hundred) with many experts, where the sorted design's alignment
launches and padding dominate. Limits: each program re-scans all T*k ids and, when several chunks
hit its expert, re-reads its weight tile per chunk, so large prefills should sort first; E programs
are launched even when few experts are routed; e4m3fnuz is not handled.
"""

import os

import torch
import triton
import triton.language as tl

GROUP = 128  # scale group along K for x, W1 and W2; also the K step
FP8_MAX = 448.0


@triton.jit
def _es_gate_up_kernel(
    x_ptr, xs_ptr, w1_ptr, w1s_ptr, ids_ptr, act_ptr,
    NUM_PAIRS, H, INTER,
    stride_xt, stride_xst, stride_we, stride_wn, stride_wse, stride_wsn,
    TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    expert = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < INTER
    offs_k = tl.arange(0, BLOCK_K)
    e64 = expert.to(tl.int64)
    wg_cols = w1_ptr + e64 * stride_we + offs_n[None, :].to(tl.int64) * stride_wn
    wu_cols = wg_cols + INTER * stride_wn
    gs_ptrs = w1s_ptr + e64 * stride_wse + (offs_n // BLOCK_K) * stride_wsn
    us_ptrs = w1s_ptr + e64 * stride_wse + ((INTER + offs_n) // BLOCK_K) * stride_wsn
    for m0 in range(0, NUM_PAIRS, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        hit = tl.load(ids_ptr + offs_m, mask=offs_m < NUM_PAIRS, other=-1) == expert
        if tl.sum(hit.to(tl.int32), axis=0) > 0:  # skip chunks without this expert
            token = (offs_m // TOP_K).to(tl.int64)
            acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for kb in range(0, tl.cdiv(H, BLOCK_K)):
                cols = kb * BLOCK_K + offs_k
                mask_k = cols < H
                x = tl.load(x_ptr + token[:, None] * stride_xt + cols[None, :],
                            mask=hit[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
                mask_w = mask_k[:, None] & mask_n[None, :]
                wg = tl.load(wg_cols + cols[:, None], mask=mask_w, other=0.0)
                wu = tl.load(wu_cols + cols[:, None], mask=mask_w, other=0.0)
                x_s = tl.load(xs_ptr + token * stride_xst + kb, mask=hit, other=0.0)
                gs = tl.load(gs_ptrs + kb, mask=mask_n, other=0.0)
                us = tl.load(us_ptrs + kb, mask=mask_n, other=0.0)
                if UPCAST:  # CPU interpreter: exact fp32 products of the fp8 codes
                    x = x.to(tl.float32)
                    part_g = tl.dot(x, wg.to(tl.float32), input_precision="ieee")
                    part_u = tl.dot(x, wu.to(tl.float32), input_precision="ieee")
                else:  # GPU: fp8 x fp8 tensor-core MMA with fp32 results
                    part_g = tl.dot(x, wg)
                    part_u = tl.dot(x, wu)
                acc_g += part_g * x_s[:, None] * gs[None, :]
                acc_u += part_u * x_s[:, None] * us[None, :]
            act = acc_g * tl.sigmoid(acc_g) * acc_u
            a_ptrs = act_ptr + offs_m[:, None].to(tl.int64) * INTER + offs_n[None, :]
            tl.store(a_ptrs, act, mask=hit[:, None] & mask_n[None, :])


@triton.jit
def _es_down_kernel(
    act_ptr, w2_ptr, w2s_ptr, ids_ptr, weights_ptr, slot_ptr,
    NUM_PAIRS, H, INTER,
    stride_we, stride_wn, stride_wse, stride_wsn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    expert = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < H
    offs_k = tl.arange(0, BLOCK_K)
    e64 = expert.to(tl.int64)
    w_cols = w2_ptr + e64 * stride_we + offs_n[None, :].to(tl.int64) * stride_wn
    s_ptrs = w2s_ptr + e64 * stride_wse + (offs_n // BLOCK_K) * stride_wsn
    for m0 in range(0, NUM_PAIRS, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        mask_m = offs_m < NUM_PAIRS
        hit = tl.load(ids_ptr + offs_m, mask=mask_m, other=-1) == expert
        if tl.sum(hit.to(tl.int32), axis=0) > 0:
            rows = offs_m[:, None].to(tl.int64)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for kb in range(0, tl.cdiv(INTER, BLOCK_K)):
                cols = kb * BLOCK_K + offs_k
                mask_k = cols < INTER
                a = tl.load(act_ptr + rows * INTER + cols[None, :],
                            mask=hit[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
                w = tl.load(w_cols + cols[:, None], mask=mask_k[:, None] & mask_n[None, :],
                            other=0.0)  # fmt: skip
                if UPCAST:
                    part = tl.dot(a, w.to(tl.float32), input_precision="ieee")
                else:  # bf16 tensor cores; fp8 -> bf16 is exact
                    part = tl.dot(a.to(tl.bfloat16), w.to(tl.bfloat16))
                acc += part * tl.load(s_ptrs + kb, mask=mask_n, other=0.0)[None, :]
            rw = tl.load(weights_ptr + offs_m, mask=hit, other=0.0).to(tl.float32)
            tl.store(slot_ptr + rows * H + offs_n[None, :], acc * rw[:, None],
                     mask=hit[:, None] & mask_n[None, :])  # fmt: skip


@triton.jit
def _es_combine_kernel(slot_ptr, out_ptr, H, TOP_K: tl.constexpr, BLOCK_H: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    total = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for j in tl.static_range(TOP_K):  # slot order: deterministic
        total += tl.load(slot_ptr + (token * TOP_K + j) * H + offs_h, mask=mask_h, other=0.0)
    tl.store(out_ptr + token * H + offs_h, total.to(out_ptr.dtype.element_ty), mask=mask_h)


def _check(hidden_states, w1, w2, topk_weights, topk_ids, a_scale, fc1_scale, fc2_scale) -> None:
    """Raise ValueError unless the fp8 tensors, scales and routing have matching shapes."""
    if hidden_states.dim() != 2 or w1.dim() != 3 or topk_ids.dim() != 2:
        raise ValueError("need hidden_states (T, H), w1 (E, 2I, H) and topk_ids (T, k)")
    t, h = hidden_states.shape
    e, i = w1.shape[0], w1.shape[1] // 2
    cd = triton.cdiv
    want = {"w1": (e, 2 * i, h), "w2": (e, h, i), "topk_weights": (t, topk_ids.shape[1]),
            "topk_ids": (t, topk_ids.shape[1]), "a_scale": (t, cd(h, GROUP)),
            "fc1_scale": (e, cd(2 * i, GROUP), cd(h, GROUP)),
            "fc2_scale": (e, cd(h, GROUP), cd(i, GROUP))}  # fmt: skip
    got = {"w1": w1, "w2": w2, "topk_weights": topk_weights, "topk_ids": topk_ids,
           "a_scale": a_scale, "fc1_scale": fc1_scale, "fc2_scale": fc2_scale}  # fmt: skip
    bad = [f"{k} {tuple(got[k].shape)} (want {v})" for k, v in want.items() if got[k].shape != v]
    if bad:
        raise ValueError("shape mismatch: " + ", ".join(bad))
    fp8 = {hidden_states.dtype, w1.dtype, w2.dtype}
    if fp8 != {torch.float8_e4m3fn} or topk_ids.dtype != torch.int32:
        raise ValueError(
            f"need fp8 e4m3fn hidden_states/w1/w2 and int32 topk_ids; got {fp8}, {topk_ids.dtype}"
        )


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def fp8_blockscale_fused_moe_expert_stationary(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    a_scale: torch.Tensor,
    fc1_scale: torch.Tensor,
    fc2_scale: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the block-scaled FP8 MoE output sum_j w_j * FFN_{e_j}(x) in bf16.

    Args:
        hidden_states: (T, H) fp8 e4m3fn activations.
        w1: (E, 2I, H) fp8 e4m3fn, gate rows [0, I) then up rows [I, 2I).
        w2: (E, H, I) fp8 e4m3fn.
        topk_weights: (T, k) routing weights (used in fp32).
        topk_ids: (T, k) int32 experts in [0, E).
        a_scale: (T, cdiv(H, 128)) fp32 per token and 128-wide group.
        fc1_scale: (E, cdiv(2I, 128), cdiv(H, 128)) fp32 per 128x128 block of W1.
        fc2_scale: (E, cdiv(H, 128), cdiv(I, 128)) fp32 per 128x128 block of W2.
        block_m: Routed pairs scanned per step (power of two >= 16); None = 16.
        block_n: Output columns per program (power of two >= 16); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, H) bf16, contiguous.

    Raises:
        ValueError: The shapes, dtypes or tile sizes do not fit.
    """
    _check(hidden_states, w1, w2, topk_weights, topk_ids, a_scale, fc1_scale, fc2_scale)
    bm, bn = block_m or 16, block_n or 64
    for name, value in (("block_m", bm), ("block_n", bn)):
        if value & (value - 1) or value < 16:
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot); got {value}")
    t, h = hidden_states.shape
    e, i, k = w1.shape[0], w1.shape[1] // 2, topk_ids.shape[1]
    out = torch.empty((t, h), dtype=torch.bfloat16, device=hidden_states.device)
    if t == 0:
        return out
    x, w1, w2 = hidden_states.contiguous(), w1.contiguous(), w2.contiguous()
    xs, s1, s2 = (s.contiguous() for s in (a_scale, fc1_scale, fc2_scale))
    ids = topk_ids.contiguous()
    pairs = t * k
    act = torch.empty((pairs, i), dtype=torch.float32, device=x.device)
    slot_out = torch.empty((pairs, h), dtype=torch.float32, device=x.device)
    meta = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": GROUP, "UPCAST": _interpreting(),
            "num_warps": num_warps or 4}  # fmt: skip
    _es_gate_up_kernel[(e, triton.cdiv(i, bn))](
        x, xs, w1, s1, ids, act, pairs, h, i,
        x.stride(0), xs.stride(0), w1.stride(0), w1.stride(1), s1.stride(0), s1.stride(1),
        TOP_K=k, **meta,
    )  # fmt: skip
    _es_down_kernel[(e, triton.cdiv(h, bn))](
        act, w2, s2, ids, topk_weights.contiguous(), slot_out, pairs, h, i,
        w2.stride(0), w2.stride(1), s2.stride(0), s2.stride(1), **meta,
    )  # fmt: skip
    block_h = min(1024, triton.next_power_of_2(h))
    _es_combine_kernel[(t, triton.cdiv(h, block_h))](slot_out, out, h, TOP_K=k, BLOCK_H=block_h)
    return out


def _dequantize(q: torch.Tensor, scale: torch.Tensor, rows: int) -> torch.Tensor:
    """Return fp32 ``q * scale`` with one scale per (rows x 128) block of the last two dims."""
    r, c = q.shape[-2:]
    full = scale.float().repeat_interleave(rows, -2).repeat_interleave(GROUP, -1)
    return q.float() * full[..., :r, :c]


def reference(
    hidden_states, w1, w2, topk_weights, topk_ids, a_scale, fc1_scale, fc2_scale
) -> torch.Tensor:
    """Return the MoE output from fully dequantised fp32 operands, cast to bf16 at the end."""
    x = _dequantize(hidden_states, a_scale, 1)
    w1_f, w2_f = _dequantize(w1, fc1_scale, GROUP), _dequantize(w2, fc2_scale, GROUP)
    inter = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for expert in range(w1.shape[0]):
        token, slot = (topk_ids == expert).nonzero(as_tuple=True)
        if token.numel() > 0:
            gate_up = x[token] @ w1_f[expert].T
            act = torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]
            y = act @ w2_f[expert].T * topk_weights[token, slot].float()[:, None]
            out.index_add_(0, token, y)
    return out.to(torch.bfloat16)


def _quantize(x: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise the last two dims of ``x`` to e4m3fn, one absmax/448 scale per rows x 128 block."""
    *lead, r, c = x.shape
    rb, cb = triton.cdiv(r, rows), triton.cdiv(c, GROUP)
    padded = x.new_zeros((*lead, rb * rows, cb * GROUP), dtype=torch.float32)
    padded[..., :r, :c] = x.float()
    blocks = padded.view(*lead, rb, rows, cb, GROUP)
    scale = (blocks.abs().amax(dim=(-3, -1)) / FP8_MAX).clamp_min(1e-10)
    q = (blocks / scale[..., :, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.view(*lead, rb * rows, cb * GROUP)[..., :r, :c].to(torch.float8_e4m3fn)
    return q.contiguous(), scale


def make_inputs(shape: dict, dtype: torch.dtype = torch.bfloat16, device: str = "cpu") -> dict:
    """Return quantised inputs for ``{"tokens", "hidden", "inter", "experts", "top_k"}``.

    x ~ N * 0.03 per 1x128 group, W1/W2 ~ N(0, 1) per 128x128 block (drawn in ``dtype``, then
    e4m3fn); distinct top-k experts of uniform logits, weights a softmax of N(0, 1).
    """
    t, h, i = shape["tokens"], shape["hidden"], shape["inter"]
    e, k = shape["experts"], shape["top_k"]
    hidden, a_scale = _quantize((torch.randn(t, h, device=device) * 0.03).to(dtype), 1)
    w1, s1 = _quantize(torch.randn(e, 2 * i, h, device=device).to(dtype), GROUP)
    w2, s2 = _quantize(torch.randn(e, h, i, device=device).to(dtype), GROUP)
    ids = torch.rand(t, e, device=device).topk(k, dim=-1).indices.to(torch.int32)
    weights = torch.softmax(torch.randn(t, k, device=device), dim=-1)
    return {"hidden_states": hidden, "w1": w1, "w2": w2, "topk_weights": weights,
            "topk_ids": ids, "a_scale": a_scale, "fc1_scale": s1, "fc2_scale": s2}  # fmt: skip
