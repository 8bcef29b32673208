"""
---
id: fp8_blockscale_fused_moe
title: FP8 block-scaled fused MoE, sorted grouped GEMMs dequantising per 128 inside the K loop
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [fp8_e4m3fn, bf16]
bound: compute
techniques: [moe-align-block-size, grouped-gemm, fp8-tl-dot, block-scaled-dequant,
  fused-silu-and-mul, w8a16-down-proj, fused-combine-cast, fp32-accumulate]
status: reference
launcher: fp8_blockscale_fused_moe
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [128, 64, 32]
  num_warps: [4, 8]
  num_stages: [3, 2, 4]
args:
  hidden: {shape: [T, H], dtypes: [fp8_e4m3fn], aliases: [hidden_states, x]}
  a_scale: {shape: [T, ceil(H / 128)], dtypes: [fp32], aliases: [a_scales, x_scale]}
  w1: {shape: [E, 2*I, H], dtypes: [fp8_e4m3fn], aliases: [w13, gate_up_proj]}
  w1_scale: {shape: [E, ceil(2 * I / 128), ceil(H / 128)], dtypes: [fp32], aliases: [w13_scale]}
  w2: {shape: [E, H, I], dtypes: [fp8_e4m3fn], aliases: [down_proj]}
  w2_scale: {shape: [E, ceil(H / 128), ceil(I / 128)], dtypes: [fp32]}
  topk_weights: {shape: [T, TOPK], dtypes: [fp32], aliases: [routing_weights]}
  topk_ids: {shape: [T, TOPK], dtypes: [int32], aliases: [selected_experts]}
returns: [{name: out, shape: [T, H], dtype: bf16}]
problem:
  shapes: [{tokens: 3, hidden: 200, inter: 96, experts: 5, top_k: 3}]
  dtypes: [bf16]
measured:
  - {device: NVIDIA H200, shape: fp8_blockscale_fused_moe/0, dtype: fp8_e4m3fn, latency_us: 9706.2721, sol_fraction: 0.1719, date: '2026-12-04'}
---
DeepSeek-style FP8 MoE, all quantisation NVIDIA e4m3fn (max 448, scale = absmax / 448): x (T, H) per
1x128 token group with scales (T, H/128), W1 (E, 2I, H) and W2 (E, H, I) per 128x128 block with fp32
scales; out (T, H) bf16 = sum over the k routed slots of w * (SiLU(x W1g^T) * (x W1u^T)) W2^T. Slots
are aligned to BLOCK_M blocks per expert (histogram + atomics, an offsets kernel, atomic scatter; a
block's first slot names its expert). Gate/up: each program gathers its block's fp8 rows of x and,
per 128-deep K block (BLOCK_K = the scale group), runs an fp8 tensor-core dot for gate and for up,
then rescales each fp32 partial by the row scales of x times the per-column block scales of W1 (gate
column n uses block n // 128, up column n uses (I + n) // 128) before adding it to the fp32
accumulator; the epilogue applies SiLU(g) * u and stores bf16. Down: the bf16 activation times W2
cast fp8 -> bf16 (exact) on bf16 tensor cores, each 128-deep partial scaled by its W2 block scale,
times the routing weight, into one fp32 row per slot; a combine kernel sums each token's k rows in
order and writes bf16. Bytes: W1/W2 1 B per element once per row block, scales 1/128 of that, x 1 B
gathered k times, activation 2 B and the slot rows 4 B per element round trip. Limits: the down GEMM
runs at bf16, not fp8, MMA rate (no requantisation of the activation, which would add ~2% error);
e4m3fnuz (AMD, max 240) is not handled; padding and early-exit blocks as in any sorted grouped MoE;
decode batches waste most of each block.
"""

import os

import torch
import triton
import triton.language as tl

GROUP = 128  # scale group: 1x128 for x, 128x128 for W1/W2; also BLOCK_K
FP8_MAX = 448.0  # e4m3fn
ALIGN_CHUNK = 256


@triton.jit
def _fp8_moe_count_kernel(ids_ptr, counts_ptr, NUM_PAIRS, E, CHUNK: tl.constexpr,
                          BLOCK_E: tl.constexpr):  # fmt: skip
    # per-chunk histogram (masked lanes fall in spare bin E), one atomic per non-empty expert
    offs = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    ids = tl.load(ids_ptr + offs, mask=offs < NUM_PAIRS, other=E)
    hist = tl.histogram(ids, BLOCK_E)
    offs_e = tl.arange(0, BLOCK_E)
    tl.atomic_add(counts_ptr + offs_e, hist, mask=(offs_e < E) & (hist > 0))


@triton.jit
def _fp8_moe_scatter_kernel(ids_ptr, cursor_ptr, sorted_ptr, NUM_PAIRS, CHUNK: tl.constexpr):
    # each pair claims the next free slot of its expert (order within an expert is arbitrary)
    offs = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < NUM_PAIRS
    ids = tl.load(ids_ptr + offs, mask=mask, other=0)
    slot = tl.atomic_add(cursor_ptr + ids, 1, mask=mask)
    tl.store(sorted_ptr + slot, offs, mask=mask)


@triton.jit
def _fp8_moe_offsets_kernel(counts_ptr, cursor_ptr, E, BLOCK_M: tl.constexpr,
                            BLOCK_E: tl.constexpr):  # fmt: skip
    # each expert's first slot: the exclusive prefix sum of the counts padded to BLOCK_M
    offs_e = tl.arange(0, BLOCK_E)
    counts = tl.load(counts_ptr + offs_e, mask=offs_e < E, other=0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    tl.store(cursor_ptr + offs_e, tl.cumsum(padded, 0) - padded, mask=offs_e < E)


@triton.jit
def _fp8_moe_gate_up_kernel(
    # pointers
    x_ptr, xs_ptr,  # fp8 (T, H), fp32 (T, H/128)
    w1_ptr, w1s_ptr,  # fp8 (E, 2I, H), fp32 (E, 2I/128, H/128)
    act_ptr,  # bf16 (max_len, I), sorted-slot rows
    sorted_ptr, ids_ptr,  # int32 (max_len,) sorted slots, (T * k,) expert of each pair
    # sizes
    NUM_PAIRS, H, INTER,
    # strides (elements)
    stride_xt, stride_xst,
    stride_we, stride_wn, stride_wse, stride_wsn,
    stride_am,
    # meta
    TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    pid_b = tl.program_id(0)
    # a block's first slot is a real pair (naming its expert) unless the block is all padding
    first = tl.load(sorted_ptr + pid_b * BLOCK_M)
    if first >= NUM_PAIRS:
        return
    expert = tl.load(ids_ptr + first).to(tl.int64)
    offs_m = pid_b * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + offs_m)
    mask_m = pair < NUM_PAIRS
    token = (pair // TOP_K).to(tl.int64)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < INTER
    offs_k = tl.arange(0, BLOCK_K)

    # operands (x rows gathered by token; W1 gate rows n, up rows INTER + n; K contiguous)
    x_ptrs = x_ptr + token[:, None] * stride_xt + offs_k[None, :]
    w1_e = w1_ptr + expert * stride_we
    wg_ptrs = w1_e + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None]
    wu_ptrs = wg_ptrs + INTER * stride_wn
    # scales, one per 128 along K: x per row, W1 per 128-row block of each output column
    xs_ptrs = xs_ptr + token * stride_xst
    ws_base = w1s_ptr + expert * stride_wse
    wgs_ptrs = ws_base + (offs_n // BLOCK_K) * stride_wsn
    wus_ptrs = ws_base + ((INTER + offs_n) // BLOCK_K) * stride_wsn

    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32 accumulators
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(H, BLOCK_K)):
        mask_k = offs_k < H - kb * BLOCK_K
        mask_w = mask_k[:, None] & mask_n[None, :]
        x = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        wg = tl.load(wg_ptrs, mask=mask_w, other=0.0)
        wu = tl.load(wu_ptrs, mask=mask_w, other=0.0)
        x_s = tl.load(xs_ptrs + kb, mask=mask_m, other=0.0)
        wg_s = tl.load(wgs_ptrs + kb, mask=mask_n, other=0.0)
        wu_s = tl.load(wus_ptrs + kb, mask=mask_n, other=0.0)
        if UPCAST:
            # CPU interpreter: dequantise the fp8 codes to fp32 and multiply exactly
            x = x.to(tl.float32)
            part_g = tl.dot(x, wg.to(tl.float32), input_precision="ieee")
            part_u = tl.dot(x, wu.to(tl.float32), input_precision="ieee")
        else:
            part_g = tl.dot(x, wg)  # GPU: fp8 x fp8 tensor-core MMA, fp32 result
            part_u = tl.dot(x, wu)
        # dequantise the 128-deep partial: row scale of x times column block scale of W1
        acc_g += part_g * x_s[:, None] * wg_s[None, :]
        acc_u += part_u * x_s[:, None] * wu_s[None, :]
        x_ptrs, wg_ptrs, wu_ptrs = x_ptrs + BLOCK_K, wg_ptrs + BLOCK_K, wu_ptrs + BLOCK_K

    act = acc_g * tl.sigmoid(acc_g) * acc_u  # SiLU(gate) * up in fp32
    act_ptrs = act_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_n[None, :]
    tl.store(act_ptrs, act.to(act_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _fp8_moe_down_kernel(
    # pointers
    act_ptr,  # bf16 (max_len, I)
    w2_ptr, w2s_ptr,  # fp8 (E, H, I), fp32 (E, H/128, I/128)
    weights_ptr,  # fp32 (T * k,)
    slot_out_ptr,  # fp32 (T * k, H)
    sorted_ptr, ids_ptr,  # int32 (max_len,) sorted slots, (T * k,) expert of each pair
    # sizes
    NUM_PAIRS, H, INTER,
    # strides (elements)
    stride_am, stride_we, stride_wn, stride_wse, stride_wsn, stride_sm,
    # meta
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid_b = tl.program_id(0)
    # a block's first slot is a real pair (naming its expert) unless the block is all padding
    first = tl.load(sorted_ptr + pid_b * BLOCK_M)
    if first >= NUM_PAIRS:
        return
    expert = tl.load(ids_ptr + first).to(tl.int64)
    offs_m = pid_b * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + offs_m)
    mask_m = pair < NUM_PAIRS
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < H
    offs_k = tl.arange(0, BLOCK_K)

    a_ptrs = act_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :]
    w2_e = w2_ptr + expert * stride_we
    w_ptrs = w2_e + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None]
    ws_ptrs = w2s_ptr + expert * stride_wse + (offs_n // BLOCK_K) * stride_wsn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32 accumulation
    for kb in range(0, tl.cdiv(INTER, BLOCK_K)):
        mask_k = offs_k < INTER - kb * BLOCK_K
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        w_s = tl.load(ws_ptrs + kb, mask=mask_n, other=0.0)
        if UPCAST:
            part = tl.dot(a.to(tl.float32), w.to(tl.float32), input_precision="ieee")
        else:
            part = tl.dot(a, w.to(a.dtype))  # fp8 -> bf16 is exact; bf16 MMA
        acc += part * w_s[None, :]
        a_ptrs, w_ptrs = a_ptrs + BLOCK_K, w_ptrs + BLOCK_K

    acc = acc * tl.load(weights_ptr + pair, mask=mask_m, other=0.0)[:, None]  # routing weight
    out_ptrs = slot_out_ptr + pair[:, None].to(tl.int64) * stride_sm + offs_n[None, :]
    tl.store(out_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _fp8_moe_combine_kernel(slot_out_ptr, out_ptr, H, TOP_K: tl.constexpr,
                            BLOCK_H: tl.constexpr):  # fmt: skip
    # out[t] = bf16(sum_j slot_out[t * k + j]) in slot order: combine and cast in one pass
    token = tl.program_id(0).to(tl.int64)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    total = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        total += tl.load(slot_out_ptr + (token * TOP_K + j) * H + offs_h, mask=mask_h, other=0.0)
    tl.store(out_ptr + token * H + offs_h, total.to(out_ptr.dtype.element_ty), mask=mask_h)


def _launch_config(num_pairs: int, num_experts: int) -> dict[str, int]:
    """Return tiles: BLOCK_M follows the mean slots per expert (less padding for small batches)."""
    # gate and up accumulators plus their fp8 partials: cap the tile at 64 x 128 with 8 warps
    block_m = 16 if num_pairs <= 16 * max(num_experts, 1) else 64  # 16 when <= 16 slots per expert
    return {"block_m": block_m, "block_n": 128, "num_warps": 4 if block_m == 16 else 8,
            "num_stages": 3}  # fmt: skip


def _align(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, ...]:
    """Return (sorted pair ids padded per expert to block_m, flat expert ids, block count)."""
    ids, device = topk_ids.contiguous().view(-1), topk_ids.device
    num_pairs = ids.numel()
    max_len = num_pairs + min(num_experts, num_pairs) * (block_m - 1)
    grid = (triton.cdiv(num_pairs, ALIGN_CHUNK),)
    counts = torch.zeros(num_experts, dtype=torch.int32, device=device)
    _fp8_moe_count_kernel[grid](ids, counts, num_pairs, num_experts, CHUNK=ALIGN_CHUNK,
                                BLOCK_E=triton.next_power_of_2(num_experts + 1))  # fmt: skip
    cursor = torch.empty(num_experts, dtype=torch.int32, device=device)
    _fp8_moe_offsets_kernel[(1,)](counts, cursor, num_experts, BLOCK_M=block_m,
                                 BLOCK_E=triton.next_power_of_2(num_experts))  # fmt: skip
    sorted_ids = torch.full((max_len,), num_pairs, dtype=torch.int32, device=device)
    _fp8_moe_scatter_kernel[grid](ids, cursor, sorted_ids, num_pairs, CHUNK=ALIGN_CHUNK)
    return sorted_ids, ids, triton.cdiv(max_len, block_m)


def _check_shapes(hidden, a_scale, w1, w1_scale, w2, w2_scale, topk_weights, topk_ids) -> None:
    """Raise ValueError unless the fp8 tensors and their scales have matching shapes."""
    t, h = hidden.shape
    e, i = w1.shape[0], w1.shape[1] // 2
    cd = triton.cdiv
    want = {"hidden": (t, h), "a_scale": (t, cd(h, GROUP)), "w1": (e, 2 * i, h),
            "w1_scale": (e, cd(2 * i, GROUP), cd(h, GROUP)), "w2": (e, h, i),
            "w2_scale": (e, cd(h, GROUP), cd(i, GROUP)), "topk_weights": tuple(topk_ids.shape),
            "topk_ids": (t, topk_ids.shape[1])}  # fmt: skip
    got = {"hidden": hidden, "a_scale": a_scale, "w1": w1, "w1_scale": w1_scale, "w2": w2,
           "w2_scale": w2_scale, "topk_weights": topk_weights, "topk_ids": topk_ids}  # fmt: skip
    bad = [f"{k} {tuple(got[k].shape)} (want {v})" for k, v in want.items() if got[k].shape != v]
    if bad:
        raise ValueError("shape mismatch: " + ", ".join(bad))
    fp8 = {hidden.dtype, w1.dtype, w2.dtype}
    if fp8 != {torch.float8_e4m3fn} or topk_ids.dtype != torch.int32:
        raise ValueError(f"need e4m3fn hidden/w1/w2, int32 ids; got {fp8}, {topk_ids.dtype}")


def fp8_blockscale_fused_moe(
    hidden: torch.Tensor,
    a_scale: torch.Tensor,
    w1: torch.Tensor,
    w1_scale: torch.Tensor,
    w2: torch.Tensor,
    w2_scale: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return the block-scaled FP8 MoE output sum_j w_j * FFN_{e_j}(x) in bf16.

    Args:
        hidden: (T, H) fp8 e4m3fn token activations (copied if not contiguous).
        a_scale: (T, cdiv(H, 128)) fp32, one scale per token and 128-wide group.
        w1: (E, 2I, H) fp8 e4m3fn, gate rows [0, I) then up rows [I, 2I).
        w1_scale: (E, cdiv(2I, 128), cdiv(H, 128)) fp32, one scale per 128x128 block.
        w2: (E, H, I) fp8 e4m3fn.
        w2_scale: (E, cdiv(H, 128), cdiv(I, 128)) fp32, one scale per 128x128 block.
        topk_weights: (T, k) fp32 routing weights.
        topk_ids: (T, k) int32 experts in [0, E).
        block_m: Sorted slots per block and alignment size (power of two >= 16); None picks.
        block_n: Output columns per program (power of two >= 16); None = 128.
        num_warps: Warps per GEMM program; None picks.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        out: (T, H) bf16, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    _check_shapes(hidden, a_scale, w1, w1_scale, w2, w2_scale, topk_weights, topk_ids)
    t, h = hidden.shape
    e, i, top_k = w1.shape[0], w1.shape[1] // 2, topk_ids.shape[1]
    out = torch.empty((t, h), dtype=torch.bfloat16, device=hidden.device)
    if t == 0:
        return out
    cfg = _launch_config(t * top_k, e)
    given = {"block_m": block_m, "block_n": block_n, "num_warps": num_warps,
             "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    hidden, w1, w2 = hidden.contiguous(), w1.contiguous(), w2.contiguous()
    a_s, w1_s, w2_s = (s.contiguous() for s in (a_scale, w1_scale, w2_scale))  # fp32 in-kernel
    sorted_ids, flat_ids, num_blocks = _align(topk_ids, e, cfg["block_m"])
    act = torch.empty((sorted_ids.numel(), i), dtype=torch.bfloat16, device=hidden.device)
    slot_out = torch.empty((t * top_k, h), dtype=torch.float32, device=hidden.device)
    meta = {"BLOCK_M": cfg["block_m"], "BLOCK_N": cfg["block_n"], "BLOCK_K": GROUP,
            "UPCAST": os.environ.get("TRITON_INTERPRET") == "1",  # fp32 dots in the interpreter
            "num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}  # fmt: skip
    _fp8_moe_gate_up_kernel[(num_blocks, triton.cdiv(i, cfg["block_n"]))](
        hidden, a_s, w1, w1_s, act, sorted_ids, flat_ids,
        t * top_k, h, i,
        hidden.stride(0), a_s.stride(0),
        w1.stride(0), w1.stride(1), w1_s.stride(0), w1_s.stride(1),
        act.stride(0),
        TOP_K=top_k, **meta,
    )  # fmt: skip
    _fp8_moe_down_kernel[(num_blocks, triton.cdiv(h, cfg["block_n"]))](
        act, w2, w2_s, topk_weights.contiguous().view(-1), slot_out,
        sorted_ids, flat_ids,
        t * top_k, h, i,
        act.stride(0), w2.stride(0), w2.stride(1), w2_s.stride(0), w2_s.stride(1),
        slot_out.stride(0),
        **meta,
    )  # fmt: skip
    block_h = min(1024, triton.next_power_of_2(h))
    grid = (t, triton.cdiv(h, block_h))
    _fp8_moe_combine_kernel[grid](slot_out, out, h, TOP_K=top_k, BLOCK_H=block_h, num_warps=4)
    return out


def _dequantize(q: torch.Tensor, scale: torch.Tensor, rows: int) -> torch.Tensor:
    """Return fp32 ``q * scale`` with one scale per (rows x 128) block of the last two dims."""
    r, c = q.shape[-2:]
    full = scale.float().repeat_interleave(rows, -2).repeat_interleave(GROUP, -1)
    return q.float() * full[..., :r, :c]


def reference(hidden, a_scale, w1, w1_scale, w2, w2_scale, topk_weights, topk_ids) -> torch.Tensor:
    """Return the MoE output from fully dequantised fp32 operands, cast to bf16 at the end."""
    x = _dequantize(hidden, a_scale, 1)
    w1_f, w2_f = _dequantize(w1, w1_scale, GROUP), _dequantize(w2, w2_scale, GROUP)
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
    scale = (blocks.abs().amax(dim=(-3, -1)) / FP8_MAX).clamp_min(1e-10)  # (*lead, rb, cb)
    q = (blocks / scale[..., :, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.view(*lead, rb * rows, cb * GROUP)[..., :r, :c].to(torch.float8_e4m3fn)
    return q.contiguous(), scale


def make_inputs(shape: dict, dtype: torch.dtype = torch.bfloat16, device: str = "cpu") -> dict:
    """Return quantised inputs for ``{"tokens", "hidden", "inter", "experts", "top_k"}``.

    Drawn in ``dtype`` (bf16), then e4m3fn: x ~ N * 0.03 per 1x128 group, W1/W2 ~ N(0, 1) per
    128x128 block; distinct top-k experts of uniform logits, weights a softmax of N(0, 1)."""
    t, h, i = shape["tokens"], shape["hidden"], shape["inter"]
    e, k = shape["experts"], shape["top_k"]
    hidden, a_scale = _quantize((torch.randn(t, h, device=device) * 0.03).to(dtype), 1)
    w1, w1_scale = _quantize(torch.randn(e, 2 * i, h, device=device).to(dtype), GROUP)
    w2, w2_scale = _quantize(torch.randn(e, h, i, device=device).to(dtype), GROUP)
    topk_ids = torch.rand(t, e, device=device).topk(k, dim=-1).indices.to(torch.int32)
    topk_weights = torch.softmax(torch.randn(t, k, device=device), dim=-1)
    return {"hidden": hidden, "a_scale": a_scale, "w1": w1, "w1_scale": w1_scale, "w2": w2,
            "w2_scale": w2_scale, "topk_weights": topk_weights, "topk_ids": topk_ids}  # fmt: skip
