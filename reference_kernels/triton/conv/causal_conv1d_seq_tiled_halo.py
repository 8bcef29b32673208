"""
---
id: causal_conv1d_seq_tiled_halo
title: Depthwise causal conv1d over (sequence, time, channel) tiles, tile + halo loaded once
op_family: conv
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-tile, halo-load, shift-by-mma, depthwise-conv, initial-state, fused-bias-silu]
status: reference
launcher: causal_conv1d_seq_tiled_halo
tuning:
  block_c: [64, 16, 32, 128]
  block_t: [32, 16, 64]
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
  - {device: NVIDIA H200, shape: causal_conv1d/0, dtype: bf16, latency_us: 5.376, sol_fraction: 0.5238, date: '2026-12-04'}
---
The short causal convolution of Mamba / Gated DeltaNet blocks (atrex30's causal_conv1d): out[c, t] =
act(bias[c] + sum_j w[c, j] * xp[c, t + j]) with xp = [initial_state[c] | x[c]], fp32 accumulation,
act = SiLU ("silu"/"swish") or none. Grid: (sequence, time tile, channel tile). Each program loads
its (BLOCK_C, BLOCK_T) tile of x exactly once, plus a (BLOCK_C, 16) halo whose first W - 1 columns
are the W - 1 inputs before the tile (from x, or from the state before t = 0; the rest zero). The
W shifted copies the taps need are then made in registers, not by W overlapping loads: tap j's
operand is X @ P_j + H @ R_j, with P_j (BLOCK_T, BLOCK_T) and R_j (16, BLOCK_T) constant 0/1
shift matrices, built from iota compares and multiplied on the tensor cores. Every output is a
single 1.0 * x product summed with zeros, so the shift is exact (fp32 inputs use IEEE fp32 dots,
not TF32, as do states of another dtype than x). Bytes per element: one read, one write, (W - 1) /
BLOCK_T halo re-reads, W weights per channel. Work: 2 W (BLOCK_T + 16) tensor-core FLOPs per
element, small next to the H200's FLOP/byte ridge at BLOCK_T = 32, so it stays memory-bound while
issuing one load per element instead of W (which frees the load units on GPUs where the L1 hit path
limits the overlapping-load design, causal_conv1d_fwd). Limits: W <= 17; BLOCK_C and BLOCK_T >= 16
(MMA tiles); fp32 inputs pay IEEE-fp32 dot throughput; the final state is not returned;
equal-length sequences only.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _shift(a, p, IEEE: tl.constexpr):
    """Return a @ p (p a 0/1 shift matrix) in fp32, exactly."""
    if IEEE:
        out = tl.dot(a.to(tl.float32), p.to(tl.float32), input_precision="ieee")
    else:
        out = tl.dot(a, p.to(a.dtype))  # bf16/fp16: 1.0 * x summed with zeros is exact
    return out


@triton.jit
def _causal_conv1d_halo_kernel(
    x_ptr, w_ptr, bias_ptr, state_ptr, out_ptr,
    DIM, T,
    stride_xb, stride_xc, stride_xt, stride_wc, stride_wk,
    stride_sb, stride_sc, stride_sk, stride_ob, stride_oc, stride_ot,
    WIDTH: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_STATE: tl.constexpr, SILU: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_T: tl.constexpr, HALO: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0).to(tl.int64)  # int64: seq * stride can pass 2^31 elements
    t0 = tl.program_id(1) * BLOCK_T
    chans = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = chans < DIM
    offs_t = tl.arange(0, BLOCK_T)
    offs_h = tl.arange(0, HALO)
    x_rows = x_ptr + seq * stride_xb + chans[:, None].to(tl.int64) * stride_xc
    # the tile, once
    X = tl.load(x_rows + (t0 + offs_t)[None, :] * stride_xt,
                mask=cmask[:, None] & (t0 + offs_t < T)[None, :], other=0.0)  # fmt: skip
    # the halo: xp columns t0 .. t0 + W - 2, i.e. x[t0 - (W - 1) + i], or the state before t = 0
    src = t0 - (WIDTH - 1) + offs_h
    in_halo = offs_h < WIDTH - 1
    H = tl.load(x_rows + src[None, :] * stride_xt,
                mask=cmask[:, None] & (in_halo & (src >= 0))[None, :], other=0.0)  # fmt: skip
    if IEEE:
        H = H.to(tl.float32)  # fp32 x, or a state dtype other than x's: keep it unrounded
    if HAS_STATE:
        from_state = cmask[:, None] & (in_halo & (src < 0))[None, :]
        s_ptrs = state_ptr + seq * stride_sb + chans[:, None] * stride_sc
        s_vals = tl.load(
            s_ptrs + (src + WIDTH - 1)[None, :] * stride_sk, mask=from_state, other=0.0
        )
        H = tl.where(from_state, s_vals.to(H.dtype), H)

    acc = tl.zeros((BLOCK_C, BLOCK_T), dtype=tl.float32)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + chans, mask=cmask, other=0.0).to(tl.float32)[:, None]
    for j in tl.static_range(WIDTH):
        # tap j reads xp[t + j]: tile column t + j - (W - 1) when >= 0, else halo column t + j
        p = (offs_t[:, None] == offs_t[None, :] + (j - (WIDTH - 1))).to(tl.float32)
        r = ((offs_h[:, None] == offs_t[None, :] + j) & in_halo[:, None]).to(tl.float32)
        tap = _shift(X, p, IEEE) + _shift(H, r, IEEE)
        w = tl.load(w_ptr + chans * stride_wc + j * stride_wk, mask=cmask, other=0.0)
        acc += tap * w.to(tl.float32)[:, None]
    if SILU:
        acc = acc / (1.0 + tl.exp2(-acc * 1.4426950408889634))
    tl.store(out_ptr + seq * stride_ob + chans[:, None].to(tl.int64) * stride_oc
             + (t0 + offs_t)[None, :] * stride_ot, acc.to(out_ptr.dtype.element_ty),
             mask=cmask[:, None] & (t0 + offs_t < T)[None, :])  # fmt: skip


def causal_conv1d_seq_tiled_halo(
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
        weight: (dim, W) taps per channel (W <= 17), any float dtype.
        bias: (dim,) or None.
        initial_state: (B, dim, W - 1) (B = 1 for 2D x) inputs before t = 0, or None for zeros.
        activation: "silu", "swish" (the same) or None.
        block_c: Channels per program (power of two >= 16); None = 64 (less for small dim).
        block_t: Time steps per program (power of two >= 16); None = 32 (16 for short T).
        num_warps: Warps per program; None = 4.

    Returns:
        out: same shape and dtype as x, contiguous.

    Raises:
        ValueError: The shapes do not fit, W > 17, the activation is unknown, or a block is not
            a power of two >= 16.
    """
    if x.dim() not in (2, 3) or weight.dim() != 2 or weight.shape[0] != x.shape[-2]:
        got = (tuple(x.shape), tuple(weight.shape))
        raise ValueError(f"need x (dim, T) or (B, dim, T) and weight (dim, W); got {got}")
    dim, width = weight.shape
    if not 1 <= width <= 17:
        raise ValueError(f"width W must be in 1..17 (the halo is 16 columns); got {width}")
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
    bc = block_c or min(64, max(16, triton.next_power_of_2(dim)))
    bt = block_t or (32 if t > 16 else 16)
    for name, value in (("block_c", bc), ("block_t", bt)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16; got {value}")
    out = torch.empty((batch, dim, t), dtype=x.dtype, device=x.device)
    if out.numel() > 0:
        state = x3 if initial_state is None else initial_state  # a dummy pointer when absent
        interp = os.environ.get("TRITON_INTERPRET") == "1"
        ieee = interp or x.dtype == torch.float32 or state.dtype != x.dtype
        _causal_conv1d_halo_kernel[(batch, triton.cdiv(t, bt), triton.cdiv(dim, bc))](
            x3, weight, weight if bias is None else bias, state, out, dim, t,
            *x3.stride(), *weight.stride(), *state.stride(), *out.stride(),
            WIDTH=width, HAS_BIAS=bias is not None, HAS_STATE=initial_state is not None,
            SILU=activation is not None, BLOCK_C=bc, BLOCK_T=bt, HALO=16,
            IEEE=ieee, num_warps=num_warps or 4,
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
    """Return kwargs for ``{"dim", "tokens"}`` (+ ``"width"``, ``"batch"``): all N(0, 1) * 0.5."""
    dim, t, width = shape["dim"], shape["tokens"], shape.get("width", 4)
    batch = shape.get("batch", 1)
    lead = (batch,) if "batch" in shape else ()
    x = (torch.randn(*lead, dim, t, device=device) * 0.5).to(dtype)
    return {
        "x": x,
        "weight": (torch.randn(dim, width, device=device) * 0.5).to(dtype),
        "bias": (torch.randn(dim, device=device) * 0.5).to(dtype),
        "initial_state": (torch.randn(batch, dim, width - 1, device=device) * 0.5).to(dtype),
        "activation": shape.get("activation", "silu"),
    }
