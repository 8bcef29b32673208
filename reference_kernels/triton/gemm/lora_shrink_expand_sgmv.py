"""
---
id: lora_shrink_expand_sgmv
title: Segmented multi-LoRA (SGMV), shrink x @ A^T then expand-and-add into y, per-segment adapter
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [sgmv, multi-lora, segment-grid, two-kernel-shrink-expand, fp32-intermediate,
  in-place-accumulate, tl-dot, fp32-accumulate]
status: reference
launcher: lora_shrink_expand_sgmv
tuning:
  block_m: [16, 32, 64]
  block_n: [64, 32, 128]
  block_k: [64, 32, 128]
  num_warps: [4, 2, 8]
args:
  x: {shape: [T, HI], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  y: {shape: [T, HO], like: x, aliases: [out, output]}
  lora_a: {shape: [L, R, HI], like: x, layout: any, aliases: [a_weights, lora_a_weights]}
  lora_b: {shape: [L, HO, R], like: x, layout: any, aliases: [b_weights, lora_b_weights]}
  seg_starts: {shape: ["S + 1"], dtypes: [int32], aliases: [seq_start_locs, seg_indptr]}
  adapter_ids: {shape: [S], dtypes: [int32], aliases: [lora_ids, lora_indices]}
  scaling: {type: float, default: 1.0, aliases: [scale, lora_scale]}
  max_seg_len: {type: int, default: null, aliases: [max_seq_len, max_seqlen, max_len]}
returns:
  - {alias: y}
problem:
  shapes: [{seg_lens: [5, 20, 3], adapter_ids: [1, 0, -1], hi: 64, ho: 48, rank: 8, loras: 2}, {seg_lens: [1, 1, 1, 1], adapter_ids: [0, 2, 2, 1], hi: 40, ho: 100, rank: 16, loras: 3}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  in_place: [y]
measured: []
---
Multi-LoRA serving (Punica's SGMV): a batch is a list of S segments (token rows [seg_starts[s],
seg_starts[s + 1]) of one request), segment s uses adapter adapter_ids[s] (-1 = none), and every
row gets y += scaling * (x @ A[a]^T) @ B[a]^T with A (L, R, HI) and B (L, HO, R) stacked over the L
loaded adapters and a small rank R (8-64). Two kernels, because the rank bottleneck makes one
fused pass re-derive the shrink per output tile. Shrink: one program per (segment, BLOCK_M rows of
it) streams its adapter's A (R x HI, padded to a 16-row MMA) against the rows' x tiles with tl.dot
and writes the (rows, R) product times scaling to an fp32 buffer. Expand: one program per
(segment, BLOCK_M rows, BLOCK_N output columns) multiplies that fp32 (rows, R) tile by B[a]'s (R,
BLOCK_N) slice (one dot, K = R), adds the y tile in fp32 and writes y back in place (each y
element belongs to one program: no atomics). Segments, not per-token ids, let a program load its
adapter once for BLOCK_M rows, so prefill segments run at tensor-core rate; programs beyond a
segment's end return. Bytes: x read once (2 B/elt), y read and written (4 B/elt), A and B of each
used adapter once per row block, 4 B * R per token for the fp32 intermediate. Limits: the grid
spans the longest segment, max_seg_len, which the caller passes from its host-side batch
bookkeeping (as Punica's and vLLM's max_seq_length); without it the grid spans all T rows and the
surplus programs return at once; the launcher never reads seg_starts on the host (check_inputs
verifies max_seg_len with a sync, outside the launch). One long segment among many short ones
leaves idle programs; R <= 128; decode batches of one token per segment waste 15 of 16 MMA rows (a
per-token BGMV design suits them better); on the GPU the expand casts the fp32 intermediate to
the weight dtype for the MMA.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _lora_shrink_kernel(
    x_ptr,  # (T, HI)
    a_ptr,  # (L, R, HI)
    v_ptr,  # fp32 (T, R)
    seg_ptr,  # int32 (S + 1,)
    ids_ptr,  # int32 (S,)
    HI,
    R,
    scaling,
    stride_xt,
    stride_al,
    stride_ar,
    stride_ak,
    stride_vt,
    BLOCK_M: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):
    seg = tl.program_id(0)
    adapter = tl.load(ids_ptr + seg)
    start = tl.load(seg_ptr + seg)
    end = tl.load(seg_ptr + seg + 1)
    row0 = start + tl.program_id(1) * BLOCK_M
    if (adapter < 0) | (row0 >= end):
        return
    offs_m = row0 + tl.arange(0, BLOCK_M)
    mask_m = offs_m < end
    offs_r = tl.arange(0, BLOCK_R)
    offs_k = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xt
    a_rows = a_ptr + adapter.to(tl.int64) * stride_al + offs_r[None, :] * stride_ar
    acc = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
    for k_start in range(0, HI, BLOCK_K):
        cols = k_start + offs_k
        mask_k = cols < HI
        x = tl.load(x_rows + cols[None, :], mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        a = tl.load(a_rows + cols[:, None] * stride_ak,
                    mask=mask_k[:, None] & (offs_r < R)[None, :], other=0.0)  # fmt: skip
        if UPCAST:
            acc = tl.dot(x.to(tl.float32), a.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, a, acc)
    v_ptrs = v_ptr + offs_m.to(tl.int64)[:, None] * stride_vt + offs_r[None, :]
    tl.store(v_ptrs, acc * scaling, mask=mask_m[:, None] & (offs_r < R)[None, :])


@triton.jit
def _lora_expand_kernel(
    v_ptr,  # fp32 (T, R)
    b_ptr,  # (L, HO, R)
    y_ptr,  # (T, HO), updated in place
    seg_ptr,
    ids_ptr,
    HO,
    R,
    stride_vt,
    stride_bl,
    stride_bn,
    stride_br,
    stride_yt,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_R: tl.constexpr,
    UPCAST: tl.constexpr,
):
    seg = tl.program_id(0)
    adapter = tl.load(ids_ptr + seg)
    start = tl.load(seg_ptr + seg)
    end = tl.load(seg_ptr + seg + 1)
    row0 = start + tl.program_id(1) * BLOCK_M
    if (adapter < 0) | (row0 >= end):
        return
    offs_m = row0 + tl.arange(0, BLOCK_M)
    mask_m = offs_m < end
    offs_n = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < HO
    offs_r = tl.arange(0, BLOCK_R)
    mask_r = offs_r < R
    v = tl.load(v_ptr + offs_m.to(tl.int64)[:, None] * stride_vt + offs_r[None, :],
                mask=mask_m[:, None] & mask_r[None, :], other=0.0)  # fmt: skip
    b_ptrs = (b_ptr + adapter.to(tl.int64) * stride_bl + offs_n[None, :] * stride_bn
              + offs_r[:, None] * stride_br)  # fmt: skip
    b = tl.load(b_ptrs, mask=mask_r[:, None] & mask_n[None, :], other=0.0)
    if UPCAST:
        delta = tl.dot(v, b.to(tl.float32), input_precision="ieee")
    else:
        delta = tl.dot(v.to(b.dtype), b)  # tensor cores in the weight dtype, fp32 result
    mask = mask_m[:, None] & mask_n[None, :]
    y_ptrs = y_ptr + offs_m.to(tl.int64)[:, None] * stride_yt + offs_n[None, :]
    y = tl.load(y_ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptrs, (y + delta).to(y_ptr.dtype.element_ty), mask=mask)


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def lora_shrink_expand_sgmv(
    x: torch.Tensor,
    y: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    seg_starts: torch.Tensor,
    adapter_ids: torch.Tensor,
    scaling: float = 1.0,
    max_seg_len: int | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Add scaling * (x @ A[a]^T) @ B[a]^T to y in place, segment by segment; return y.

    Args:
        x: (T, HI) bf16/fp16/fp32, rows contiguous.
        y: (T, HO) same dtype, rows contiguous; updated in place.
        lora_a: (L, R, HI) stacked A (shrink) weights, same dtype.
        lora_b: (L, HO, R) stacked B (expand) weights, same dtype.
        seg_starts: int32 (S + 1,) row offsets of the segments (non-decreasing, last = T).
        adapter_ids: int32 (S,) adapter of each segment in [0, L), or -1 for none.
        scaling: LoRA alpha / rank, applied to the shrink result.
        max_seg_len: The longest segment's row count (sizes the grid; rows past it in a longer
            segment are not updated); None = T.
        block_m: Rows per program (power of two >= 16); None = 16.
        block_n: Output columns per expand program (power of two >= 16); None = 64.
        block_k: Shrink reduction step (power of two >= 16); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        y, the same tensor.

    Raises:
        ValueError: The shapes, dtypes or segments do not fit.
    """
    if x.dim() != 2 or y.dim() != 2 or y.shape[0] != x.shape[0]:
        raise ValueError(f"need x (T, HI) and y (T, HO); got {tuple(x.shape)}, {tuple(y.shape)}")
    t, hi = x.shape
    ho = y.shape[1]
    if lora_a.dim() != 3 or lora_a.shape[2] != hi or tuple(lora_b.shape) != (
        lora_a.shape[0], ho, lora_a.shape[1]):  # fmt: skip
        raise ValueError(f"need lora_a (L, R, {hi}) and lora_b (L, {ho}, R); got "
                         f"{tuple(lora_a.shape)}, {tuple(lora_b.shape)}")  # fmt: skip
    if len({x.dtype, y.dtype, lora_a.dtype, lora_b.dtype}) != 1:
        raise ValueError(f"need x, y, lora_a, lora_b in one dtype; got {x.dtype}, {y.dtype}, "
                         f"{lora_a.dtype}, {lora_b.dtype}")  # fmt: skip
    r = lora_a.shape[1]
    if r > 128 or x.stride(1) != 1 or y.stride(1) != 1:
        raise ValueError(f"need rank <= 128 (got {r}) and row-contiguous x and y")
    s = adapter_ids.numel()
    if seg_starts.numel() != s + 1:
        raise ValueError(f"need seg_starts of {s + 1} offsets for {s} adapter_ids; "
                         f"got {seg_starts.numel()}")  # fmt: skip
    if seg_starts.dtype != torch.int32 or adapter_ids.dtype != torch.int32:
        raise ValueError(f"need int32 seg_starts and adapter_ids; got {seg_starts.dtype}, "
                         f"{adapter_ids.dtype}")  # fmt: skip
    if s == 0 or t == 0:
        return y
    max_len = t if max_seg_len is None else min(max_seg_len, t)
    cfg = {"block_m": 16, "block_n": 64, "block_k": 64, "num_warps": 4}
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    block_r = max(16, triton.next_power_of_2(r))
    v = torch.empty((t, r), dtype=torch.float32, device=x.device)
    row_tiles = max(1, triton.cdiv(max_len, cfg["block_m"]))
    seg, ids = seg_starts.contiguous(), adapter_ids.contiguous()
    _lora_shrink_kernel[(s, row_tiles)](
        x, lora_a, v, seg, ids, hi, r, float(scaling),
        x.stride(0), *lora_a.stride(), v.stride(0),
        BLOCK_M=cfg["block_m"], BLOCK_R=block_r, BLOCK_K=cfg["block_k"],
        UPCAST=_interpreting(), num_warps=cfg["num_warps"],
    )  # fmt: skip
    _lora_expand_kernel[(s, row_tiles, triton.cdiv(ho, cfg["block_n"]))](
        v, lora_b, y, seg, ids, ho, r,
        v.stride(0), *lora_b.stride(), y.stride(0),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_R=block_r,
        UPCAST=_interpreting(), num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y


def check_inputs(seg_starts: torch.Tensor, max_seg_len: int | None = None) -> None:
    """Raise ValueError unless seg_starts starts at 0, never decreases and fits max_seg_len.

    Reads seg_starts on the host (a sync), so it stays out of the launcher.
    """
    lens = (seg_starts[1:] - seg_starts[:-1]).tolist()
    if int(seg_starts[0]) != 0 or any(n < 0 for n in lens):
        raise ValueError("seg_starts must start at 0 and be non-decreasing")
    if max_seg_len is not None and max(lens, default=0) > max_seg_len:
        raise ValueError(f"max_seg_len {max_seg_len} < longest segment {max(lens)}")


def reference(
    x: torch.Tensor,
    y: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    seg_starts: torch.Tensor,
    adapter_ids: torch.Tensor,
    scaling: float = 1.0,
    max_seg_len: int | None = None,
) -> torch.Tensor:
    """Add the per-segment LoRA delta (computed in fp32) to y in place, as the kernel; return y.

    max_seg_len is unused (the segments come from seg_starts).
    """
    out = y.float()
    for seg, adapter in enumerate(adapter_ids.tolist()):
        lo, hi = int(seg_starts[seg]), int(seg_starts[seg + 1])
        if adapter >= 0 and hi > lo:
            shrink = x[lo:hi].float() @ lora_a[adapter].float().T * scaling
            out[lo:hi] += shrink @ lora_b[adapter].float().T
    return y.copy_(out)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"seg_lens": [...], "adapter_ids": [...], "hi", "ho", "rank", "loras"}``.

    x, y ~ N(0, 1); A ~ N * HI^-1/2 and B ~ N * R^-1/2 so the delta is O(1); scaling 0.5.
    """
    t, hi, ho, r, n_lora = (
        sum(shape["seg_lens"]),
        shape["hi"],
        shape["ho"],
        shape["rank"],
        shape["loras"],
    )
    starts = torch.zeros(len(shape["seg_lens"]) + 1, dtype=torch.int32)
    starts[1:] = torch.cumsum(torch.tensor(shape["seg_lens"]), 0)
    return {
        "x": torch.randn(t, hi, device=device).to(dtype),
        "y": torch.randn(t, ho, device=device).to(dtype),
        "lora_a": (torch.randn(n_lora, r, hi, device=device) * hi**-0.5).to(dtype),
        "lora_b": (torch.randn(n_lora, ho, r, device=device) * r**-0.5).to(dtype),
        "seg_starts": starts.to(device),
        "adapter_ids": torch.tensor(shape["adapter_ids"], dtype=torch.int32, device=device),
        "scaling": 0.5,
        "max_seg_len": max(shape["seg_lens"]),
    }
