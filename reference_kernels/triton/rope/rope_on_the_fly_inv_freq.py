"""
---
id: rope_on_the_fly_inv_freq
title: Neox RoPE with cos/sin computed in-kernel from positions and inv_freq, one program per token
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [token-per-program, on-the-fly-trig, no-cache, head-block-loop, split-halves,
  partial-rotary]
status: reference
launcher: rope_on_the_fly_inv_freq
tuning:
  block_h: [8, 1, 2, 4, 16, 32]
  num_warps: [4, 1, 2, 8]
args:
  q: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], flattened: true, aliases: [query]}
  k: {shape: [T, HKV, D], like: q, flattened: true, aliases: [key]}
  positions: {shape: [T], dtypes: [int32, int64], aliases: [position_ids, pos]}
  inv_freq: {shape: [R], dtypes: [fp32], aliases: [inverse_frequencies, freqs]}
returns:
  - {name: q_out, shape: [T, H, D], dtype: q}
  - {name: k_out, shape: [T, HKV, D], dtype: k}
dims:
  D: [head_dim, head_size]
  H: [num_heads, num_q_heads, n_heads]
  HKV: [num_kv_heads, n_kv_heads]
problem:
  shapes: [{tokens: 3, heads: 4, kv_heads: 2, head_dim: 64}, {tokens: 2, heads: 3, kv_heads: 1, head_dim: 128, rot_dim: 96}]
  dtypes: [fp32, bf16]
measured: []
---
Neox-style rotary embedding without a cos/sin cache: the model passes inv_freq (R = rot_dim / 2
frequencies, fp32; any scaling such as YaRN or linear is already folded into it) and program t
computes angle_i = float(position[t]) * inv_freq[i], then cos and sin, once in registers, and
applies them to every q and k head of that token: the halves x1 = x[:R], x2 = x[R:2R] of each head
become x1 cos - x2 sin and x2 cos + x1 sin (fp32), dims >= 2R are copied. Heads are processed
BLOCK_H at a time as (BLOCK_H, R) tiles, so the trig cost (2R sin/cos per token, ~40 FLOPs each) is
shared by all H + HKV heads and no cache row is read: the only traffic is one read and one write of
q and k (plus 4R bytes of inv_freq from L2). This suits long or dynamic contexts (no cache to grow,
no max_position) and dynamic scaling (a new inv_freq costs nothing). Results go to fresh tensors.
Limits: one program per token, so decode with few tokens uses few SMs; fp32 angles lose precision at
large positions exactly as the eager fp32 reference does (~1e-4 rad near 10^3, 1e-2 near 10^5); neox
layout only.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(
    x_ptr, o_ptr, stride_xh, stride_oh, n_heads, D, R, cos, sin,
    BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_TAIL: tl.constexpr,
):  # fmt: skip
    """Rotate n_heads heads of one token (base pointers given) in (BLOCK_H, R) tiles."""
    offs_r = tl.arange(0, BLOCK_R)
    mask_r = offs_r < R
    for h0 in range(0, n_heads, BLOCK_H):
        offs_h = h0 + tl.arange(0, BLOCK_H)
        mask_h = (offs_h < n_heads)[:, None]
        x_rows = x_ptr + offs_h[:, None] * stride_xh
        o_rows = o_ptr + offs_h[:, None] * stride_oh
        m = mask_h & mask_r[None, :]
        x1 = tl.load(x_rows + offs_r[None, :], mask=m, other=0.0).to(tl.float32)
        x2 = tl.load(x_rows + R + offs_r[None, :], mask=m, other=0.0).to(tl.float32)
        out_ty = o_ptr.dtype.element_ty
        tl.store(o_rows + offs_r[None, :], (x1 * cos - x2 * sin).to(out_ty), mask=m)
        tl.store(o_rows + R + offs_r[None, :], (x2 * cos + x1 * sin).to(out_ty), mask=m)
        if BLOCK_TAIL > 0:  # partial rotary: dims >= 2R pass through
            offs_tail = 2 * R + tl.arange(0, BLOCK_TAIL)
            mt = mask_h & (offs_tail < D)[None, :]
            tail = tl.load(x_rows + offs_tail[None, :], mask=mt)
            tl.store(o_rows + offs_tail[None, :], tail, mask=mt)


@triton.jit
def _rope_on_the_fly_inv_freq_kernel(
    # pointers
    q_ptr,
    k_ptr,
    pos_ptr,
    inv_freq_ptr,
    q_out_ptr,
    k_out_ptr,
    # sizes
    H,
    HKV,
    D,
    R,  # rotated pairs (rot_dim / 2)
    # strides (elements; the head dim is contiguous)
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_qot,
    stride_qoh,
    stride_kot,
    stride_koh,
    # meta
    BLOCK_H: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_TAIL: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)  # int64: token * stride can pass 2^31 elements
    offs_r = tl.arange(0, BLOCK_R)
    inv_freq = tl.load(inv_freq_ptr + offs_r, mask=offs_r < R, other=0.0)
    angle = tl.load(pos_ptr + tok).to(tl.float32) * inv_freq  # once per token, for all heads
    cos = tl.cos(angle)[None, :]
    sin = tl.sin(angle)[None, :]
    _rotate_heads(
        q_ptr + tok * stride_qt, q_out_ptr + tok * stride_qot, stride_qh, stride_qoh,
        H, D, R, cos, sin, BLOCK_H, BLOCK_R, BLOCK_TAIL,
    )  # fmt: skip
    _rotate_heads(
        k_ptr + tok * stride_kt, k_out_ptr + tok * stride_kot, stride_kh, stride_koh,
        HKV, D, R, cos, sin, BLOCK_H, BLOCK_R, BLOCK_TAIL,
    )  # fmt: skip


def _check(q, k, positions, inv_freq) -> None:
    """Raise ValueError unless q, k, positions and inv_freq fit together."""
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(
            f"q, k must be (T, H, D), (T, Hkv, D); got {tuple(q.shape)}, {tuple(k.shape)}"
        )
    if q.dtype != k.dtype:
        raise ValueError(f"q and k dtypes differ: {q.dtype}, {k.dtype}")
    if positions.shape != (q.shape[0],) or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"positions must be int32/int64 ({q.shape[0]},); got {tuple(positions.shape)}"
        )
    if inv_freq.dim() != 1 or inv_freq.dtype != torch.float32 or 2 * inv_freq.numel() > q.shape[2]:
        raise ValueError(
            f"inv_freq must be fp32 (R,) with 2R <= head dim {q.shape[2]}; "
            f"got {tuple(inv_freq.shape)} {inv_freq.dtype}"
        )


def rope_on_the_fly_inv_freq(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    *,
    block_h: int = 8,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, k) rotated neox-style by angles positions * inv_freq computed in the kernel.

    Args:
        q: (T, H, D) bf16/fp16/fp32; the head dim contiguous, other strides free.
        k: (T, Hkv, D) same dtype; the head dim contiguous.
        positions: (T,) int32/int64.
        inv_freq: (R,) fp32 frequencies; dims [0, 2R) of each head rotate, the rest pass.
        block_h: Heads per tile (power of two).
        num_warps: Warps per program.

    Returns:
        (q_out, k_out): fresh tensors shaped and typed like q and k, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    _check(q, k, positions, inv_freq)
    q = q if q.stride(2) == 1 else q.contiguous()
    k = k if k.stride(2) == 1 else k.contiguous()
    t, h, d = q.shape
    r = inv_freq.numel()
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if t == 0:
        return q_out, k_out
    tail = d - 2 * r  # with R = 0 (no rotary dims) the kernel only copies the tail: all of D
    _rope_on_the_fly_inv_freq_kernel[(t,)](
        q, k, positions, inv_freq.contiguous(), q_out, k_out,
        h, k.shape[1], d, r,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
        BLOCK_H=block_h, BLOCK_R=max(1, triton.next_power_of_2(r)),
        BLOCK_TAIL=triton.next_power_of_2(tail) if tail else 0,
        num_warps=num_warps,
    )  # fmt: skip
    return q_out, k_out


def reference(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, k) rotated in fp32 (angles = positions.float() outer inv_freq), cast back."""
    r = inv_freq.numel()
    angles = positions.float()[:, None, None] * inv_freq  # (T, 1, R)
    cos, sin = angles.cos(), angles.sin()

    def rotate(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        x1, x2, rest = xf[..., :r], xf[..., r : 2 * r], xf[..., 2 * r :]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1).to(x.dtype)

    return rotate(q), rotate(k)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "heads", "kv_heads", "head_dim"}`` (+ ``"rot_dim"``).

    N(0, 1) q and k; positions start + arange(T), start < 512; inv_freq = 10000^(-2i / rot_dim).
    """
    t, d = shape["tokens"], shape["head_dim"]
    rot = shape.get("rot_dim", d)
    start = int(torch.randint(0, 512, ()))
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, device=device).float() / rot))
    return {
        "q": torch.randn(t, shape["heads"], d, device=device).to(dtype),
        "k": torch.randn(t, shape["kv_heads"], d, device=device).to(dtype),
        "positions": torch.arange(start, start + t, device=device),
        "inv_freq": inv_freq,
    }
