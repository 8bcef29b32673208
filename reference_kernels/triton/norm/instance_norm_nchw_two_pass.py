"""
---
id: instance_norm_nchw_two_pass
title: InstanceNorm over NCHW, one program per (n, c) plane, a shifted-sum stats pass then normalise
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [plane-per-program, two-pass, shifted-sums, chunked-loop, per-channel-affine,
  fp32-accumulate]
status: reference
launcher: instance_norm_nchw_two_pass
tuning:
  block: [1024, 128, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [B, C, H, W], dtypes: [bf16, fp16, fp32], layout: contiguous, aliases: [input]}
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
InstanceNorm2d (training-mode statistics, no running stats): every (n, c) plane of H * W values is
normalised by its own mean and biased variance, y = (x - mean) * rsqrt(var + eps) * weight[c] +
bias[c]. Program (n, c) owns one contiguous plane and sweeps it twice in BLOCK-element chunks. Pass
1 accumulates, in fp32 vectors, the sums of d and d^2 with d = x - x[0] (shifting by the plane's
first value keeps the variance from cancelling when |mean| >> std, at no extra pass); one reduction
then gives mean = x[0] + S1 / n and var = S2 / n - (S1 / n)^2. Pass 2 reads the plane again and
writes one FMA per element with the per-plane scale and shift. Bytes: two reads and one write per
element (6 bytes in bf16); the second read hits L2 for planes up to a few MB. Wins when B * C fills
the GPU (style transfer, GAN generators); limits: with few planes and huge H * W the grid is too
small (a split-plane variant with partial sums would be needed), and NCHW contiguous only.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _instance_norm_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    C,
    HW,
    eps,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    BLOCK: tl.constexpr,
):
    plane = tl.program_id(0)  # n * C + c
    base = plane.to(tl.int64) * HW  # int64: B * C * H * W can pass 2^31
    shift = tl.load(x_ptr + base).to(tl.float32)
    s1 = tl.zeros((BLOCK,), dtype=tl.float32)
    s2 = tl.zeros((BLOCK,), dtype=tl.float32)
    # pass 1: shifted sums (padded lanes contribute d = 0)
    for start in range(0, HW, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < HW
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - shift, 0.0)
        s1 += d
        s2 += d * d
    mean_d = tl.sum(s1, axis=0) / HW
    var = tl.maximum(tl.sum(s2, axis=0) / HW - mean_d * mean_d, 0.0)
    scale = tl.rsqrt(var + eps)
    c = plane % C
    if HAS_W:
        scale = scale * tl.load(w_ptr + c).to(tl.float32)
    offset = -(shift + mean_d) * scale
    if HAS_B:
        offset = offset + tl.load(b_ptr + c).to(tl.float32)
    # pass 2: normalise
    for start in range(0, HW, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < HW
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + offs, (x * scale + offset).to(y_ptr.dtype.element_ty), mask=mask)


def instance_norm_nchw_two_pass(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    block: int = 1024,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return InstanceNorm2d of NCHW ``x`` (per-plane statistics, optional per-channel affine).

    Args:
        x: (B, C, H, W) bf16/fp16/fp32.
        weight: (C,) float gamma, or None (1).
        bias: (C,) float beta, or None (0).
        eps: Added to the biased per-plane variance.
        block: Elements per loop step (a power of two).
        num_warps: Warps per program.

    Returns:
        y: (B, C, H, W) in x's dtype, contiguous.

    Raises:
        ValueError: x is not 4-D, weight/bias is not (C,), or block is bad.
    """
    if x.dim() != 4:
        raise ValueError(f"x must be (B, C, H, W); got {tuple(x.shape)}")
    b, c, h, w = x.shape
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.shape != (c,):
            raise ValueError(f"{name} must be ({c},) for x {tuple(x.shape)}; got {tuple(t.shape)}")
    if block < 16 or block & (block - 1):
        raise ValueError(f"block {block} must be a power of two >= 16")
    x = x.contiguous()
    y = torch.empty_like(x)
    if y.numel() == 0:
        return y
    _instance_norm_kernel[(b * c,)](
        x,
        x if weight is None else weight.contiguous(),
        x if bias is None else bias.contiguous(),
        y, c, h * w, eps,
        HAS_W=weight is not None, HAS_B=bias is not None, BLOCK=block,
        num_warps=num_warps,
    )  # fmt: skip
    return y


def reference(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Return torch's instance_norm in fp32 (fp64 statistics would differ by ~1e-7), cast back."""
    wf = None if weight is None else weight.float()
    bf = None if bias is None else bias.float()
    return torch.nn.functional.instance_norm(x.float(), weight=wf, bias=bf, eps=eps).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "weight", "bias"}`` for ``shape = {"batch", "channels", "height", "width"}``.

    x has a per-plane offset of 3 (|mean| > std) so an unshifted one-pass variance would show.
    """
    b, c, h, w = shape["batch"], shape["channels"], shape["height"], shape["width"]
    x = 3.0 + torch.randn(b, c, h, w, device=device)
    return {
        "x": x.to(dtype),
        "weight": 1.0 + 0.2 * torch.randn(c, device=device),
        "bias": 0.2 * torch.randn(c, device=device),
    }
