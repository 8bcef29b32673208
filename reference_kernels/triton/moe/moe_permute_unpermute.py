"""
---
id: moe_permute_unpermute
title: MoE permute of token rows into expert-contiguous order, and the weighted unpermute back
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [histogram, prefix-sum, counting-sort, row-scatter, inverse-permutation,
  expert-contiguous-layout, weighted-gather-combine, unrolled-slot-loop, fp32-accumulate]
status: reference
launcher: moe_permute
tuning:
  block_r: [4, 1, 8]
  block_h: [512, 128, 1024]
  num_warps: [4, 2, 8]
args:
  hidden: {shape: [T, H], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, x]}
  topk_ids: {shape: [T, TOPK], dtypes: [int32], aliases: [selected_experts]}
  num_experts: {type: int, aliases: [E, n_experts]}
returns:
  - {name: permuted, shape: [T*TOPK, H], dtype: hidden}
  - {name: dest_of_pair, shape: [T*TOPK], dtype: int32}
  - {name: expert_offsets, shape: [num_experts + 1], dtype: int64}
problem:
  shapes: [{tokens: 9, hidden: 100, experts: 5, top_k: 2}, {tokens: 1, hidden: 64, experts: 3, top_k: 3}]
  dtypes: [fp32, bf16]
measured: []
---
The data movement around a grouped-GEMM MoE without padding (the layout CUTLASS grouped GEMMs and
DeepEP consume). moe_permute copies each routed pair's hidden row into an expert-contiguous buffer
in two launches. A one-program routing kernel does a stable counting sort of the flat expert ids
on the device: a first pass over the pairs histograms them per expert (a one-hot (BLOCK_P, E) tile
summed over rows), an exclusive prefix sum gives each expert's run offset, and a second pass ranks
every pair within its expert by a column cumsum of the one-hot tile plus the running count, so pair
p = t * k + j lands after every pair of a lower expert and after earlier pairs of its own expert:
dest_of_pair[p]. Then one program per (BLOCK_R pairs, BLOCK_H columns) reads hidden[p // k] and
scatters it to row dest_of_pair[p], so the way back needs no search. moe_unpermute (a third
kernel) gives out[t] = scale * sum_j w[t, j] * expert_out[dest_of_pair[t * k + j]]: one program per
(BLOCK_R tokens, BLOCK_H columns) with an unrolled loop over the k slots, fp32 sums, one rounding.
Bytes: permute reads H elements per pair (a token's row is read k times, from L2 after the first)
and writes H; unpermute reads k rows and writes one per token; both stream at HBM bandwidth with
16-byte vector rows. Limits: the counting sort is one program (two passes over T * k ids, E-wide
tiles): fine for decode and moderate prefill batches, serial for very large ones (a multi-block
scan would spread it); ids must lie in [0, num_experts): a pair outside gets dest_of_pair = -1, is
dropped by the permute and adds nothing in the unpermute (check_inputs raises for it with a host
read, outside the launch); H should be a multiple of 8 (bf16) for full vectorisation; no fp8
quantisation on the way in (a fused quantising permute would save a pass).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_route_kernel(
    ids_ptr,  # int32 (P,) flat expert id of each pair
    dest_of_pair_ptr,  # int32 (P,) out: the row of each pair in the permuted buffer (-1: bad id)
    offsets_ptr,  # int64 (E + 1,) out: start of each expert's run, then the routed-pair count
    P,
    E,
    BLOCK_P: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    offs_e = tl.arange(0, BLOCK_E)
    mask_e = offs_e < E
    # pass 1: histogram of the ids (one-hot tile summed over its pair rows)
    counts = tl.zeros([BLOCK_E], dtype=tl.int32)
    for p0 in range(0, P, BLOCK_P):
        offs_p = p0 + tl.arange(0, BLOCK_P)
        ids = tl.load(ids_ptr + offs_p, mask=offs_p < P, other=-1)
        hit = ((ids[:, None] == offs_e[None, :]) & mask_e[None, :]).to(tl.int32)
        counts += tl.sum(hit, axis=0)
    starts = tl.cumsum(counts, axis=0) - counts  # exclusive prefix sum: each expert's run start
    tl.store(offsets_ptr + offs_e, starts.to(tl.int64), mask=mask_e)
    tl.store(offsets_ptr + E, tl.sum(counts, axis=0).to(tl.int64))
    # pass 2: stable rank within the expert = earlier hits in this tile + the running count
    running = starts
    for p0 in range(0, P, BLOCK_P):
        offs_p = p0 + tl.arange(0, BLOCK_P)
        ids = tl.load(ids_ptr + offs_p, mask=offs_p < P, other=-1)
        hit = ((ids[:, None] == offs_e[None, :]) & mask_e[None, :]).to(tl.int32)
        rank = tl.cumsum(hit, axis=0) - hit + running[None, :]
        dest = tl.sum(hit * rank, axis=1)  # one hit per row at most
        dest = tl.where(tl.sum(hit, axis=1) > 0, dest, -1)
        tl.store(dest_of_pair_ptr + offs_p, dest, mask=offs_p < P)
        running += tl.sum(hit, axis=0)


@triton.jit
def _moe_permute_kernel(
    x_ptr,  # (T, H)
    dest_of_pair_ptr,  # int32 (P,) destination row of each pair (-1: dropped)
    out_ptr,  # (P, H)
    P,
    H,
    stride_xt,
    stride_op,
    TOP_K: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)  # source pairs
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    dest = tl.load(dest_of_pair_ptr + offs_r, mask=offs_r < P, other=-1)
    mask_r = (offs_r < P) & (dest >= 0)
    mask = mask_r[:, None] & (offs_h < H)[None, :]
    rows = tl.load(x_ptr + (offs_r // TOP_K).to(tl.int64)[:, None] * stride_xt + offs_h[None, :],
                   mask=mask, other=0.0)  # fmt: skip
    tl.store(out_ptr + dest.to(tl.int64)[:, None] * stride_op + offs_h[None, :], rows, mask=mask)


@triton.jit
def _moe_unpermute_kernel(
    y_ptr,  # (P, H) expert outputs in permuted order
    dest_of_pair_ptr,  # int32 (P,)
    w_ptr,  # fp32 (T, TOP_K) routing weights
    out_ptr,  # (T, H)
    T,
    H,
    scale,
    stride_yp,
    stride_ot,
    TOP_K: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    offs_t = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_t = offs_t < T
    mask = mask_t[:, None] & (offs_h < H)[None, :]
    acc = tl.zeros((BLOCK_R, BLOCK_H), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        pair = offs_t * TOP_K + j
        dest = tl.load(dest_of_pair_ptr + pair, mask=mask_t, other=-1)
        w = tl.load(w_ptr + pair, mask=mask_t, other=0.0)
        ok = mask & (dest >= 0)[:, None]  # a dropped pair (-1) adds nothing
        y = tl.load(y_ptr + dest.to(tl.int64)[:, None] * stride_yp + offs_h[None, :], mask=ok,
                    other=0.0)  # fmt: skip
        acc += y.to(tl.float32) * w[:, None]
    o_ptrs = out_ptr + offs_t.to(tl.int64)[:, None] * stride_ot + offs_h[None, :]
    tl.store(o_ptrs, (acc * scale).to(out_ptr.dtype.element_ty), mask=mask)


def _launch_config(h: int) -> dict[str, int]:
    """Return up to 1024 columns per program and rows stacked to ~4K elements."""
    block_h = min(1024, triton.next_power_of_2(h))
    return {"block_r": max(1, min(8, 4096 // block_h)), "block_h": block_h, "num_warps": 4}


def _config(h: int, given: dict[str, int | None]) -> dict[str, int]:
    cfg = _launch_config(h)
    cfg.update({key: value for key, value in given.items() if value is not None})
    return cfg


def moe_permute(
    hidden: torch.Tensor,
    topk_ids: torch.Tensor,
    num_experts: int,
    *,
    block_r: int | None = None,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (permuted rows, dest_of_pair, expert_offsets) for an expert-contiguous layout.

    Args:
        hidden: (T, H) bf16/fp16/fp32, rows contiguous.
        topk_ids: (T, k) int32 expert ids in [0, num_experts) (a pair outside is dropped).
        num_experts: E.
        block_r: Destination rows per program; None picks by H.
        block_h: Columns per program (power of two); None picks by H.
        num_warps: Warps per program; None = 4.

    Returns:
        permuted: (T * k, H), rows of expert e at [expert_offsets[e], expert_offsets[e + 1]);
        dest_of_pair: int32 (T * k,), the row of pair t * k + j in ``permuted`` (-1: dropped);
        expert_offsets: int64 (E + 1,), the exclusive prefix sum of the per-expert counts.

    Raises:
        ValueError: The shapes or dtypes do not fit (check_inputs checks the id values).
    """
    if hidden.dim() != 2 or topk_ids.dim() != 2 or topk_ids.shape[0] != hidden.shape[0]:
        raise ValueError(f"need hidden (T, H) and topk_ids (T, k); got {tuple(hidden.shape)}, "
                         f"{tuple(topk_ids.shape)}")  # fmt: skip
    if topk_ids.dtype != torch.int32 or num_experts < 1:
        raise ValueError(f"need int32 topk_ids and num_experts >= 1; got {topk_ids.dtype}, "
                         f"{num_experts}")  # fmt: skip
    t, h = hidden.shape
    k = topk_ids.shape[1]
    offsets = torch.zeros(num_experts + 1, dtype=torch.int64, device=hidden.device)
    permuted = torch.empty((t * k, h), dtype=hidden.dtype, device=hidden.device)
    dest = torch.empty((t * k,), dtype=torch.int32, device=hidden.device)
    if t * k == 0:
        return permuted, dest, offsets
    block_e = triton.next_power_of_2(num_experts)
    _moe_route_kernel[(1,)](
        topk_ids.contiguous(), dest, offsets, t * k, num_experts,
        BLOCK_P=max(16, min(1024, 16384 // block_e)), BLOCK_E=block_e,
    )  # fmt: skip
    if h == 0:
        return permuted, dest, offsets
    cfg = _config(h, {"block_r": block_r, "block_h": block_h, "num_warps": num_warps})
    x = hidden if hidden.stride(1) == 1 else hidden.contiguous()
    grid = (triton.cdiv(t * k, cfg["block_r"]), triton.cdiv(h, cfg["block_h"]))
    _moe_permute_kernel[grid](
        x, dest, permuted, t * k, h, x.stride(0), permuted.stride(0),
        TOP_K=k, BLOCK_R=cfg["block_r"], BLOCK_H=cfg["block_h"], num_warps=cfg["num_warps"],
    )  # fmt: skip
    return permuted, dest, offsets


def moe_unpermute(
    expert_out: torch.Tensor,
    dest_of_pair: torch.Tensor,
    topk_weights: torch.Tensor,
    routed_scaling_factor: float = 1.0,
    *,
    block_r: int | None = None,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return out (T, H) = scale * sum_j topk_weights[t, j] * expert_out[dest_of_pair[t*k + j]].

    Args:
        expert_out: (T * k, H) rows in the permuted order, rows contiguous.
        dest_of_pair: int32 (T * k,) from moe_permute.
        topk_weights: (T, k) routing weights (computed in fp32).
        routed_scaling_factor: Multiplies the sum.
        block_r: Tokens per program; None picks by H.
        block_h: Columns per program (power of two); None picks by H.
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, H) in ``expert_out``'s dtype.

    Raises:
        ValueError: The shapes do not fit.
    """
    t, k = topk_weights.shape
    if expert_out.dim() != 2 or expert_out.shape[0] != t * k or dest_of_pair.numel() != t * k:
        raise ValueError(
            f"need expert_out ({t * k}, H) and dest_of_pair ({t * k},) for weights ({t}, {k}); "
            f"got {tuple(expert_out.shape)}, {tuple(dest_of_pair.shape)}"
        )
    if topk_weights.dtype != torch.float32 or dest_of_pair.dtype != torch.int32:
        raise ValueError(f"need fp32 topk_weights and int32 dest_of_pair; got "
                         f"{topk_weights.dtype}, {dest_of_pair.dtype}")  # fmt: skip
    h = expert_out.shape[1]
    out = torch.empty((t, h), dtype=expert_out.dtype, device=expert_out.device)
    if t == 0 or h == 0:
        return out
    cfg = _config(h, {"block_r": block_r, "block_h": block_h, "num_warps": num_warps})
    y = expert_out if expert_out.stride(1) == 1 else expert_out.contiguous()
    grid = (triton.cdiv(t, cfg["block_r"]), triton.cdiv(h, cfg["block_h"]))
    _moe_unpermute_kernel[grid](
        y, dest_of_pair, topk_weights.contiguous(), out, t, h,
        float(routed_scaling_factor), y.stride(0), out.stride(0),
        TOP_K=k, BLOCK_R=cfg["block_r"], BLOCK_H=cfg["block_h"], num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out


def check_inputs(topk_ids: torch.Tensor, num_experts: int) -> None:
    """Raise ValueError if an expert id lies outside [0, num_experts) (a host read: a sync).

    Outside the timed path: moe_permute does not read topk_ids on the host; its routing kernel
    drops such pairs instead.
    """
    if topk_ids.numel() and (int(topk_ids.min()) < 0 or int(topk_ids.max()) >= num_experts):
        raise ValueError(f"topk_ids hold ids outside [0, num_experts = {num_experts})")


def reference(
    hidden: torch.Tensor, topk_ids: torch.Tensor, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return the permute by a stable sort and index_select, and its inverse and offsets."""
    flat = topk_ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    dest = torch.empty_like(order)
    dest[order] = torch.arange(order.numel(), device=order.device)
    counts = torch.bincount(flat, minlength=num_experts)
    offsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return hidden[order // topk_ids.shape[1]], dest.to(torch.int32), offsets


def reference_unpermute(
    expert_out: torch.Tensor,
    dest_of_pair: torch.Tensor,
    topk_weights: torch.Tensor,
    routed_scaling_factor: float = 1.0,
) -> torch.Tensor:
    """Return the weighted combine in fp32, cast to expert_out's dtype."""
    t, k = topk_weights.shape
    rows = expert_out.float()[dest_of_pair.long()].view(t, k, -1)
    out = (rows * topk_weights.float()[:, :, None]).sum(1) * routed_scaling_factor
    return out.to(expert_out.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"hidden", "topk_ids", "num_experts"}`` for a routing shape.

    ``shape = {"tokens", "hidden", "experts", "top_k"}``: hidden ~ N(0, 1), ids uniform (repeats
    allowed).
    """
    t, h, e, k = shape["tokens"], shape["hidden"], shape["experts"], shape["top_k"]
    return {
        "hidden": torch.randn(t, h, device=device).to(dtype),
        "topk_ids": torch.randint(0, e, (t, k), device=device, dtype=torch.int32),
        "num_experts": e,
    }
