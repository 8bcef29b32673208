"""
---
id: causal_conv1d_fwd
title: Depthwise causal conv1d with initial state, bias and SiLU over (channel, time) tiles
op_family: conv
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-tile, depthwise-conv, causal-shift-loads, initial-state, fused-bias-silu]
status: reference
launcher: causal_conv1d_fwd
tuning:
  block_c: [64, 16, 32, 128]
  block_t: [64, 16, 32, 128]
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
  shapes: [{dim: 100, tokens: 1}, {dim: 33, tokens: 70}]
  dtypes: [fp32, bf16]
measured:
  - {device: NVIDIA H200, shape: causal_conv1d/0, dtype: bf16, latency_us: 4.352, sol_fraction: 0.6985, date: '2026-12-03'}
---
The short causal convolution of Mamba / Gated DeltaNet blocks: each channel c of x (dim, T) is
convolved with its own width-W filter over time, looking only backwards, with the W - 1 values of
initial_state (the previous chunk's tail) prepended: out[c, t] = silu(bias[c] + sum_j w[c, j] *
xp[c, t + j]) where xp = [initial_state[c] | x[c]]. Program (i, j, b) owns a (BLOCK_C, BLOCK_T) tile
of channels x time of sequence b; the W taps are unrolled at compile time and each loads the tile
shifted by j - (W - 1) steps, taking lanes that fall before t = 0 from the state instead of x (the
overlapping loads hit L1, so x is read from DRAM about once). Accumulation, bias and SiLU are fp32.
Bytes per element: 1 read + 1 write, plus W weights per channel. Limits: forward only; the final
state is not returned (a decode step would need it); equal-length sequences only (no cu_seqlens /
varlen packing); large W makes the unrolled taps re-read more.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _causal_conv1d_fwd_kernel(
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
    chans = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    times = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    batch = tl.program_id(2).to(tl.int64)  # int64: batch * stride can pass 2^31 elements
    chan_mask = chans < DIM
    x_base = x_ptr + batch * stride_xb + chans[:, None].to(tl.int64) * stride_xc
    s_base = state_ptr + batch * stride_sb + chans[:, None].to(tl.int64) * stride_sc

    acc = tl.zeros((BLOCK_C, BLOCK_T), dtype=tl.float32)  # fp32 accumulation
    for j in tl.static_range(WIDTH):
        # tap j reads xp[t + j] = x[t + j - (W - 1)], or the state's slot t + j when that is < 0
        src = times[None, :] + (j - (WIDTH - 1))
        from_x = (src >= 0) & (src < T)
        vals = tl.load(x_base + src * stride_xt, mask=chan_mask[:, None] & from_x, other=0.0)
        if HAS_STATE:
            from_state = (src < 0) & (times[None, :] < T)
            state_idx = src + (WIDTH - 1)  # in [0, W - 2] where used
            s_vals = tl.load(s_base + state_idx * stride_sk, mask=chan_mask[:, None] & from_state,
                             other=0.0)  # fmt: skip
            vals = tl.where(from_state, s_vals, vals)
        w = tl.load(w_ptr + chans * stride_wc + j * stride_wk, mask=chan_mask, other=0.0)
        acc += vals.to(tl.float32) * w.to(tl.float32)[:, None]

    if HAS_BIAS:
        acc += tl.load(bias_ptr + chans, mask=chan_mask, other=0.0).to(tl.float32)[:, None]
    if SILU:
        acc = acc / (1.0 + tl.exp2(-acc * 1.4426950408889634))

    out_ptrs = (out_ptr + batch * stride_ob + chans[:, None].to(tl.int64) * stride_oc
                + times[None, :] * stride_ot)  # fmt: skip
    out_mask = chan_mask[:, None] & (times < T)[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=out_mask)


def _launch_config(dim: int, t: int) -> dict[str, int]:
    """Return the tile: up to 64 time steps (fewer for decode), channels to fill ~4096 elements."""
    block_t = min(64, triton.next_power_of_2(t))
    block_c = min(max(4096 // block_t, 16), 256, triton.next_power_of_2(dim))
    return {"block_c": block_c, "block_t": block_t, "num_warps": 4}


def _check(x, weight, bias, initial_state) -> None:
    """Raise ValueError unless the shapes fit (dim, T) / (B, dim, T) with a (dim, W) filter."""
    if x.dim() not in (2, 3) or weight.dim() != 2 or weight.shape[0] != x.shape[-2]:
        got = (tuple(x.shape), tuple(weight.shape))
        raise ValueError(f"need x (dim, T) or (B, dim, T) and weight (dim, W); got {got}")
    dim, width = weight.shape
    if bias is not None and bias.shape != (dim,):
        raise ValueError(f"bias must be ({dim},); got {tuple(bias.shape)}")
    batch = 1 if x.dim() == 2 else x.shape[0]
    if initial_state is not None and initial_state.shape != (batch, dim, width - 1):
        want, got = (batch, dim, width - 1), tuple(initial_state.shape)
        raise ValueError(f"initial_state must be {want}; got {got}")


def causal_conv1d_fwd(
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
    """Return the depthwise causal convolution of x with the state prepended, plus bias, then SiLU.

    Args:
        x: (dim, T) or (B, dim, T) bf16/fp16/fp32, any strides.
        weight: (dim, W) filter per channel, any float dtype.
        bias: (dim,) or None.
        initial_state: (B, dim, W - 1) (B = 1 for 2D x) values before t = 0, or None for zeros.
        activation: "silu" or None.
        block_c: Channels per tile (power of two); None fills about 4096 elements per tile.
        block_t: Time steps per tile (power of two); None = min(64, next_pow2(T)).
        num_warps: Warps per program; None = 4.

    Returns:
        out: same shape and dtype as x, contiguous.

    Raises:
        ValueError: The shapes do not fit or the activation is unknown.
    """
    _check(x, weight, bias, initial_state)
    if activation not in (None, "silu"):
        raise ValueError(f"activation must be 'silu' or None; got {activation!r}")
    x3 = x if x.dim() == 3 else x.unsqueeze(0)
    batch, dim, t = x3.shape
    out = torch.empty((batch, dim, t), dtype=x.dtype, device=x.device)
    if out.numel() > 0:
        cfg = _launch_config(dim, t)
        given = {"block_c": block_c, "block_t": block_t, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        state = x3 if initial_state is None else initial_state  # a dummy pointer when absent
        grid = (triton.cdiv(dim, cfg["block_c"]), triton.cdiv(t, cfg["block_t"]), batch)
        _causal_conv1d_fwd_kernel[grid](
            x3, weight, weight if bias is None else bias, state, out,
            dim, t,
            *x3.stride(), *weight.stride(), *state.stride(), *out.stride(),
            WIDTH=weight.shape[1], HAS_BIAS=bias is not None, HAS_STATE=initial_state is not None,
            SILU=activation == "silu",
            BLOCK_C=cfg["block_c"], BLOCK_T=cfg["block_t"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    return out if x.dim() == 3 else out.squeeze(0)


def reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> torch.Tensor:
    """Return F.conv1d over [initial_state | x] (groups = dim) + bias, then SiLU, in fp32."""
    x3 = (x if x.dim() == 3 else x.unsqueeze(0)).float()
    dim, width = weight.shape
    if initial_state is None:
        state = x3.new_zeros(x3.shape[0], dim, width - 1)
    else:
        state = initial_state.float()
    xp = torch.cat([state, x3], dim=-1)
    b = None if bias is None else bias.float()
    out = torch.nn.functional.conv1d(xp, weight.float()[:, None, :], b, groups=dim)
    if activation == "silu":
        out = torch.nn.functional.silu(out)
    out = out.to(x.dtype)
    return out if x.dim() == 3 else out.squeeze(0)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"dim", "tokens", "width"}`` (optional ``"batch"``).

    atrex draws everything ~ 0.02 N(0, 1); here x, weight and state are ~ N(0, 1) * 0.5 so that the
    SiLU works off its linear region, and the bias ~ 0.1 N(0, 1).
    """
    dim, t, width = shape["dim"], shape["tokens"], shape.get("width", 4)
    lead = (shape["batch"],) if "batch" in shape else ()
    batch = shape.get("batch", 1)
    return {
        "x": (torch.randn(*lead, dim, t, device=device) * 0.5).to(dtype),
        "weight": (torch.randn(dim, width, device=device) * 0.5).to(dtype),
        "bias": (torch.randn(dim, device=device) * 0.1).to(dtype),
        "initial_state": (torch.randn(batch, dim, width - 1, device=device) * 0.5).to(dtype),
    }
