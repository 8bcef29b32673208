"""
---
id: moe_sum_reduce
title: MoE combine, weighted sum over top-k expert outputs with (token x hidden) tile programs
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [tiled-rows, vectorized-loads, unrolled-slot-loop, fp32-accumulate, fused-scale-cast]
status: reference
launcher: moe_sum_reduce
tuning:
  block_t: [4, 1, 8]
  block_h: [512, 128, 2048]
  num_warps: [4, 2, 8]
args:
  expert_outputs: {shape: [T, TOPK, H], dtypes: [bf16, fp16, fp32], aliases: [x, hidden_states]}
  topk_weights: {shape: [T, TOPK], dtypes: [fp32], optional: true, aliases: [routing_weights]}
  routed_scaling_factor: {type: float, default: 1.0, aliases: [scaling_factor]}
returns:
  - {name: out, shape: [T, H], dtype: expert_outputs}
problem:
  shapes: [{tokens: 5, top_k: 8, hidden: 64}, {tokens: 13, top_k: 2, hidden: 1000, weighted: true}]
  dtypes: [fp32, bf16]
measured: []
---
out (T, H) = routed_scaling_factor * sum_j w[t, j] * expert_outputs[t, j, :] (weights optional, as
in the plain sum of SGLang's moe_sum_reduce) in the input dtype. Each program owns a (BLOCK_T tokens
x BLOCK_H hidden) tile; the k slots are an unrolled loop (TOP_K is constexpr) of independent,
contiguous BLOCK_H-wide row loads, so all k loads can be in flight at once and compile to 16-byte
vector loads; the sum, the routing weight and the scaling factor are applied in fp32 and the result
is rounded once at the store. Bytes per output element: k reads plus one write in the input dtype (2
B each for bf16), plus 4 B per (token, slot) weight, i.e. a pure streaming kernel that should run
near HBM bandwidth for T*H in the millions. Limits: a new top_k recompiles; tiny T*H is launch-bound
(a few us); the slot stride must keep rows contiguous along H for vector loads (other strides work,
slower).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_sum_reduce_kernel(
    # pointers
    x_ptr,  # (T, k, H) expert outputs
    w_ptr,  # (T, k) routing weights, any float dtype (unused if not HAS_WEIGHTS)
    out_ptr,  # (T, H)
    # sizes
    T,
    H,
    SCALE,  # routed_scaling_factor
    # strides (elements)
    stride_xt,
    stride_xk,
    stride_xh,
    stride_wt,
    stride_wk,
    stride_ot,
    stride_oh,
    # meta
    TOP_K: tl.constexpr,
    HAS_WEIGHTS: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_t = offs_t < T
    mask = mask_t[:, None] & (offs_h < H)[None, :]
    rows = x_ptr + offs_t[:, None].to(tl.int64) * stride_xt + offs_h[None, :] * stride_xh

    acc = tl.zeros((BLOCK_T, BLOCK_H), dtype=tl.float32)  # fp32 accumulation
    for j in tl.static_range(TOP_K):
        x = tl.load(rows + j * stride_xk, mask=mask, other=0.0).to(tl.float32)
        if HAS_WEIGHTS:
            w = tl.load(w_ptr + offs_t * stride_wt + j * stride_wk, mask=mask_t, other=0.0)
            w = w.to(tl.float32)  # upcast here: a .float() in the launcher is torch compute
            x = x * w[:, None]
        acc += x

    out_ptrs = out_ptr + offs_t[:, None].to(tl.int64) * stride_ot + offs_h[None, :] * stride_oh
    tl.store(out_ptrs, (acc * SCALE).to(out_ptr.dtype.element_ty), mask=mask)


def _launch_config(t: int, h: int) -> dict[str, int]:
    """Return the tile: up to 1024 hidden columns, tokens stacked to ~4K elements per program."""
    block_h = min(1024, triton.next_power_of_2(h))
    block_t = max(1, min(8, 4096 // block_h, triton.next_power_of_2(t)))
    return {"block_t": block_t, "block_h": block_h, "num_warps": 4}


def moe_sum_reduce(
    expert_outputs: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    routed_scaling_factor: float = 1.0,
    *,
    block_t: int | None = None,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return routed_scaling_factor * sum over slots of the (weighted) expert outputs.

    Args:
        expert_outputs: (T, k, H) bf16/fp16/fp32, H contiguous for full speed.
        topk_weights: Optional (T, k) fp32 routing weights; None sums unweighted.
        routed_scaling_factor: Scalar applied to the sum in fp32.
        block_t: Tokens per program (power of two); None picks by H.
        block_h: Hidden columns per program (power of two); None picks by H.
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, H) in ``expert_outputs``' dtype, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if expert_outputs.dim() != 3:
        raise ValueError(f"need expert_outputs (T, k, H); got {tuple(expert_outputs.shape)}")
    t, k, h = expert_outputs.shape
    if topk_weights is not None and tuple(topk_weights.shape) != (t, k):
        raise ValueError(
            f"need topk_weights ({t}, {k}) for expert_outputs {tuple(expert_outputs.shape)}; "
            f"got {tuple(topk_weights.shape)}"
        )
    out = torch.empty((t, h), dtype=expert_outputs.dtype, device=expert_outputs.device)
    if t == 0 or h == 0:
        return out
    cfg = _launch_config(t, h)
    given = {"block_t": block_t, "block_h": block_h, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    weights = topk_weights if topk_weights is not None else out  # dummy when unused
    w_strides = (weights.stride(0), weights.stride(1)) if topk_weights is not None else (0, 0)
    grid = (triton.cdiv(t, cfg["block_t"]), triton.cdiv(h, cfg["block_h"]))
    _moe_sum_reduce_kernel[grid](
        expert_outputs, weights, out,
        t, h, float(routed_scaling_factor),
        *expert_outputs.stride(), *w_strides, out.stride(0), out.stride(1),
        TOP_K=k, HAS_WEIGHTS=topk_weights is not None,
        BLOCK_T=cfg["block_t"], BLOCK_H=cfg["block_h"], num_warps=cfg["num_warps"],
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

    expert_outputs ~ N * 0.02 in ``dtype`` (as in the atrex inputs); weights a softmax of N(0, 1).
    """
    t, k, h = shape["tokens"], shape["top_k"], shape["hidden"]
    x = (torch.randn(t, k, h, device=device) * 0.02).to(dtype)
    weights = torch.softmax(torch.randn(t, k, device=device), -1) if shape.get("weighted") else None
    return {"expert_outputs": x, "topk_weights": weights,
            "routed_scaling_factor": shape.get("scale", 1.0)}  # fmt: skip
