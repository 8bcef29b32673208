"""
---
id: sinusoidal_position_add
title: Sinusoidal position embedding computed on the fly (no table) and added to the input
op_family: embedding
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-tiles, on-the-fly-inv-freq, exp2, register-deinterleave, fused-add, fp32-accumulate]
status: reference
launcher: sinusoidal_position_add
tuning:
  block_s: [4, 1, 2, 8, 16]
  block_p: [128, 32, 64, 256, 512]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., S, D], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states, embeddings]}
  offset: {type: int, default: 0, aliases: [start_pos, past_length]}
  base: {type: float, default: 10000.0, aliases: [max_timescale, theta]}
  x_scale: {type: float, default: 1.0, aliases: [scale, embed_scale]}
returns:
  - {name: out, shape: [..., S, D], dtype: x}
problem:
  shapes: [{batch: 2, seq: 7, dim: 40, offset: 100}, {batch: 1, seq: 33, dim: 300, x_scale: 2.0}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
out[..., s, :] = x_scale * x[..., s, :] + PE(s + offset), with the Transformer's (Vaswani et al.,
2017) interleaved sinusoids PE(p, 2i) = sin(p * w_i), PE(p, 2i + 1) = cos(p * w_i), w_i =
base^(-2i / D), computed in registers instead of read from a (max_len x D) table. Program (i, j)
owns BLOCK_S rows (positions) and the column pairs j*BLOCK_P..: it loads the 2*BLOCK_P contiguous
inputs of each row as one vector run, splits even and odd lanes in registers (reshape to (.., 2) +
tl.split), computes w_i = exp2(-2i/D * log2(base)) once per pair and ONE sin and ONE cos per pair
(not both per element), adds, re-interleaves with tl.join and stores; math in fp32, rounded once.
Bytes per element: 1 read + 1 write (4 B in bf16) against 3 reads for x + table gather; about half
a transcendental per element. offset shifts every position (a decode step continues at the cache
length). Limits: D must be even; fp32 sin/cos of large angles (positions past ~1e5) lose digits the
same way the table build would; the concatenated [sin | cos] layout of some codebases is not served.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _sinusoidal_position_add_kernel(
    # pointers
    x_ptr,
    out_ptr,
    # sizes
    R,  # rows = prod(leading dims) * S
    S,
    HALF,  # D / 2 column pairs
    # strides (elements; the last dim is contiguous)
    stride_xr,
    stride_or,
    # scalars
    offset,
    neg_log2_base_over_half,  # -log2(base) / HALF
    x_scale,
    # meta
    BLOCK_S: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)
    pairs = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    cols = tl.program_id(1) * (2 * BLOCK_P) + tl.arange(0, 2 * BLOCK_P)  # their 2 lanes
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements
    mask = (rows < R)[:, None] & (cols < 2 * HALF)[None, :]

    x = tl.load(x_ptr + rows64 * stride_xr + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    even, odd = tl.split(tl.reshape(x, (BLOCK_S, BLOCK_P, 2)))  # x[..., 2i], x[..., 2i + 1]

    pos = ((rows % S) + offset).to(tl.float32)
    inv_freq = tl.exp2(pairs.to(tl.float32) * neg_log2_base_over_half)  # base^(-2i / D)
    angle = pos[:, None] * inv_freq[None, :]
    even = even * x_scale + tl.sin(angle)
    odd = odd * x_scale + tl.cos(angle)

    out = tl.reshape(tl.join(even, odd), (BLOCK_S, 2 * BLOCK_P))
    tl.store(
        out_ptr + rows64 * stride_or + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=mask
    )


def _launch_config(r: int, half: int) -> dict[str, int]:
    """Return up to 128 pairs (256 columns) per tile and rows for about 1024 elements."""
    block_p = min(128, triton.next_power_of_2(half))
    block_s = max(1, min(16, 512 // block_p, triton.next_power_of_2(r)))
    return {"block_s": block_s, "block_p": block_p, "num_warps": 4}


def sinusoidal_position_add(
    x: torch.Tensor,
    offset: int = 0,
    base: float = 10000.0,
    x_scale: float = 1.0,
    *,
    block_s: int | None = None,
    block_p: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return x_scale * x + the interleaved sinusoidal embedding of positions offset..offset+S-1.

    Args:
        x: (..., S, D) bf16/fp16/fp32, D even, last dimension contiguous (copied otherwise).
        offset: Position of the first row along S (e.g. the KV-cache length when decoding).
        base: The frequency base (10000 in the Transformer paper).
        x_scale: Multiplies x before the add (e.g. sqrt(D) in some encoders).
        block_s: Rows per tile (power of two); None fills about 512 pairs per tile.
        block_p: Column pairs per tile (power of two); None = min(128, next_pow2(D / 2)).
        num_warps: Warps per program; None = 4.

    Returns:
        out: same shape and dtype as ``x``, contiguous; computed in fp32, rounded once.

    Raises:
        ValueError: x has fewer than 2 dimensions, is not float, D is odd, base <= 0, or a block
            size is not a power of two.
    """
    if x.dim() < 2 or not x.is_floating_point():
        raise ValueError(f"x must be float (..., S, D); got {x.dtype} {tuple(x.shape)}")
    s_len, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"D = {d} must be even (sin/cos pairs); x is {tuple(x.shape)}")
    if base <= 0:
        raise ValueError(f"base must be > 0; got {base}")
    for name, value in (("block_s", block_s), ("block_p", block_p)):
        if value is not None and (value < 1 or value & (value - 1)):
            raise ValueError(f"{name} must be a power of two; got {value}")
    x2 = x.reshape(-1, d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out.reshape(x.shape)
    r, half = x2.shape[0], d // 2
    cfg = _launch_config(r, half)
    given = {"block_s": block_s, "block_p": block_p, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(r, cfg["block_s"]), triton.cdiv(half, cfg["block_p"]))
    _sinusoidal_position_add_kernel[grid](
        x2, out,
        r, s_len, half,
        x2.stride(0), out.stride(0),
        int(offset), -math.log2(base) / half, float(x_scale),
        BLOCK_S=cfg["block_s"], BLOCK_P=cfg["block_p"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out.reshape(x.shape)


def reference(
    x: torch.Tensor, offset: int = 0, base: float = 10000.0, x_scale: float = 1.0
) -> torch.Tensor:
    """Return x_scale * x + a (S, D) interleaved sin/cos table built in fp32, cast to x's dtype."""
    s_len, d = x.shape[-2], x.shape[-1]
    pos = torch.arange(offset, offset + s_len, device=x.device, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, d, 2, device=x.device) * (-math.log(base) / d))
    pe = torch.zeros(s_len, d, device=x.device)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq)
    return (x.float() * x_scale + pe).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"batch", "seq", "dim"}`` (+ ``"offset"``, ``"x_scale"``); N(0, 1) x."""
    x = torch.randn(shape["batch"], shape["seq"], shape["dim"], device=device).to(dtype)
    return {"x": x, "offset": shape.get("offset", 0), "x_scale": shape.get("x_scale", 1.0)}
