"""
---
id: fp8_blockscale_fused_moe_token_loop
title: Decode FP8 block-scaled MoE, per-slot gate/up GEMV, per-(token, N tile) down over k slots
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [fp8_e4m3fn, bf16]
bound: memory
techniques: [gemv, token-loop, block-scaled-dequant, fused-silu-and-mul, in-register-combine,
  atomic-free, fp32-accumulate]
status: reference
launcher: fp8_blockscale_fused_moe_token_loop
tuning:
  block_n: [64, 16, 128]
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
  - {device: NVIDIA H200, shape: fp8_blockscale_fused_moe/0, dtype: fp8_e4m3fn, latency_us: 199061.0886, sol_fraction: 0.0082, date: '2026-12-03'}
---
Decode design of atrex30's fp8_blockscale_fused_moe (e4m3fn, x per 1x128 group, W1/W2 per 128x128
block, out bf16 = sum_j w_j * (SiLU(x W1g^T) * (x W1u^T)) W2^T), with no sorting and no padding.
Kernel 1, one program per (routed pair, BLOCK_N intermediate columns): a GEMV of the token's fp8 row
against the gate and up rows of its expert, one 128-deep K block at a time (fp8 upcast to fp32,
elementwise product, row sum), each partial scaled by the x group scale times the W1 block scale of
its column; the epilogue writes SiLU(g) * u in fp32 to a (T*k, I) scratch (not re-quantised, so it
matches the fp32 reference closely). Kernel 2, one program per (token, BLOCK_N output columns):
loops over the token's k slots, GEMVs that slot's activation row against W2 of its expert (block
scales per 128-deep partial), multiplies by the routing weight and sums the k results in registers,
then stores bf16 once: the combine costs nothing, needs no atomics and is deterministic. Bytes:
each routed expert's W1 and W2 are read once per token that chose it (1 B/elt, the dominant term in
decode), x 1 B/elt k times, the activation 8 B per intermediate element round trip. When it wins:
decode (T*k up to a few dozen pairs), where tensor-core tiles would be mostly padding and the
weight stream is the roofline. Limits: weights are re-read per token, so prefill (many tokens per
expert) should use the sorted grouped fp8 design; no tensor cores (GEMV on CUDA cores); e4m3fnuz
is not handled.
"""

import torch
import triton
import triton.language as tl

GROUP = 128  # scale group along K for x, W1 and W2; also the K step
FP8_MAX = 448.0


@triton.jit
def _gate_up_gemv_kernel(
    x_ptr, xs_ptr, w1_ptr, w1s_ptr, ids_ptr, act_ptr,
    H, INTER,
    stride_xt, stride_xst, stride_we, stride_wn, stride_wse, stride_wsn,
    TOP_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    pair = tl.program_id(0)
    token = (pair // TOP_K).to(tl.int64)
    expert = tl.load(ids_ptr + pair).to(tl.int64)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < INTER
    offs_k = tl.arange(0, BLOCK_K)
    wg_rows = w1_ptr + expert * stride_we + offs_n[:, None].to(tl.int64) * stride_wn
    wu_rows = wg_rows + INTER * stride_wn
    ws_base = w1s_ptr + expert * stride_wse
    acc_g = tl.zeros((BLOCK_N,), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for kb in range(0, tl.cdiv(H, BLOCK_K)):
        cols = kb * BLOCK_K + offs_k
        mask_k = cols < H
        x = tl.load(x_ptr + token * stride_xt + cols, mask=mask_k, other=0.0).to(tl.float32)
        m2 = mask_n[:, None] & mask_k[None, :]
        wg = tl.load(wg_rows + cols[None, :], mask=m2, other=0.0).to(tl.float32)
        wu = tl.load(wu_rows + cols[None, :], mask=m2, other=0.0).to(tl.float32)
        x_s = tl.load(xs_ptr + token * stride_xst + kb).to(tl.float32)
        gs = tl.load(ws_base + (offs_n // BLOCK_K) * stride_wsn + kb, mask=mask_n, other=0.0)
        us = tl.load(ws_base + ((INTER + offs_n) // BLOCK_K) * stride_wsn + kb, mask=mask_n,
                     other=0.0)  # fmt: skip
        acc_g += tl.sum(wg * x[None, :], axis=1) * (gs * x_s)
        acc_u += tl.sum(wu * x[None, :], axis=1) * (us * x_s)
    act = acc_g * tl.sigmoid(acc_g) * acc_u  # SiLU(gate) * up, fp32
    tl.store(act_ptr + pair.to(tl.int64) * INTER + offs_n, act, mask=mask_n)


@triton.jit
def _down_gemv_combine_kernel(
    act_ptr, w2_ptr, w2s_ptr, ids_ptr, weights_ptr, out_ptr,
    H, INTER,
    stride_we, stride_wn, stride_wse, stride_wsn,
    TOP_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0).to(tl.int64)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < H
    offs_k = tl.arange(0, BLOCK_K)
    out = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for j in range(0, TOP_K):
        pair = token * TOP_K + j
        expert = tl.load(ids_ptr + pair).to(tl.int64)
        rows = w2_ptr + expert * stride_we + offs_n[:, None].to(tl.int64) * stride_wn
        s_rows = w2s_ptr + expert * stride_wse + (offs_n // BLOCK_K) * stride_wsn
        part = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for kb in range(0, tl.cdiv(INTER, BLOCK_K)):
            cols = kb * BLOCK_K + offs_k
            mask_k = cols < INTER
            a = tl.load(act_ptr + pair * INTER + cols, mask=mask_k, other=0.0)
            w = tl.load(rows + cols[None, :], mask=mask_n[:, None] & mask_k[None, :],
                        other=0.0).to(tl.float32)  # fmt: skip
            part += tl.sum(w * a[None, :], axis=1) * tl.load(s_rows + kb, mask=mask_n, other=0.0)
        out += part * tl.load(weights_ptr + pair).to(tl.float32)
    tl.store(out_ptr + token * H + offs_n, out.to(out_ptr.dtype.element_ty), mask=mask_n)


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


def fp8_blockscale_fused_moe_token_loop(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    a_scale: torch.Tensor,
    fc1_scale: torch.Tensor,
    fc2_scale: torch.Tensor,
    *,
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
        block_n: Output columns per program (power of two); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, H) bf16, contiguous.

    Raises:
        ValueError: The shapes, dtypes or block_n do not fit.
    """
    _check(hidden_states, w1, w2, topk_weights, topk_ids, a_scale, fc1_scale, fc2_scale)
    bn = block_n or 64
    if bn & (bn - 1):
        raise ValueError(f"block_n must be a power of two; got {bn}")
    t, h = hidden_states.shape
    i, k = w1.shape[1] // 2, topk_ids.shape[1]
    out = torch.empty((t, h), dtype=torch.bfloat16, device=hidden_states.device)
    if t == 0:
        return out
    x, w1, w2 = hidden_states.contiguous(), w1.contiguous(), w2.contiguous()
    xs, s1, s2 = (s.contiguous() for s in (a_scale, fc1_scale, fc2_scale))
    ids = topk_ids.contiguous()
    act = torch.empty((t * k, i), dtype=torch.float32, device=x.device)
    warps = num_warps or 4
    _gate_up_gemv_kernel[(t * k, triton.cdiv(i, bn))](
        x, xs, w1, s1, ids, act, h, i,
        x.stride(0), xs.stride(0), w1.stride(0), w1.stride(1), s1.stride(0), s1.stride(1),
        TOP_K=k, BLOCK_N=bn, BLOCK_K=GROUP, num_warps=warps,
    )  # fmt: skip
    _down_gemv_combine_kernel[(t, triton.cdiv(h, bn))](
        act, w2, s2, ids, topk_weights.contiguous(), out, h, i,
        w2.stride(0), w2.stride(1), s2.stride(0), s2.stride(1),
        TOP_K=k, BLOCK_N=bn, BLOCK_K=GROUP, num_warps=warps,
    )  # fmt: skip
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
