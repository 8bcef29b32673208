"""
---
id: group_norm_nchw
title: GroupNorm over NCHW with affine weight/bias, one program per (sample, group), 3 passes
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [group-per-program, chunked-loop, two-pass-variance, per-channel-affine,
  fp32-accumulate]
status: reference
launcher: group_norm_nchw
tuning:
  block: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x:
    {shape: [N, C, H, W], dtypes: [bf16, fp16, fp32], layout: contiguous,
     aliases: [input, hidden_states]}
  weight: {shape: [C], dtypes: [float], optional: true, aliases: [gamma, w]}
  bias: {shape: [C], dtypes: [float], optional: true, aliases: [beta, b]}
  num_groups: {type: int, default: 32, aliases: [groups, num_norm_groups, G]}
  eps: {type: float, default: 1.0e-5, aliases: [epsilon, norm_eps]}
returns:
  - {name: y, shape: [N, C, H, W], dtype: x}
problem:
  shapes: [{n: 2, c: 8, h: 9, w: 7, groups: 4}, {n: 1, c: 6, h: 5, w: 5, groups: 3, affine: false}]
  dtypes: [fp32, bf16]
measured: []
---
GroupNorm as in diffusion UNets / VAEs and conv nets: the C channels of each sample split into G
groups of C / G channels; each group's (C / G) x HW values (HW = all trailing dims) are normalised
by their own mean and biased variance, y = (x - mean) * rsqrt(var + eps) * weight[c] + bias[c]. In
contiguous NCHW a group is ONE contiguous run of (C / G) * HW elements, so program (n, g) streams it
in BLOCK chunks three times: the sum (mean), the sum of squared deviations from that mean (the
two-pass variance: no cancellation even when |mean| >> std, unlike E[x^2] - mean^2), and the
normalise-and-store pass, where each element finds its channel as offset // HW and loads that
channel's weight and bias (from L1: a chunk spans few channels). Accumulation is an element-wise
fp32 vector reduced once after each loop. Bytes per element: three reads (the 2nd and 3rd hit L2 for
groups up to a few MB; a 64 x 64 x 64 bf16 group is 512 KB) and one write. Limits: N * G programs,
so a batch-1 UNet block with 32 groups uses 32 SMs (splitting a group across programs needs a
cross-program reduction); needs contiguous NCHW (channels-last is copied first); very large groups
re-read from HBM.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _group_norm_nchw_kernel(
    # pointers
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    # sizes
    C,
    HW,
    CPG,  # channels per group
    G,
    # scalars
    eps,
    # meta
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    n = tl.program_id(0).to(tl.int64)  # int64: sample * C * HW can pass 2^31 elements
    g = tl.program_id(1)
    size = CPG * HW
    base = n * C * HW + g.to(tl.int64) * size  # the group is one contiguous run
    offs = tl.arange(0, BLOCK)

    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, size, BLOCK):  # pass 1: mean
        idx = start + offs
        acc += tl.load(x_ptr + base + idx, mask=idx < size, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / size

    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, size, BLOCK):  # pass 2: variance about the mean
        idx = start + offs
        mask = idx < size
        x = tl.load(x_ptr + base + idx, mask=mask, other=0.0).to(tl.float32)
        dev = tl.where(mask, x - mean, 0.0)
        acc += dev * dev
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / size + eps)

    for start in range(0, size, BLOCK):  # pass 3: normalise, per-channel affine, store
        idx = start + offs
        mask = idx < size
        x = tl.load(x_ptr + base + idx, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd
        channel = g * CPG + idx // HW
        if HAS_WEIGHT:
            y *= tl.load(w_ptr + channel, mask=mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            y += tl.load(b_ptr + channel, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + idx, y.to(y_ptr.dtype.element_ty), mask=mask)


def group_norm_nchw(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    num_groups: int = 32,
    eps: float = 1e-5,
    *,
    block: int = 1024,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return group_norm(x, num_groups, weight, bias, eps) over (N, C, *spatial).

    Args:
        x: (N, C, *spatial) bf16/fp16/fp32 (copied first if not contiguous).
        weight: Optional (C,) float per-channel scale.
        bias: Optional (C,) float per-channel shift.
        num_groups: Groups G; C must be divisible by G.
        eps: Added to the biased variance before the reciprocal square root.
        block: Elements per loop step (power of two).
        num_warps: Warps per program.

    Returns:
        y: x's shape and dtype, contiguous.

    Raises:
        ValueError: x has fewer than 2 dims, C % num_groups != 0, or weight/bias shapes differ.
    """
    if x.dim() < 2 or not x.is_floating_point():
        raise ValueError(f"x must be float (N, C, *spatial); got {tuple(x.shape)} {x.dtype}")
    n, c = x.shape[:2]
    if num_groups < 1 or c % num_groups:
        raise ValueError(f"channels {c} of x {tuple(x.shape)} are not divisible by {num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise ValueError(f"{name} must be ({c},) for x {tuple(x.shape)}; got {tuple(t.shape)}")
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two; got {block}")
    xc = x.contiguous()
    y = torch.empty_like(xc)
    hw = xc[0, 0].numel() if n and c else 0
    if y.numel() == 0:
        return y
    _group_norm_nchw_kernel[(n, num_groups)](
        xc, weight if weight is not None else xc, bias if bias is not None else xc, y,
        c, hw, c // num_groups, num_groups,
        float(eps),
        HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        BLOCK=block, num_warps=num_warps,
    )  # fmt: skip
    return y


def reference(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    num_groups: int = 32,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Return F.group_norm in fp32, cast to x's dtype."""
    w = weight.float() if weight is not None else None
    b = bias.float() if bias is not None else None
    return torch.nn.functional.group_norm(x.float(), num_groups, w, b, eps).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"n", "c", "h", "w", "groups"}`` (+ ``"affine"``, default True).

    x ~ 3 + N(0, 1) (a mean far from zero tests the two-pass variance); weight ~ 1 + N(0, .1).
    """
    c = shape["c"]
    x = 3.0 + torch.randn(shape["n"], c, shape["h"], shape["w"], device=device)
    affine = shape.get("affine", True)
    weight = 1.0 + 0.1 * torch.randn(c, device=device) if affine else None
    bias = 0.1 * torch.randn(c, device=device) if affine else None
    return {"x": x.to(dtype), "weight": weight, "bias": bias,
            "num_groups": shape["groups"], "eps": 1e-5}  # fmt: skip
