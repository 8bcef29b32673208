"""
---
id: depthwise_conv2d_nhwc_3x3
title: Depthwise 3x3 conv2d in NHWC with zero padding, (row, width tile, channel tile) programs
op_family: conv
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [depthwise-conv, channels-last, 2d-tile, unrolled-taps, halo-masks, fp32-accumulate, fused-bias]
status: reference
launcher: depthwise_conv2d_nhwc_3x3
tuning:
  block_w: [8, 1, 2, 4, 16, 32]
  block_c: [64, 16, 32, 128, 256]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [N, H, W, C], dtypes: [bf16, fp16, fp32], layout: rows, aliases: [input]}
  weight: {shape: [3, 3, C], dtypes: [float], layout: rows}
  bias: {shape: [C], dtypes: [float], optional: true}
returns:
  - {name: out, shape: [N, H, W, C], dtype: x}
problem:
  shapes: [{batch: 2, height: 2, width: 7, channels: 12}]
  dtypes: [fp32]
measured: []
---
Depthwise 2-D convolution (one 3 x 3 filter per channel, stride 1, zero padding 1, output size =
input size) on channels-last activations, as in MobileNet-style blocks and vision-encoder
positional convs: out[n, h, w, c] = bias[c] + sum_{i,j} weight[i, j, c] * x[n, h + i - 1,
w + j - 1, c]. With NHWC, channels are the contiguous axis, so program (n * H + h, wt, ct) owns a
(BLOCK_W, BLOCK_C) tile of one output row: the 9 taps are unrolled at compile time, each a
coalesced (BLOCK_W, BLOCK_C) load of the input shifted by (i - 1, j - 1), masked to zero outside
the image (the halo); the per-channel tap vector (BLOCK_C) is loaded once per tap. fp32 accumulate,
optional fused bias. Bytes per element: one output write and ~1 input read from DRAM (the 9
overlapping loads of neighbouring programs hit L1/L2), 18 FLOPs. When it wins: NHWC pipelines
where converting to NCHW for cuDNN would cost two transposes. Limits: 3 x 3, stride 1, padding 1
only; no dilation or groups other than depthwise; the x/weight last dim must be contiguous.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _depthwise_conv2d_nhwc_3x3_kernel(
    # pointers
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    # sizes
    H,
    W,
    C,
    # strides (elements; channels contiguous)
    sxn, sxh, sxw,
    son, soh, sow,
    swi, swj,
    # meta
    HAS_BIAS: tl.constexpr,
    BLOCK_W: tl.constexpr,
    BLOCK_C: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    n = (row // H).to(tl.int64)
    h = row % H
    ws = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    cs = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cs < C
    acc = tl.zeros((BLOCK_W, BLOCK_C), dtype=tl.float32)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)[None, :]
    for i in tl.static_range(3):
        hi = h + i - 1
        h_ok = (hi >= 0) & (hi < H)
        for j in tl.static_range(3):
            wj = ws + j - 1
            mask = (h_ok & (wj >= 0) & (wj < W))[:, None] & c_ok[None, :]
            ptrs = x_ptr + n * sxn + hi * sxh + wj[:, None] * sxw + cs[None, :]
            xv = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
            tap = tl.load(w_ptr + i * swi + j * swj + cs, mask=c_ok, other=0.0).to(tl.float32)
            acc += xv * tap[None, :]
    o_ptrs = out_ptr + n * son + h * soh + ws[:, None] * sow + cs[None, :]
    tl.store(o_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(ws < W)[:, None] & c_ok[None, :])


def depthwise_conv2d_nhwc_3x3(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    block_w: int | None = None,
    block_c: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the depthwise 3x3 (stride 1, zero padding 1) convolution of NHWC x.

    Args:
        x: (N, H, W, C) bf16/fp16/fp32, channels contiguous.
        weight: (3, 3, C) float taps (PyTorch's (C, 1, 3, 3) depthwise weight permuted).
        bias: (C,) float or None.
        block_w: Output columns per program (power of two); None = min(next_pow2(W), 8).
        block_c: Channels per program (power of two); None = min(next_pow2(C), 64).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (N, H, W, C) with x's dtype, contiguous.

    Raises:
        ValueError: The shapes do not fit or a last dimension is not contiguous.
    """
    if x.dim() != 4:
        raise ValueError(f"x must be (N, H, W, C); got {tuple(x.shape)}")
    n, h, w, c = x.shape
    if weight.shape != (3, 3, c):
        raise ValueError(f"weight must be (3, 3, {c}); got {tuple(weight.shape)}")
    if bias is not None and bias.shape != (c,):
        raise ValueError(f"bias must be ({c},); got {tuple(bias.shape)}")
    x = x if x.stride(3) == 1 else x.contiguous()
    weight = weight if weight.stride(2) == 1 else weight.contiguous()
    out = torch.empty((n, h, w, c), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    cfg = {"block_w": min(triton.next_power_of_2(w), 8), "num_warps": 4,
           "block_c": min(triton.next_power_of_2(c), 64)}  # fmt: skip
    given = {"block_w": block_w, "block_c": block_c, "num_warps": num_warps}
    cfg.update({name: val for name, val in given.items() if val is not None})
    grid = (n * h, triton.cdiv(w, cfg["block_w"]), triton.cdiv(c, cfg["block_c"]))
    _depthwise_conv2d_nhwc_3x3_kernel[grid](
        x, weight, bias if bias is not None else weight, out,
        h, w, c,
        x.stride(0), x.stride(1), x.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        weight.stride(0), weight.stride(1),
        HAS_BIAS=bias is not None,
        BLOCK_W=cfg["block_w"], BLOCK_C=cfg["block_c"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out


def reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """Return F.conv2d(groups=C, padding=1) on the NCHW view, fp32, cast back to x's dtype."""
    c = x.shape[-1]
    xf = x.float().permute(0, 3, 1, 2)
    wf = weight.float().permute(2, 0, 1).unsqueeze(1)  # (C, 1, 3, 3)
    b = None if bias is None else bias.float()
    out = torch.nn.functional.conv2d(xf, wf, b, padding=1, groups=c)
    return out.permute(0, 2, 3, 1).contiguous().to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return N(0, 1) ``{"x", "weight", "bias"}``: ``{"batch", "height", "width", "channels"}``."""
    n, h, w, c = shape["batch"], shape["height"], shape["width"], shape["channels"]
    return {
        "x": torch.randn(n, h, w, c, device=device).to(dtype),
        "weight": torch.randn(3, 3, c, device=device).to(dtype),
        "bias": torch.randn(c, device=device).to(dtype),
    }
