"""
---
id: mamba_ssm_decode_update
title: Mamba-1 one-token selective-state update in place, one program per (batch, channel tile)
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [decode-specialised, state-in-registers, in-place, channel-tiled-grid, fused-gating]
status: reference
launcher: mamba_ssm_decode_update
tuning:
  block_d: [32, 8, 16, 64, 128]
  num_warps: [4, 1, 2, 8]
args:
  state: {shape: [B, D, N], dtypes: [fp32, bf16, fp16], aliases: [ssm_state]}
  x: {shape: [B, D], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, u]}
  dt: {shape: [B, D], like: x, aliases: [delta]}
  A: {shape: [D, N], dtypes: [fp32], aliases: [a]}
  B: {shape: [B, N], like: x, aliases: [b]}
  C: {shape: [B, N], like: x, aliases: [c]}
  D: {shape: [D], dtypes: [fp32], optional: true, aliases: [d_skip]}
  z: {shape: [B, D], like: x, optional: true, aliases: [gate]}
  dt_bias: {shape: [D], dtypes: [fp32], optional: true, aliases: [delta_bias]}
  dt_softplus: {type: bool, default: false, aliases: [delta_softplus]}
returns:
  - {name: out, shape: [B, D], dtype: x}
problem:
  shapes: [{batch: 3, dim: 40, dstate: 16}, {batch: 1, dim: 7, dstate: 5}]
  dtypes: [fp32, bf16]
  atol: 0.03
  rtol: 0.02
  in_place: [state]
measured: []
---
One decode step of Mamba-1's selective SSM (selective_state_update): dt' = softplus(dt + dt_bias)
(or without softplus), h <- h * exp(A dt') + (B dt') x, y = C . h + D x, y *= silu(z), with the
state h (B, D, N) updated in place. Channels are independent, so the grid is (B, D / BLOCK_D):
each program loads a (BLOCK_D, N) slice of its sequence's state (contiguous, N = 16 typically, so
one coalesced 2-D load), the per-channel x, dt, z, A rows and the per-sequence B, C vectors
(shared by all channels, served from L1/L2), does the update in fp32 registers, writes the slice
back and reduces over N for y. Bytes per step: read and write the state (2 x D x N x 4 B in fp32,
the dominant term) plus O(D + N) vectors; one exp per state element. Limits: one group of B/C for
all channels (no ngroups > 1); no state-batch indirection (the state is indexed by batch entry);
N <= 256.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _mamba_ssm_decode_update_kernel(
    # pointers
    state_ptr,
    x_ptr,
    dt_ptr,
    a_ptr,
    b_ptr,
    c_ptr,
    d_ptr,
    z_ptr,
    dt_bias_ptr,
    out_ptr,
    # sizes
    dim,
    dstate,
    # strides (elements; last axis contiguous)
    stride_sb,
    stride_sd,
    stride_xb,
    stride_dtb,
    stride_ad,
    stride_bb,
    stride_cb,
    stride_zb,
    stride_ob,
    # meta
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr,
    DT_SOFTPLUS: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    batch = tl.program_id(0).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    mask_d = offs_d < dim
    mask_n = offs_n < dstate
    mask = mask_d[:, None] & mask_n[None, :]

    x = tl.load(x_ptr + batch * stride_xb + offs_d, mask=mask_d, other=0.0).to(tl.float32)
    dt = tl.load(dt_ptr + batch * stride_dtb + offs_d, mask=mask_d, other=0.0).to(tl.float32)
    if HAS_DT_BIAS:
        dt += tl.load(dt_bias_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)
    if DT_SOFTPLUS:
        dt = tl.where(
            dt <= 20.0, tl.log(1.0 + tl.exp(tl.minimum(dt, 20.0))), dt
        )  # torch's threshold 20
    a = tl.load(a_ptr + offs_d[:, None] * stride_ad + offs_n[None, :], mask=mask, other=0.0)
    bv = tl.load(b_ptr + batch * stride_bb + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    cv = tl.load(c_ptr + batch * stride_cb + offs_n, mask=mask_n, other=0.0).to(tl.float32)

    s_ptrs = state_ptr + batch * stride_sb + offs_d[:, None] * stride_sd + offs_n[None, :]
    h = tl.load(s_ptrs, mask=mask, other=0.0).to(tl.float32)
    h = h * tl.exp(a.to(tl.float32) * dt[:, None]) + (bv[None, :] * dt[:, None]) * x[:, None]
    tl.store(s_ptrs, h.to(state_ptr.dtype.element_ty), mask=mask)  # in place

    y = tl.sum(h * cv[None, :], axis=1)
    if HAS_D:
        y += x * tl.load(d_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)
    if HAS_Z:
        z = tl.load(z_ptr + batch * stride_zb + offs_d, mask=mask_d, other=0.0).to(tl.float32)
        y *= z * tl.sigmoid(z)
    tl.store(out_ptr + batch * stride_ob + offs_d, y.to(out_ptr.dtype.element_ty), mask=mask_d)


def mamba_ssm_decode_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,  # noqa: N803 - Mamba's names
    B: torch.Tensor,  # noqa: N803
    C: torch.Tensor,  # noqa: N803
    D: torch.Tensor | None = None,  # noqa: N803
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    *,
    block_d: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Advance the selective state by one token in place and return the output y.

    Args:
        state: (B, D, N) fp32/bf16/fp16 state, updated in place, last axis contiguous.
        x: (B, D) input of this token, bf16/fp16/fp32.
        dt: (B, D) step size before bias/softplus.
        A: (D, N) fp32 (negative) state matrix.
        B: (B, N) input projection of this token.
        C: (B, N) output projection of this token.
        D: (D,) fp32 skip weight, or None.
        z: (B, D) gate (y *= silu(z)), or None.
        dt_bias: (D,) fp32 added to dt, or None.
        dt_softplus: Apply softplus to dt (+ bias).
        block_d: Channels per program (power of two); None = 32.
        num_warps: Warps per program; None = 4.

    Returns:
        (B, D) tensor of x's dtype.

    Raises:
        ValueError: Shapes, dtypes or layouts do not fit together.
    """
    shapes = (f"state {tuple(state.shape)}, x {tuple(x.shape)}, dt {tuple(dt.shape)},"
              f" A {tuple(A.shape)}, B {tuple(B.shape)}, C {tuple(C.shape)}")  # fmt: skip
    if state.dim() != 3 or x.dim() != 2 or dt.shape != x.shape:
        raise ValueError(f"need state (B, D, N), x and dt (B, D); got {shapes}")
    bsz, dim, dstate = state.shape
    if x.shape != (bsz, dim) or A.shape != (dim, dstate):
        raise ValueError(f"x must be (B, D) and A (D, N) to match state: {shapes}")
    if B.shape != (bsz, dstate) or C.shape != (bsz, dstate):
        raise ValueError(f"B and C must be (B, N) = ({bsz}, {dstate}): {shapes}")
    for name, vec in (("D", D), ("dt_bias", dt_bias)):
        if vec is not None and vec.shape != (dim,):
            raise ValueError(f"{name} must have shape (D,) = ({dim},); got {tuple(vec.shape)}")
    if z is not None and z.shape != x.shape:
        raise ValueError(f"z must have x's shape {tuple(x.shape)}; got {tuple(z.shape)}")
    if dstate > 256:
        raise ValueError(f"state size N = {dstate} > 256 does not fit one register tile")
    tensors = [t for t in (state, x, dt, A, B, C, D, z, dt_bias) if t is not None]
    if any(t.stride(-1) != 1 for t in tensors) or not state.is_floating_point():
        raise ValueError("all tensors need a contiguous last axis and a float state")
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.numel() == 0 or dstate == 0:
        return out.zero_() if out.numel() else out
    bd = block_d or 32
    dummy = x  # never read when the matching HAS_ flag is off
    _mamba_ssm_decode_update_kernel[(bsz, triton.cdiv(dim, bd))](
        state, x, dt, A, B, C,
        D if D is not None else dummy, z if z is not None else dummy,
        dt_bias if dt_bias is not None else dummy, out,
        dim, dstate,
        state.stride(0), state.stride(1), x.stride(0), dt.stride(0), A.stride(0),
        B.stride(0), C.stride(0), z.stride(0) if z is not None else 0, out.stride(0),
        HAS_D=D is not None, HAS_Z=z is not None, HAS_DT_BIAS=dt_bias is not None,
        DT_SOFTPLUS=dt_softplus, BLOCK_D=bd, BLOCK_N=triton.next_power_of_2(dstate),
        num_warps=num_warps or 4,
    )  # fmt: skip
    return out


def reference(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False):  # noqa: N803
    """Do the same step with torch ops in fp32 (updates ``state`` in place) and return y."""
    dtf = dt.float() + (dt_bias.float() if dt_bias is not None else 0.0)
    if dt_softplus:
        dtf = torch.nn.functional.softplus(dtf)
    h = state.float() * torch.exp(A.float() * dtf[..., None])
    h = h + B.float()[:, None, :] * dtf[..., None] * x.float()[..., None]
    state.copy_(h.to(state.dtype))
    y = (h * C.float()[:, None, :]).sum(-1)
    if D is not None:
        y = y + x.float() * D.float()
    if z is not None:
        y = y * torch.nn.functional.silu(z.float())
    return y.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return Mamba-like inputs for ``shape = {"batch", "dim", "dstate"}``.

    A = -(1..N) per channel (the S4D-real init), dt ~ N(-1, 1) with a softplus and bias, a
    random fp32 state, N(0, 1) x, B, C, z and D.
    """
    b, d, n = shape["batch"], shape["dim"], shape["dstate"]

    def rnd(*size):
        return torch.randn(*size, device=device).to(dtype)

    return {
        "state": torch.randn(b, d, n, device=device),
        "x": rnd(b, d),
        "dt": (torch.randn(b, d, device=device) - 1).to(dtype),
        "A": -torch.arange(1, n + 1, device=device).float().repeat(d, 1),
        "B": rnd(b, n),
        "C": rnd(b, n),
        "D": torch.randn(d, device=device),
        "z": rnd(b, d),
        "dt_bias": 0.1 * torch.randn(d, device=device),
        "dt_softplus": True,
    }
