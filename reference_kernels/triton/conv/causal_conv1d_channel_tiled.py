"""
---
id: causal_conv1d_channel_tiled
title: Depthwise causal conv1d, programs over (sequence, channel tile) looping over time inside
op_family: conv
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [channel-tile, time-loop, depthwise-conv, initial-state, fused-bias-silu, few-programs]
status: reference
launcher: causal_conv1d_channel_tiled
tuning:
  block_c: [32, 8, 16, 64, 128]
  block_t: [32, 8, 16, 64]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., C, L], dtypes: [bf16, fp16, fp32], layout: any, aliases: [hidden_states]}
  weight: {shape: [C, W], dtypes: [float], aliases: [conv_weight]}
  bias: {shape: [C], dtypes: [float], optional: true, aliases: [conv_bias]}
  initial_state: {shape: ['?', C, W - 1], dtypes: [float], optional: true, aliases: [conv_state]}
  activation: {type: str, default: silu}
returns:
  - {name: out, shape: [..., C, L], dtype: x}
problem:
  shapes: [{dim: 100, tokens: 37}, {dim: 64, tokens: 1}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: causal_conv1d/0, dtype: bf16, latency_us: 3.872, sol_fraction: 0.7686, date: '2026-12-03'}
---
The short causal convolution of Mamba / Gated DeltaNet blocks (atrex30's causal_conv1d): out[c, t] =
act(bias[c] + sum_j w[c, j] * xp[c, t + j]) with xp = [initial_state[c] | x[c]], accumulated in
fp32, act = SiLU ("silu" or "swish") or none. Program (b, i) owns BLOCK_C channels of sequence b for
the whole sequence: it loads its bias once, then walks time in BLOCK_T-step chunks; for each chunk
the W taps (unrolled) load the (BLOCK_C, BLOCK_T) tile shifted back by W - 1 - j steps, so the W - 1
steps before a chunk come from the previous chunk's columns (L1 hits) and, before t = 0, from the
state. Only B * DIM / BLOCK_C programs run, each streaming its channels' rows in time order, instead
of one program per (channel, time) tile as in causal_conv1d_fwd: per-program set-up (bias, weight
rows, state) is paid once per sequence, and the grid stays small for very long sequences. Bytes per
element: one read and one write in the input dtype, plus W weights and the state per channel. When
it wins: long sequences with DIM / BLOCK_C at least a few times the SM count (DIM = 4096..8192 at
BLOCK_C = 32 gives 128-256 programs per sequence). Limits: short sequences or small DIM leave SMs
idle (the time axis is serial); the final state is not returned; equal-length sequences only.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _causal_conv1d_channel_tiled_kernel(
    # pointers
    x_ptr,
    w_ptr,
    bias_ptr,
    state_ptr,
    out_ptr,
    # sizes
    DIM,
    T,
    # strides (elements)
    stride_xb,
    stride_xc,
    stride_xt,
    stride_wc,
    stride_wk,
    stride_sb,
    stride_sc,
    stride_sk,
    stride_ob,
    stride_oc,
    stride_ot,
    # meta
    WIDTH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_STATE: tl.constexpr,
    SILU: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)  # int64: seq * stride can pass 2^31 elements
    chans = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = chans < DIM
    x_rows = x_ptr + seq * stride_xb + chans[:, None].to(tl.int64) * stride_xc
    s_rows = state_ptr + seq * stride_sb + chans[:, None].to(tl.int64) * stride_sc
    o_rows = out_ptr + seq * stride_ob + chans[:, None].to(tl.int64) * stride_oc
    bias = tl.zeros((BLOCK_C,), dtype=tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + chans, mask=cmask, other=0.0).to(tl.float32)

    for t0 in range(0, T, BLOCK_T):  # serial walk over time
        times = t0 + tl.arange(0, BLOCK_T)
        acc = tl.zeros((BLOCK_C, BLOCK_T), dtype=tl.float32) + bias[:, None]
        for j in tl.static_range(WIDTH):
            src = times[None, :] + (j - (WIDTH - 1))  # xp[t + j] = x[t + j - (W - 1)]
            vals = tl.load(x_rows + src * stride_xt, mask=cmask[:, None] & (src >= 0) & (src < T),
                           other=0.0).to(tl.float32)  # fmt: skip
            if HAS_STATE and t0 < WIDTH - 1:  # only the first chunks reach into the state
                before = (src < 0) & (times[None, :] < T)
                s_vals = tl.load(s_rows + (src + WIDTH - 1) * stride_sk,
                                 mask=cmask[:, None] & before, other=0.0)  # fmt: skip
                vals = tl.where(before, s_vals.to(tl.float32), vals)
            w = tl.load(w_ptr + chans * stride_wc + j * stride_wk, mask=cmask, other=0.0)
            acc += vals * w.to(tl.float32)[:, None]
        if SILU:
            acc = acc / (1.0 + tl.exp2(-acc * 1.4426950408889634))
        tl.store(o_rows + times[None, :] * stride_ot, acc.to(out_ptr.dtype.element_ty),
                 mask=cmask[:, None] & (times < T)[None, :])  # fmt: skip


def causal_conv1d_channel_tiled(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    activation: str | None = "silu",
    *,
    block_c: int | None = None,
    block_t: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return act(bias + depthwise causal conv of [initial_state | x] with weight) per channel.

    Args:
        x: (dim, T) or (B, dim, T) bf16/fp16/fp32, any strides.
        weight: (dim, W) taps per channel, any float dtype.
        bias: (dim,) or None.
        initial_state: (B, dim, W - 1) (B = 1 for 2D x) inputs before t = 0, or None for zeros.
        activation: "silu", "swish" (the same) or None.
        block_c: Channels per program (power of two); None = 32 (fewer for small dim).
        block_t: Time steps per loop step (power of two); None = min(32, next_pow2(T)).
        num_warps: Warps per program; None = 4.

    Returns:
        out: same shape and dtype as x, contiguous.

    Raises:
        ValueError: The shapes do not fit, the activation is unknown, or a block is not a power
            of two.
    """
    if x.dim() not in (2, 3) or weight.dim() != 2 or weight.shape[0] != x.shape[-2]:
        got = (tuple(x.shape), tuple(weight.shape))
        raise ValueError(f"need x (dim, T) or (B, dim, T) and weight (dim, W); got {got}")
    dim, width = weight.shape
    batch = 1 if x.dim() == 2 else x.shape[0]
    if bias is not None and tuple(bias.shape) != (dim,):
        raise ValueError(f"bias must be ({dim},); got {tuple(bias.shape)}")
    if initial_state is not None and tuple(initial_state.shape) != (batch, dim, width - 1):
        want, got = (batch, dim, width - 1), tuple(initial_state.shape)
        raise ValueError(f"initial_state must be {want}; got {got}")
    if activation not in (None, "silu", "swish"):
        raise ValueError(f"activation must be 'silu', 'swish' or None; got {activation!r}")
    x3 = x if x.dim() == 3 else x.unsqueeze(0)
    t = x3.shape[2]
    bc = block_c or min(32, triton.next_power_of_2(dim))
    bt = block_t or min(32, triton.next_power_of_2(max(t, 1)))
    for name, value in (("block_c", bc), ("block_t", bt)):
        if value <= 0 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two; got {value}")
    out = torch.empty((batch, dim, t), dtype=x.dtype, device=x.device)
    if out.numel() > 0:
        state = x3 if initial_state is None else initial_state  # a dummy pointer when absent
        _causal_conv1d_channel_tiled_kernel[(batch, triton.cdiv(dim, bc))](
            x3, weight, weight if bias is None else bias, state, out,
            dim, t,
            *x3.stride(), *weight.stride(), *state.stride(), *out.stride(),
            WIDTH=width, HAS_BIAS=bias is not None, HAS_STATE=initial_state is not None,
            SILU=activation is not None, BLOCK_C=bc, BLOCK_T=bt, num_warps=num_warps or 4,
        )  # fmt: skip
    return out if x.dim() == 3 else out[0]


def reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> torch.Tensor:
    """Return the same convolution in fp32 PyTorch (explicit taps), cast to x's dtype."""
    x3 = (x if x.dim() == 3 else x.unsqueeze(0)).float()
    dim, width = weight.shape
    if initial_state is None:
        state = x3.new_zeros(x3.shape[0], dim, width - 1)
    else:
        state = initial_state.float()
    xp = torch.cat([state, x3], dim=-1)
    t = x3.shape[-1]
    acc = x3.new_zeros(x3.shape) if bias is None else bias.float()[:, None].expand_as(x3).clone()
    for j in range(width):
        acc = acc + weight.float()[:, j : j + 1] * xp[..., j : j + t]
    if activation is not None:
        acc = torch.nn.functional.silu(acc)
    out = acc.to(x.dtype)
    return out if x.dim() == 3 else out[0]


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``{"dim", "tokens"}`` (+ ``"width"``, ``"batch"``): all N(0, 1) * 0.5."""
    dim, t, width = shape["dim"], shape["tokens"], shape.get("width", 4)
    batch = shape.get("batch", 1)
    lead = (batch,) if "batch" in shape else ()
    return {
        "x": (torch.randn(*lead, dim, t, device=device) * 0.5).to(dtype),
        "weight": (torch.randn(dim, width, device=device) * 0.5).to(dtype),
        "bias": (torch.randn(dim, device=device) * 0.5).to(dtype),
        "initial_state": (torch.randn(batch, dim, width - 1, device=device) * 0.5).to(dtype),
        "activation": shape.get("activation", "silu"),
    }
