"""
---
id: moe_sum_reduce_tiled
title: MoE combine as one 3-D (tokens x slots x hidden) tile load reduced over slots, persistent
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [3d-tile, slot-axis-reduction, persistent-grid-stride, fp32-accumulate, fused-scale-cast]
status: reference
launcher: moe_sum_reduce_tiled
tuning:
  block_t: [4, 1, 2, 8, 16]
  block_h: [256, 64, 128, 512, 1024]
  programs: [1024, 64, 256, 4096]
  num_warps: [4, 1, 2, 8]
args:
  expert_outputs: {shape: [T, TOPK, H], dtypes: [bf16, fp16, fp32], layout: any, aliases: [x]}
  routed_scaling_factor: {type: float, default: 1.0, aliases: [scaling_factor]}
returns:
  - {name: out, shape: [T, H], dtype: expert_outputs}
problem:
  shapes: [{tokens: 7, top_k: 3, hidden: 200}, {tokens: 5, top_k: 8, hidden: 96, scale: 2.5}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
out (T, H) = routed_scaling_factor * sum_j expert_outputs[t, j, :], accumulated in fp32 and rounded
once to the input dtype (atrex30's moe_sum_reduce). Instead of an unrolled loop over the k slots
(moe_sum_reduce), a program loads a whole (BLOCK_T, next_pow2(k), BLOCK_H) block in one masked 3-D
load and reduces it with tl.sum over the slot axis, so the compiler sees every slot's row at once
and the code does not depend on k (one compiled kernel serves every top_k up to its padded width).
The grid is persistent along tokens: at most PROGRAMS / hidden-tiles programs per hidden strip, each
striding over the token tiles, so very long prefills (T in the millions) run a fixed number of
programs and amortise their start-up; the hidden strip index is the second grid axis. Bytes per
output element: k reads plus one write in the input dtype; pure streaming, near HBM bandwidth for
T*H in the millions. Limits: padded slots (k not a power of two) cost masked lanes and registers
(BLOCK_T * next_pow2(k) * BLOCK_H values per program; keep it near 4-8K); no routing weights (see
moe_sum_reduce for the weighted sum).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_sum_reduce_tiled_kernel(
    # pointers
    x_ptr,  # (T, k, H) expert outputs
    out_ptr,  # (T, H)
    # sizes
    T,
    K,
    H,
    SCALE,  # routed_scaling_factor
    # strides (elements)
    stride_xt,
    stride_xk,
    stride_xh,
    stride_ot,
    stride_oh,
    # meta
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    offs_k = tl.arange(0, BLOCK_K)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_kh = (offs_k < K)[:, None] & (offs_h < H)[None, :]  # (BLOCK_K, BLOCK_H)
    slot_col = offs_k[:, None] * stride_xk + offs_h[None, :] * stride_xh
    num_tiles = tl.cdiv(T, BLOCK_T)
    for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):  # persistent stride
        offs_t = tile * BLOCK_T + tl.arange(0, BLOCK_T)
        mask_t = offs_t < T
        rows = offs_t.to(tl.int64)[:, None, None] * stride_xt + slot_col[None, :, :]
        mask = mask_t[:, None, None] & mask_kh[None, :, :]
        x = tl.load(x_ptr + rows, mask=mask, other=0.0).to(tl.float32)  # (BT, BK, BH)
        acc = tl.sum(x, axis=1) * SCALE  # fp32 (BLOCK_T, BLOCK_H)
        out = out_ptr + offs_t.to(tl.int64)[:, None] * stride_ot + offs_h[None, :] * stride_oh
        tl.store(
            out, acc.to(out_ptr.dtype.element_ty), mask=mask_t[:, None] & (offs_h < H)[None, :]
        )


def moe_sum_reduce_tiled(
    expert_outputs: torch.Tensor,
    routed_scaling_factor: float = 1.0,
    *,
    block_t: int | None = None,
    block_h: int | None = None,
    programs: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return routed_scaling_factor * the sum over the slot axis of expert_outputs.

    Args:
        expert_outputs: (T, k, H) bf16/fp16/fp32, any strides (H contiguous for full speed).
        routed_scaling_factor: Scalar applied to the fp32 sum.
        block_t: Tokens per tile (power of two); None keeps about 4K values per tile.
        block_h: Hidden columns per tile (power of two); None = min(256, next_pow2(H)).
        programs: Cap on the number of programs (token axis x hidden axis); None = 1024.
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, H) contiguous, in expert_outputs' dtype.

    Raises:
        ValueError: expert_outputs is not 3D, or a block size is not a power of two.
    """
    if expert_outputs.dim() != 3:
        raise ValueError(f"need expert_outputs (T, k, H); got {tuple(expert_outputs.shape)}")
    t, k, h = expert_outputs.shape
    out = torch.empty((t, h), dtype=expert_outputs.dtype, device=expert_outputs.device)
    if t == 0 or h == 0:
        return out
    block_k = triton.next_power_of_2(max(k, 1))
    bh = block_h or min(256, triton.next_power_of_2(h))
    bt = block_t or max(1, min(16, 4096 // (block_k * bh), triton.next_power_of_2(t)))
    for name, value in (("block_t", bt), ("block_h", bh)):
        if value <= 0 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two; got {value}")
    h_tiles = triton.cdiv(h, bh)
    t_programs = max(1, min(triton.cdiv(t, bt), (programs or 1024) // h_tiles))
    _moe_sum_reduce_tiled_kernel[(t_programs, h_tiles)](
        expert_outputs, out,
        t, k, h, float(routed_scaling_factor),
        *expert_outputs.stride(), out.stride(0), out.stride(1),
        BLOCK_T=bt, BLOCK_K=block_k, BLOCK_H=bh, num_warps=num_warps or 4,
    )  # fmt: skip
    return out


def reference(expert_outputs: torch.Tensor, routed_scaling_factor: float = 1.0) -> torch.Tensor:
    """Return the fp32 slot sum times the factor, cast to the input dtype."""
    summed = expert_outputs.float().sum(dim=1)
    return (summed * routed_scaling_factor).to(expert_outputs.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "top_k", "hidden"}`` (+ ``"scale"``): N(0, 1) outputs."""
    x = torch.randn(shape["tokens"], shape["top_k"], shape["hidden"], device=device).to(dtype)
    return {"expert_outputs": x, "routed_scaling_factor": shape.get("scale", 1.0)}
