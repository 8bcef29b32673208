"""
---
id: moe_sum_reduce_rowwise_vec
title: MoE combine, one program per token striding over hidden with a runtime top-k loop inside
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, vectorized-loads, runtime-slot-loop, fp32-accumulate,
  fused-scale-cast]
status: reference
launcher: moe_sum_reduce_rowwise_vec
tuning:
  block_h: [1024, 128, 4096]
  num_warps: [4, 1, 8]
args:
  expert_outputs: {shape: [T, TOPK, H], dtypes: [bf16, fp16, fp32], aliases: [x, hidden_states]}
  topk_weights: {shape: [T, TOPK], dtypes: [fp32], optional: true, aliases: [routing_weights]}
  routed_scaling_factor: {type: float, default: 1.0, aliases: [scaling_factor]}
returns:
  - {name: out, shape: [T, H], dtype: expert_outputs}
problem:
  shapes: [{tokens: 5, top_k: 8, hidden: 96}, {tokens: 3, top_k: 3, hidden: 300, weighted: true, scale: 2.5}]
  dtypes: [fp32, bf16]
measured: []
---
out (T, H) = routed_scaling_factor * sum_j w[t, j] * expert_outputs[t, j, :] (weights optional) in
the input dtype, accumulated in fp32 and rounded once. One program per token: it walks the hidden
axis in BLOCK_H-wide chunks (hinted contiguous so the loads become 16-byte vectors) and, for each
chunk, runs a runtime loop over the k slots, so top_k is an ordinary argument and a model with
another k reuses the compiled kernel (the tiled siblings unroll k as a constexpr). The routing
weights of the token are read once per slot per chunk from L1. Bytes per output element: k reads
and one write in the input dtype plus 4 B per (token, slot) weight; a pure stream. When it wins:
decode and mid batches with T >= the SM count and H of a few thousand, where one program per row
keeps the grid simple and the per-row loop amortises the launch; no 2-D grid bookkeeping. Limits:
T < SM count leaves SMs idle (use the (token x hidden) tile design), the runtime slot loop issues
its k loads one after another instead of all in flight, and H must be contiguous for vector loads.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_sum_reduce_row_kernel(
    x_ptr,  # (T, k, H) expert outputs, H contiguous
    w_ptr,  # fp32 (T, k) routing weights (unused if not HAS_WEIGHTS)
    out_ptr,  # (T, H), contiguous
    H,
    TOP_K,  # runtime: no recompile per k
    SCALE,
    stride_xt,
    stride_xk,
    stride_wt,
    stride_wk,
    HAS_WEIGHTS: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    row = x_ptr + token * stride_xt
    out_row = out_ptr + token * H
    for start in range(0, H, BLOCK_H):
        offs = start + tl.arange(0, BLOCK_H)
        offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK_H), BLOCK_H)
        mask = offs < H
        acc = tl.zeros((BLOCK_H,), dtype=tl.float32)
        for j in range(0, TOP_K):
            x = tl.load(row + j * stride_xk + offs, mask=mask, other=0.0).to(tl.float32)
            if HAS_WEIGHTS:
                x = x * tl.load(w_ptr + token * stride_wt + j * stride_wk).to(tl.float32)
            acc += x
        tl.store(out_row + offs, (acc * SCALE).to(out_ptr.dtype.element_ty), mask=mask)


def moe_sum_reduce_rowwise_vec(
    expert_outputs: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    routed_scaling_factor: float = 1.0,
    *,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return routed_scaling_factor * sum over slots of the (weighted) expert outputs.

    Args:
        expert_outputs: (T, k, H) bf16/fp16/fp32 (copied if H is not contiguous).
        topk_weights: Optional (T, k) routing weights (used in fp32); None sums unweighted.
        routed_scaling_factor: Scalar applied to the sum in fp32.
        block_h: Hidden columns per loop step (power of two); None = min(1024, next_pow2(H)).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, H) in ``expert_outputs``' dtype, contiguous.

    Raises:
        ValueError: The shapes, dtypes or block_h do not fit.
    """
    if expert_outputs.dim() != 3 or not expert_outputs.dtype.is_floating_point:
        raise ValueError(
            f"need float expert_outputs (T, k, H); got {tuple(expert_outputs.shape)} "
            f"{expert_outputs.dtype}"
        )
    t, k, h = expert_outputs.shape
    if topk_weights is not None and tuple(topk_weights.shape) != (t, k):
        raise ValueError(
            f"need topk_weights ({t}, {k}) for expert_outputs {tuple(expert_outputs.shape)}; "
            f"got {tuple(topk_weights.shape)}"
        )
    block_h = block_h or min(1024, triton.next_power_of_2(max(h, 1)))
    if block_h & (block_h - 1):
        raise ValueError(f"block_h must be a power of two; got {block_h}")
    out = torch.empty((t, h), dtype=expert_outputs.dtype, device=expert_outputs.device)
    if t == 0 or h == 0:
        return out
    x = expert_outputs if expert_outputs.stride(2) == 1 else expert_outputs.contiguous()
    weights = topk_weights if topk_weights is not None else out  # dummy when unused
    w_strides = (weights.stride(0), weights.stride(1)) if topk_weights is not None else (0, 0)
    _moe_sum_reduce_row_kernel[(t,)](
        x, weights, out, h, k, float(routed_scaling_factor),
        x.stride(0), x.stride(1), *w_strides,
        HAS_WEIGHTS=topk_weights is not None, BLOCK_H=block_h, num_warps=num_warps or 4,
    )  # fmt: skip
    return out


def reference(
    expert_outputs: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    routed_scaling_factor: float = 1.0,
) -> torch.Tensor:
    """Return the (weighted) slot sum in fp32 times the factor, cast to the input dtype."""
    x = expert_outputs.float()
    if topk_weights is not None:
        x = x * topk_weights.float()[:, :, None]
    return (x.sum(dim=1) * routed_scaling_factor).to(expert_outputs.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "top_k", "hidden"}`` (+ optional ``"weighted"``, ``"scale"``).

    expert_outputs ~ N(0, 1) in ``dtype``; weights a softmax of N(0, 1) logits.
    """
    t, k, h = shape["tokens"], shape["top_k"], shape["hidden"]
    x = torch.randn(t, k, h, device=device).to(dtype)
    weights = torch.softmax(torch.randn(t, k, device=device), -1) if shape.get("weighted") else None
    return {"expert_outputs": x, "topk_weights": weights,
            "routed_scaling_factor": shape.get("scale", 1.0)}  # fmt: skip
