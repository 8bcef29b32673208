"""
---
id: causal_conv1d_update_decode
title: Causal conv1d decode step, rolling the conv state in place and emitting each new output
op_family: conv
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [decode-step, rolling-state, in-place, channel-tile, state-indices, fused-bias-silu]
status: reference
launcher: causal_conv1d_update_decode
tuning:
  block_c: [64, 16, 32, 128, 256]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [B, C], dtypes: [bf16, fp16, fp32], layout: any, aliases: [hidden_states]}
  conv_state: {shape: ['?', C, S], dtypes: [float], layout: any, aliases: [state, cache]}
  weight: {shape: [C, W], dtypes: [float], aliases: [conv_weight]}
  bias: {shape: [C], dtypes: [float], optional: true, aliases: [conv_bias]}
  activation: {type: str, default: silu}
  conv_state_indices: {shape: [B], dtypes: [int32, int64], optional: true, aliases: [cache_indices]}
returns:
  - {name: out, shape: [B, C], dtype: x}
  - {name: conv_state, alias: conv_state}
problem:
  shapes: [{batch: 3, dim: 100}, {batch: 3, dim: 40, state_len: 6, indices: [2, -1, 0]}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
  in_place: [conv_state]
measured: []
---
The decode step of a Mamba / Gated DeltaNet short convolution (vLLM's causal_conv1d_update): each
sequence b brings L new inputs x[b, :, l] (L = 1 for plain decode, more for speculative tokens);
with its cached last S >= W - 1 inputs s = conv_state[i_b] (i_b = conv_state_indices[b], or b), xp =
[s | x[b]] and out[b, c, l] = act(bias[c] + sum_j w[c, j] * xp[c, S + l - (W - 1) + j]); the state
is then rolled in place to the last S values of xp. Program (b, i) owns BLOCK_C channels of one
sequence: it reads the (BLOCK_C, S) state tile and the L new columns, computes the L outputs (taps
unrolled, fp32, optional SiLU), then, after a barrier so that no thread overwrites a state value
another thread has not read yet, stores the shifted (BLOCK_C, S) tile back. A negative state index
marks a padded batch slot: its program writes zero outputs and leaves the state alone. Bytes per
sequence: read and write S + 1 values per channel of the state, read the L inputs and the W weights,
write L outputs: a few KB, so the kernel is latency-bound (one launch, B * DIM / BLOCK_C programs).
Limits: the state must hold at least W - 1 steps; x may be (B, C) or (B, C, L) but the header
declares the (B, C) decode form; no varlen prefill (see causal_conv1d_fwd). Not atrex30's
causal_conv1d: that operator is one sequence's prefill (x (dim, T), a read-only (1, dim, W - 1)
initial state, no state written back), while this kernel takes one new token per row of x, each
row its own sequence with its own state row, and rolls conv_state in place (a mutated input there).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _causal_conv1d_update_kernel(
    # pointers
    x_ptr,
    state_ptr,
    w_ptr,
    bias_ptr,
    idx_ptr,
    out_ptr,
    # sizes
    DIM,
    L,
    S,
    # strides (elements)
    stride_xb,
    stride_xc,
    stride_xl,
    stride_sb,
    stride_sc,
    stride_ss,
    stride_wc,
    stride_wk,
    stride_ob,
    stride_oc,
    stride_ol,
    # meta
    WIDTH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INDEX: tl.constexpr,
    SILU: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    line = b
    if HAS_INDEX:
        line = tl.load(idx_ptr + b).to(tl.int64)
    chans = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = chans < DIM
    o_rows = out_ptr + b * stride_ob + chans.to(tl.int64) * stride_oc
    if line < 0:  # a padded batch slot: zero outputs, state untouched
        for step in range(0, L):
            tl.store(o_rows + step * stride_ol, tl.zeros((BLOCK_C,), out_ptr.dtype.element_ty),
                     mask=cmask)  # fmt: skip
    else:
        s_chan = state_ptr + line * stride_sb + chans.to(tl.int64) * stride_sc
        s_rows = s_chan[:, None]
        x_rows = x_ptr + b * stride_xb + chans.to(tl.int64) * stride_xc
        bias = tl.zeros((BLOCK_C,), dtype=tl.float32)
        if HAS_BIAS:
            bias = tl.load(bias_ptr + chans, mask=cmask, other=0.0).to(tl.float32)

        for step in range(0, L):  # outputs: xp = [state | x], position S + step is x[step]
            acc = bias
            for j in tl.static_range(WIDTH):
                p = S + step - (WIDTH - 1) + j  # index into xp
                if p < S:
                    v = tl.load(s_chan + p * stride_ss, mask=cmask, other=0.0)
                else:
                    v = tl.load(x_rows + (p - S) * stride_xl, mask=cmask, other=0.0)
                w = tl.load(w_ptr + chans * stride_wc + j * stride_wk, mask=cmask, other=0.0)
                acc += v.to(tl.float32) * w.to(tl.float32)
            if SILU:
                acc = acc / (1.0 + tl.exp2(-acc * 1.4426950408889634))
            tl.store(o_rows + step * stride_ol, acc.to(out_ptr.dtype.element_ty), mask=cmask)

        # the new state is xp[L : L + S]: old state shifted by L, then the new inputs
        cols = tl.arange(0, BLOCK_S)
        src = cols + L
        in_state = src < S
        live = cols < S
        old = tl.load(s_rows + src[None, :] * stride_ss,
                      mask=cmask[:, None] & (in_state & live)[None, :], other=0.0)  # fmt: skip
        new = tl.load(x_rows[:, None] + (src - S)[None, :] * stride_xl,
                      mask=cmask[:, None] & (~in_state & live)[None, :], other=0.0)  # fmt: skip
        rolled = tl.where(in_state[None, :], old, new.to(old.dtype))
        tl.debug_barrier()  # every thread has read the old state before any thread overwrites it
        tl.store(
            s_rows + cols[None, :] * stride_ss, rolled, mask=cmask[:, None] & (cols < S)[None, :]
        )


def causal_conv1d_update_decode(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    conv_state_indices: torch.Tensor | None = None,
    *,
    block_c: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run one decode step of the causal conv: outputs for the new inputs, state rolled in place.

    Args:
        x: (B, dim) new inputs, or (B, dim, L) for L new steps per sequence; any strides.
        conv_state: (N, dim, S) cached inputs, S >= W - 1; updated in place (rows not named by
            conv_state_indices are left alone).
        weight: (dim, W) taps per channel.
        bias: (dim,) or None.
        activation: "silu", "swish" (the same) or None.
        conv_state_indices: (B,) int state row of each sequence (negative: skip), or None for
            row b = sequence b.
        block_c: Channels per program (power of two); None = min(64, next_pow2(dim)).
        num_warps: Warps per program; None = 4.

    Returns:
        (out, conv_state): out has x's shape and dtype; conv_state is the input tensor, updated.

    Raises:
        ValueError: The shapes do not fit, the activation is unknown, or block_c is not a power
            of two.
    """
    if x.dim() not in (2, 3) or weight.dim() != 2 or conv_state.dim() != 3:
        raise ValueError(
            f"need x (B, dim[, L]), conv_state (N, dim, S), weight (dim, W); got "
            f"{tuple(x.shape)}, {tuple(conv_state.shape)}, {tuple(weight.shape)}"
        )
    batch, dim = x.shape[0], x.shape[1]
    width, state_len = weight.shape[1], conv_state.shape[2]
    if weight.shape[0] != dim or conv_state.shape[1] != dim or state_len < width - 1:
        raise ValueError(
            f"need weight ({dim}, W) and conv_state (N, {dim}, S >= W - 1); got "
            f"{tuple(weight.shape)}, {tuple(conv_state.shape)}"
        )
    if conv_state_indices is None and conv_state.shape[0] < batch:
        raise ValueError(f"conv_state has {conv_state.shape[0]} rows for {batch} sequences")
    if conv_state_indices is not None and tuple(conv_state_indices.shape) != (batch,):
        raise ValueError(f"conv_state_indices must be ({batch},)")
    if bias is not None and tuple(bias.shape) != (dim,):
        raise ValueError(f"bias must be ({dim},); got {tuple(bias.shape)}")
    if activation not in (None, "silu", "swish"):
        raise ValueError(f"activation must be 'silu', 'swish' or None; got {activation!r}")
    bc = block_c or min(64, triton.next_power_of_2(dim))
    if bc <= 0 or bc & (bc - 1):
        raise ValueError(f"block_c must be a power of two; got {bc}")
    x3 = x if x.dim() == 3 else x.unsqueeze(2)
    out = torch.empty(x3.shape, dtype=x.dtype, device=x.device)
    if out.numel() > 0:
        _causal_conv1d_update_kernel[(batch, triton.cdiv(dim, bc))](
            x3, conv_state, weight, weight if bias is None else bias,
            x3 if conv_state_indices is None else conv_state_indices, out,
            dim, x3.shape[2], state_len,
            *x3.stride(), *conv_state.stride(), *weight.stride(), *out.stride(),
            WIDTH=width, HAS_BIAS=bias is not None, HAS_INDEX=conv_state_indices is not None,
            SILU=activation is not None, BLOCK_C=bc, BLOCK_S=triton.next_power_of_2(state_len),
            num_warps=num_warps or 4,
        )  # fmt: skip
    return (out if x.dim() == 3 else out[:, :, 0]), conv_state


def reference(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    conv_state_indices: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (out, conv_state) by explicit fp32 taps in PyTorch; conv_state is updated in place."""
    x3 = x if x.dim() == 3 else x.unsqueeze(2)
    batch, _, steps = x3.shape
    width, state_len = weight.shape[1], conv_state.shape[2]
    rows = torch.arange(batch) if conv_state_indices is None else conv_state_indices.long().cpu()
    out = torch.zeros(x3.shape, dtype=x.dtype, device=x.device)
    for b, row in enumerate(rows.tolist()):
        if row < 0:
            continue
        xp = torch.cat([conv_state[row].float(), x3[b].float()], dim=-1)  # (dim, S + L)
        for step in range(steps):
            window = xp[:, state_len + step - (width - 1) : state_len + step + 1]
            acc = (window * weight.float()).sum(-1)
            acc = acc if bias is None else acc + bias.float()
            out[b, :, step] = (acc if activation is None else torch.nn.functional.silu(acc)).to(
                x.dtype
            )
        conv_state[row] = xp[:, steps:].to(conv_state.dtype)
    return (out if x.dim() == 3 else out[:, :, 0]), conv_state


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``{"batch", "dim"}`` (+ ``"width"``, ``"state_len"``, ``"steps"``).

    ``"indices"`` (a list of state rows, -1 = padding) adds conv_state_indices and two spare state
    rows; all tensors are N(0, 1) * 0.5 in ``dtype``.
    """
    b, dim, width = shape["batch"], shape["dim"], shape.get("width", 4)
    state_len, steps = shape.get("state_len", width - 1), shape.get("steps")
    lines = len(shape["indices"]) + 2 if "indices" in shape else b
    x_shape = (b, dim) if steps is None else (b, dim, steps)
    idx = shape.get("indices")
    return {
        "x": (torch.randn(x_shape, device=device) * 0.5).to(dtype),
        "conv_state": (torch.randn(lines, dim, state_len, device=device) * 0.5).to(dtype),
        "weight": (torch.randn(dim, width, device=device) * 0.5).to(dtype),
        "bias": (torch.randn(dim, device=device) * 0.5).to(dtype),
        "activation": shape.get("activation", "silu"),
        "conv_state_indices": None if idx is None else torch.tensor(idx, dtype=torch.int32),
    }
