"""
---
id: batch_norm_inference_folded
title: Inference BatchNorm over NCHW, running stats folded into a per-channel scale and shift
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [folded-affine, per-channel-scale-shift, two-kernel, plane-tile-grid, fma,
  fp32-accumulate]
status: reference
launcher: batch_norm_inference_folded
tuning:
  block: [1024, 128, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [B, C, H, W], dtypes: [bf16, fp16, fp32], layout: contiguous, aliases: [input]}
  running_mean: {shape: [C], dtypes: [float], aliases: [mean]}
  running_var: {shape: [C], dtypes: [float], aliases: [var]}
  weight: {shape: [C], dtypes: [float], optional: true, aliases: [gamma]}
  bias: {shape: [C], dtypes: [float], optional: true, aliases: [beta]}
  eps: {type: float, default: 1.0e-5, aliases: [epsilon]}
returns:
  - {name: y, shape: [B, C, H, W], dtype: x}
problem:
  shapes: [{batch: 2, channels: 3, height: 7, width: 45}, {batch: 1, channels: 4, height: 5, width: 5}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Eval-mode BatchNorm2d, y = (x - running_mean) * rsqrt(running_var + eps) * weight + bias per
channel, rewritten as one fused multiply-add: kernel 1 (one program, C lanes in blocks) folds the
four per-channel vectors into scale = weight * rsqrt(var + eps) and shift = bias - mean * scale in
fp32; kernel 2 runs a (B * C, ceil(H * W / BLOCK)) grid where program (plane, j) reads its channel's
scale and shift once as two scalars and streams BLOCK contiguous elements of the (n, c) plane
through y = x * scale + shift. Because the grid is laid out by plane, no per-element channel index
(a division by H * W) is computed, unlike a flat elementwise grid. Bytes: one read and one write per
element (4 bytes in bf16); FLOPs: one FMA per element. Wins for any NCHW inference shape; limits:
NCHW contiguous only (channels-last would need a per-element channel gather), and very small planes
(H * W << BLOCK) waste lanes (lower block then).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _bn_fold_kernel(
    mean_ptr,
    var_ptr,
    w_ptr,
    b_ptr,
    scale_ptr,
    shift_ptr,
    C,
    eps,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    for start in range(0, C, BLOCK_C):
        c = start + tl.arange(0, BLOCK_C)
        mask = c < C
        mean = tl.load(mean_ptr + c, mask=mask, other=0.0).to(tl.float32)
        var = tl.load(var_ptr + c, mask=mask, other=1.0).to(tl.float32)
        scale = tl.rsqrt(var + eps)
        if HAS_W:
            scale = scale * tl.load(w_ptr + c, mask=mask, other=0.0).to(tl.float32)
        shift = -mean * scale
        if HAS_B:
            shift = shift + tl.load(b_ptr + c, mask=mask, other=0.0).to(tl.float32)
        tl.store(scale_ptr + c, scale, mask=mask)
        tl.store(shift_ptr + c, shift, mask=mask)


@triton.jit
def _bn_apply_kernel(
    x_ptr,
    y_ptr,
    scale_ptr,
    shift_ptr,
    C,
    HW,
    BLOCK: tl.constexpr,
):
    plane = tl.program_id(0)  # n * C + c
    c = plane % C
    scale = tl.load(scale_ptr + c)
    shift = tl.load(shift_ptr + c)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HW
    base = plane.to(tl.int64) * HW  # int64: B * C * H * W can pass 2^31
    x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + base + offs, (x * scale + shift).to(y_ptr.dtype.element_ty), mask=mask)


def batch_norm_inference_folded(
    x: torch.Tensor,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    block: int = 1024,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return eval-mode BatchNorm2d of NCHW ``x`` with the given running statistics.

    Args:
        x: (B, C, H, W) bf16/fp16/fp32.
        running_mean: (C,) float.
        running_var: (C,) float.
        weight: (C,) float gamma, or None (1).
        bias: (C,) float beta, or None (0).
        eps: Added to running_var.
        block: Elements of one (n, c) plane per program (a power of two).
        num_warps: Warps per program.

    Returns:
        y: (B, C, H, W) in x's dtype, contiguous.

    Raises:
        ValueError: x is not 4-D, a per-channel vector is not (C,), or block is bad.
    """
    if x.dim() != 4:
        raise ValueError(f"x must be (B, C, H, W); got {tuple(x.shape)}")
    b, c, h, w = x.shape
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):  # fmt: skip
        if t is not None and t.shape != (c,):
            raise ValueError(f"{name} must be ({c},) for x {tuple(x.shape)}; got {tuple(t.shape)}")
    if block < 16 or block & (block - 1):
        raise ValueError(f"block {block} must be a power of two >= 16")
    x = x.contiguous()
    y = torch.empty_like(x)
    if y.numel() == 0:
        return y
    scale = torch.empty(c, dtype=torch.float32, device=x.device)
    shift = torch.empty(c, dtype=torch.float32, device=x.device)
    mean, var = running_mean.contiguous(), running_var.contiguous()
    _bn_fold_kernel[(1,)](
        mean, var,
        mean if weight is None else weight.contiguous(),
        mean if bias is None else bias.contiguous(),
        scale, shift, c, eps,
        HAS_W=weight is not None, HAS_B=bias is not None,
        BLOCK_C=min(triton.next_power_of_2(c), 1024),
    )  # fmt: skip
    _bn_apply_kernel[(b * c, triton.cdiv(h * w, block))](
        x, y, scale, shift, c, h * w, BLOCK=block, num_warps=num_warps
    )
    return y


def reference(
    x: torch.Tensor,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Return torch's eval-mode batch_norm in fp32, cast to x's dtype."""

    def f(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.float()

    y = torch.nn.functional.batch_norm(
        x.float(), f(running_mean), f(running_var), f(weight), f(bias), training=False, eps=eps
    )
    return y.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return the inputs for ``shape = {"batch", "channels", "height", "width"}``."""
    b, c, h, w = shape["batch"], shape["channels"], shape["height"], shape["width"]
    return {
        "x": torch.randn(b, c, h, w, device=device).to(dtype),
        "running_mean": 0.5 * torch.randn(c, device=device),
        "running_var": 0.5 + torch.rand(c, device=device),
        "weight": 1.0 + 0.2 * torch.randn(c, device=device),
        "bias": 0.2 * torch.randn(c, device=device),
    }
