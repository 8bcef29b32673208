"""
---
id: causal_conv1d_token_major_vec
title: Depthwise causal conv1d for channel-last x, token-block programs sweeping all channels
op_family: conv
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [token-block, channel-loop, channel-last, vector-loads, depthwise-conv, fused-bias-silu]
status: reference
launcher: causal_conv1d_token_major_vec
tuning:
  block_t: [16, 4, 8, 32, 64]
  block_c: [128, 32, 64, 256]
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
  shapes: [{dim: 40, tokens: 37}, {dim: 20, tokens: 2, batch: 2, width: 3, activation: null}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: causal_conv1d/0, dtype: bf16, latency_us: 4.128, sol_fraction: 0.6667, date: '2026-12-04'}
---
The short causal convolution of Mamba / Gated DeltaNet blocks (atrex30's causal_conv1d), laid out
for channel-last activations: out[c, t] = act(bias[c] + sum_j w[c, j] * xp[c, t + j]) with xp =
[initial_state[c] | x[c]], fp32 accumulation, act = SiLU ("silu"/"swish") or none. The logical
shape is (B, dim, T) as in the other conv kernels, but when x is a transposed view of (B, T, dim)
storage (channel stride 1, as the in_proj GEMM leaves it) this kernel reads it in rows: program
(b, i, s) owns BLOCK_T consecutive tokens of sequence b and sweeps its channels in BLOCK_C slices
(all of them, s = 0, unless the token blocks number fewer than 256: then the sweep is split into
contiguous channel ranges, so a decode step is not one program walking every channel serially),
with tiles shaped (BLOCK_T, BLOCK_C) and channels the fast axis, so each tap's load and the store
are contiguous BLOCK_C-wide vectors per token (128-bit accesses on the GPU). The W - 1 tokens
before the block are re-read per tap (L1 hits) or, before t = 0, taken from the state. The output
has x's strides (a channel-last x gives a channel-last out). Bytes per element: one read and one
write, plus W weights and a bias per channel re-read by each token block (from L2). When it wins:
channel-last inputs, where tiling over (channel, time) with time fastest would issue strided
scalar loads; many tokens (T / BLOCK_T programs per sequence). Limits: for time-contiguous x (the
(dim, T) layout) the loads become strided, so prefer causal_conv1d_fwd there; the final state is
not returned; equal-length sequences only.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _causal_conv1d_token_major_kernel(
    x_ptr, w_ptr, bias_ptr, state_ptr, out_ptr,
    DIM, T, C_PER_PROGRAM,
    stride_xb, stride_xc, stride_xt, stride_wc, stride_wk,
    stride_sb, stride_sc, stride_sk, stride_ob, stride_oc, stride_ot,
    WIDTH: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_STATE: tl.constexpr, SILU: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0).to(tl.int64)  # int64: seq * stride can pass 2^31 elements
    times = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = times < T
    c_start = tl.program_id(2) * C_PER_PROGRAM  # a channel split only when tokens are few
    c_end = tl.minimum(c_start + C_PER_PROGRAM, DIM)
    for c0 in range(c_start, c_end, BLOCK_C):  # sweep this split's channels of the token block
        chans = c0 + tl.arange(0, BLOCK_C)
        cmask = chans < c_end
        acc = tl.zeros((BLOCK_T, BLOCK_C), dtype=tl.float32)
        if HAS_BIAS:
            acc += tl.load(bias_ptr + chans, mask=cmask, other=0.0).to(tl.float32)[None, :]
        for j in tl.static_range(WIDTH):
            src = times[:, None] + (j - (WIDTH - 1))  # xp[t + j] = x[t + j - (W - 1)]
            vals = tl.load(x_ptr + seq * stride_xb + chans[None, :].to(tl.int64) * stride_xc
                           + src * stride_xt, mask=cmask[None, :] & (src >= 0) & (src < T),
                           other=0.0).to(tl.float32)  # fmt: skip
            if HAS_STATE:
                before = (src < 0) & tmask[:, None] & cmask[None, :]
                s_ptrs = state_ptr + seq * stride_sb + chans[None, :] * stride_sc
                s_vals = tl.load(s_ptrs + (src + WIDTH - 1) * stride_sk, mask=before, other=0.0)
                vals = tl.where(before, s_vals.to(tl.float32), vals)
            w = tl.load(w_ptr + chans * stride_wc + j * stride_wk, mask=cmask, other=0.0)
            acc += vals * w.to(tl.float32)[None, :]
        if SILU:
            acc = acc / (1.0 + tl.exp2(-acc * 1.4426950408889634))
        tl.store(out_ptr + seq * stride_ob + chans[None, :].to(tl.int64) * stride_oc
                 + times[:, None] * stride_ot, acc.to(out_ptr.dtype.element_ty),
                 mask=tmask[:, None] & cmask[None, :])  # fmt: skip


#: Programs below which a launch splits the channel sweep (about 2 per H100/H200 SM).
MIN_PROGRAMS = 256


def _channel_splits(token_programs: int, dim: int, block_c: int) -> int:
    """Return how many programs share one token block's channel sweep.

    One program per token block leaves a decode step (T = 1) a single program sweeping every
    channel serially; splitting the sweep into contiguous channel ranges fills the GPU instead.
    """
    chunks = triton.cdiv(dim, block_c)
    return max(1, min(chunks, triton.cdiv(MIN_PROGRAMS, token_programs)))


def causal_conv1d_token_major_vec(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    activation: str | None = "silu",
    *,
    block_t: int | None = None,
    block_c: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return act(bias + depthwise causal conv of [initial_state | x] with weight) per channel.

    Args:
        x: (dim, T) or (B, dim, T) bf16/fp16/fp32, any strides (best: channel stride 1).
        weight: (dim, W) taps per channel, any float dtype.
        bias: (dim,) or None.
        initial_state: (B, dim, W - 1) (B = 1 for 2D x) inputs before t = 0, or None for zeros.
        activation: "silu", "swish" (the same) or None.
        block_t: Tokens per program (power of two); None = min(16, next_pow2(T)).
        block_c: Channels per loop step (power of two); None = min(128, next_pow2(dim)).
        num_warps: Warps per program; None = 4.

    Returns:
        out: same shape, dtype and dimension order as x (channel-last x gives channel-last out).

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
    bt = block_t or min(16, triton.next_power_of_2(max(t, 1)))
    bc = block_c or min(128, triton.next_power_of_2(dim))
    for name, value in (("block_t", bt), ("block_c", bc)):
        if value <= 0 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two; got {value}")
    out = torch.empty_like(x3)  # keeps a channel-last x channel-last
    if out.numel() > 0:
        state = x3 if initial_state is None else initial_state  # a dummy pointer when absent
        token_programs = batch * triton.cdiv(t, bt)
        splits = _channel_splits(token_programs, dim, bc)
        c_per_program = triton.cdiv(triton.cdiv(dim, bc), splits) * bc  # whole BLOCK_C slices
        grid = (batch, triton.cdiv(t, bt), triton.cdiv(dim, c_per_program))
        _causal_conv1d_token_major_kernel[grid](
            x3, weight, weight if bias is None else bias, state, out, dim, t, c_per_program,
            *x3.stride(), *weight.stride(), *state.stride(), *out.stride(),
            WIDTH=width, HAS_BIAS=bias is not None, HAS_STATE=initial_state is not None,
            SILU=activation is not None, BLOCK_T=bt, BLOCK_C=bc, num_warps=num_warps or 4,
        )  # fmt: skip
    return out if x.dim() == 3 else out[0]


def reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> torch.Tensor:
    """Return the same convolution in fp32 PyTorch via conv1d (groups = dim), cast to x's dtype."""
    x3 = (x if x.dim() == 3 else x.unsqueeze(0)).float()
    dim, width = weight.shape
    if initial_state is None:
        state = x3.new_zeros(x3.shape[0], dim, width - 1)
    else:
        state = initial_state.float()
    xp = torch.cat([state, x3], dim=-1)
    b = None if bias is None else bias.float()
    acc = torch.nn.functional.conv1d(xp, weight.float()[:, None, :], b, groups=dim)
    if activation is not None:
        acc = torch.nn.functional.silu(acc)
    out = acc.to(x.dtype)
    return out if x.dim() == 3 else out[0]


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``{"dim", "tokens"}`` (+ ``"width"``, ``"batch"``, ``"channel_last"``).

    All N(0, 1) * 0.5; with ``"channel_last"`` x is a (.., dim, T) view of (.., T, dim) storage.
    """
    dim, t, width = shape["dim"], shape["tokens"], shape.get("width", 4)
    batch = shape.get("batch", 1)
    lead = (batch,) if "batch" in shape else ()
    if shape.get("channel_last"):
        x = (torch.randn(*lead, t, dim, device=device) * 0.5).to(dtype).transpose(-1, -2)
    else:
        x = (torch.randn(*lead, dim, t, device=device) * 0.5).to(dtype)
    return {
        "x": x,
        "weight": (torch.randn(dim, width, device=device) * 0.5).to(dtype),
        "bias": (torch.randn(dim, device=device) * 0.5).to(dtype),
        "initial_state": (torch.randn(batch, dim, width - 1, device=device) * 0.5).to(dtype),
        "activation": shape.get("activation", "silu"),
    }
