"""
---
id: mamba_selective_scan_chunked
title: Mamba-1 selective scan for prefill, one program per (batch, channel tile), time in chunks
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: latency
techniques: [selective-scan, state-in-registers, channel-tiled-grid, chunked-output, fused-gating]
status: reference
launcher: mamba_selective_scan_chunked
tuning:
  block_d: [16, 4, 8, 32, 64]
  block_l: [32, 8, 16, 64]
  num_warps: [4, 1, 2, 8]
args:
  u: {shape: [B, D, L], dtypes: [bf16, fp16, fp32], aliases: [x, hidden_states]}
  delta: {shape: [B, D, L], like: u, aliases: [dt]}
  A: {shape: [D, N], dtypes: [fp32], aliases: [a]}
  B: {shape: [B, N, L], like: u, aliases: [b]}
  C: {shape: [B, N, L], like: u, aliases: [c]}
  D: {shape: [D], dtypes: [fp32], optional: true, aliases: [d_skip]}
  z: {shape: [B, D, L], like: u, optional: true, aliases: [gate]}
  delta_bias: {shape: [D], dtypes: [fp32], optional: true, aliases: [dt_bias]}
  delta_softplus: {type: bool, default: false, aliases: [dt_softplus]}
returns:
  - {name: out, shape: [B, D, L], dtype: u}
  - {name: last_state, shape: [B, D, N], dtype: fp32}
problem:
  shapes: [{batch: 2, dim: 20, dstate: 16, seqlen: 37}, {batch: 1, dim: 8, dstate: 4, seqlen: 5}]
  dtypes: [fp32, bf16]
  atol: 0.03
  rtol: 0.02
measured: []
---
Mamba-1's selective scan over a whole prompt (selective_scan_fn, input-dependent A-bar, B, C):
for each channel d and step t, dt = softplus(delta + bias), h <- exp(A[d] dt) h + dt B[:, t]
u[d, t], y[d, t] = C[:, t] . h; then out = (y + D u) * silu(z). One program owns one batch entry
and BLOCK_D channels and keeps their (BLOCK_D, N) fp32 state in registers for the whole sequence,
so the state never touches memory (it is written once at the end as last_state, for the decode
step). Time runs in chunks of BLOCK_L: inside a chunk each step loads its column of u, delta (one
element per channel, cache lines reused by the next steps) and of B, C, updates h and drops y_t
into a (BLOCK_D, BLOCK_L) register tile; at the chunk's end the D skip and the silu(z) gate are
applied to the whole tile with coalesced u and z loads and the tile is stored once, coalesced
along L. Work: about 6 flops and one exp per (d, n, t); bytes: u, delta, z, out once per element
plus B, C once per program. Limits: the recurrence is sequential in t (latency-bound: the
chunked-parallel SSD form is the way to use tensor cores); B x D / BLOCK_D programs must fill the
GPU; one B/C group for all channels; N <= 256; no initial state (starts from zeros).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _mamba_selective_scan_chunked_kernel(
    # pointers
    u_ptr,
    delta_ptr,
    a_ptr,
    b_ptr,
    c_ptr,
    d_ptr,
    z_ptr,
    bias_ptr,
    out_ptr,
    state_ptr,
    # sizes
    dim,
    dstate,
    seqlen,
    # strides (elements; L contiguous)
    stride_ub,
    stride_ud,
    stride_db,
    stride_dd,
    stride_ad,
    stride_bb,
    stride_bn,
    stride_cb,
    stride_cn,
    stride_zb,
    stride_zd,
    stride_ob,
    stride_od,
    stride_sb,
    stride_sd,
    # meta
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SOFTPLUS: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    batch = tl.program_id(0).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    offs_l = tl.arange(0, BLOCK_L)
    mask_d = offs_d < dim
    mask_n = offs_n < dstate
    mask_dn = mask_d[:, None] & mask_n[None, :]
    a = tl.load(a_ptr + offs_d[:, None] * stride_ad + offs_n[None, :], mask=mask_dn, other=0.0)
    a = a.to(tl.float32)
    bias = tl.zeros([BLOCK_D], tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)
    skip = tl.zeros([BLOCK_D], tl.float32)
    if HAS_D:
        skip = tl.load(d_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)

    u_rows = u_ptr + batch * stride_ub + offs_d * stride_ud
    dt_rows = delta_ptr + batch * stride_db + offs_d * stride_dd
    b_rows = b_ptr + batch * stride_bb + offs_n * stride_bn
    c_rows = c_ptr + batch * stride_cb + offs_n * stride_cn
    h = tl.zeros([BLOCK_D, BLOCK_N], tl.float32)  # the state lives here for the whole sequence
    for c0 in range(0, seqlen, BLOCK_L):
        y_tile = tl.zeros([BLOCK_D, BLOCK_L], tl.float32)
        for i in range(0, BLOCK_L):
            t = c0 + i
            live = t < seqlen
            u_t = tl.load(u_rows + t, mask=mask_d & live, other=0.0).to(tl.float32)
            dt = tl.load(dt_rows + t, mask=mask_d & live, other=0.0).to(tl.float32) + bias
            if SOFTPLUS:
                dt = tl.where(
                    dt <= 20.0, tl.log(1.0 + tl.exp(tl.minimum(dt, 20.0))), dt
                )  # torch's threshold 20
            dt = tl.where(live, dt, 0.0)  # past the end: exp(0) = 1 keeps h unchanged
            b_t = tl.load(b_rows + t, mask=mask_n & live, other=0.0).to(tl.float32)
            c_t = tl.load(c_rows + t, mask=mask_n & live, other=0.0).to(tl.float32)
            h = h * tl.exp(a * dt[:, None]) + (dt * u_t)[:, None] * b_t[None, :]
            y_t = tl.sum(h * c_t[None, :], axis=1)
            y_tile = tl.where(offs_l[None, :] == i, y_t[:, None], y_tile)
        # chunk epilogue on the whole tile: skip, gate, one coalesced store along L
        tok = c0 + offs_l
        mask_tile = mask_d[:, None] & (tok < seqlen)[None, :]
        if HAS_D:
            u_tile = tl.load(u_rows[:, None] + tok[None, :], mask=mask_tile, other=0.0)
            y_tile += u_tile.to(tl.float32) * skip[:, None]
        if HAS_Z:
            z_rows = z_ptr + batch * stride_zb + offs_d * stride_zd
            z = tl.load(z_rows[:, None] + tok[None, :], mask=mask_tile, other=0.0).to(tl.float32)
            y_tile *= z * tl.sigmoid(z)
        o_ptrs = out_ptr + batch * stride_ob + offs_d[:, None] * stride_od + tok[None, :]
        tl.store(o_ptrs, y_tile.to(out_ptr.dtype.element_ty), mask=mask_tile)
    s_ptrs = state_ptr + batch * stride_sb + offs_d[:, None] * stride_sd + offs_n[None, :]
    tl.store(s_ptrs, h, mask=mask_dn)


def _validate(u, delta, A, B, C, D, z, delta_bias) -> None:  # noqa: N803
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"u {tuple(u.shape)}, delta {tuple(delta.shape)}, A {tuple(A.shape)},"
              f" B {tuple(B.shape)}, C {tuple(C.shape)}")  # fmt: skip
    if u.dim() != 3 or delta.shape != u.shape or A.dim() != 2:
        raise ValueError(f"need u and delta (B, D, L) and A (D, N); got {shapes}")
    bsz, dim, seqlen = u.shape
    dstate = A.shape[1]
    if A.shape[0] != dim or B.shape != (bsz, dstate, seqlen) or C.shape != B.shape:
        raise ValueError(
            f"A must be (D, N), B and C (B, N, L) = ({bsz}, {dstate}, {seqlen}): {shapes}"
        )
    for name, vec in (("D", D), ("delta_bias", delta_bias)):
        if vec is not None and vec.shape != (dim,):
            raise ValueError(f"{name} must have shape (D,) = ({dim},); got {tuple(vec.shape)}")
    if z is not None and z.shape != u.shape:
        raise ValueError(f"z must have u's shape {tuple(u.shape)}; got {tuple(z.shape)}")
    if dstate > 256:
        raise ValueError(f"state size N = {dstate} > 256 does not fit one register tile")
    if any(t is not None and t.stride(-1) != 1 for t in (u, delta, A, B, C, D, z, delta_bias)):
        raise ValueError("all tensors need a contiguous last axis")


def mamba_selective_scan_chunked(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,  # noqa: N803 - Mamba's names
    B: torch.Tensor,  # noqa: N803
    C: torch.Tensor,  # noqa: N803
    D: torch.Tensor | None = None,  # noqa: N803
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    *,
    block_d: int | None = None,
    block_l: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the selective-scan output and the final state, starting from a zero state.

    Args:
        u: (B, D, L) input, bf16/fp16/fp32, L contiguous.
        delta: (B, D, L) step sizes before bias/softplus.
        A: (D, N) fp32 (negative) state matrix.
        B: (B, N, L) input projections per step.
        C: (B, N, L) output projections per step.
        D: (D,) fp32 skip weight, or None.
        z: (B, D, L) gate (out *= silu(z)), or None.
        delta_bias: (D,) fp32 added to delta, or None.
        delta_softplus: Apply softplus to delta (+ bias).
        block_d: Channels per program (power of two); None = 16.
        block_l: Steps per output chunk (power of two); None = 32.
        num_warps: Warps per program; None = 4.

    Returns:
        ``(out, last_state)``: (B, D, L) in u's dtype and (B, D, N) fp32.

    Raises:
        ValueError: Shapes or layouts do not fit together.
    """
    _validate(u, delta, A, B, C, D, z, delta_bias)
    bsz, dim, seqlen = u.shape
    dstate = A.shape[1]
    out = torch.empty_like(u, memory_format=torch.contiguous_format)
    last = torch.zeros(bsz, dim, dstate, dtype=torch.float32, device=u.device)
    if out.numel() == 0 or dstate == 0:
        return (out.zero_() if dstate == 0 else out), last
    bd = block_d or 16
    dummy = u  # never read when the matching HAS_ flag is off
    zz = z if z is not None else u
    _mamba_selective_scan_chunked_kernel[(bsz, triton.cdiv(dim, bd))](
        u, delta, A, B, C, D if D is not None else dummy, zz,
        delta_bias if delta_bias is not None else dummy, out, last,
        dim, dstate, seqlen,
        u.stride(0), u.stride(1), delta.stride(0), delta.stride(1), A.stride(0),
        B.stride(0), B.stride(1), C.stride(0), C.stride(1), zz.stride(0), zz.stride(1),
        out.stride(0), out.stride(1), last.stride(0), last.stride(1),
        HAS_D=D is not None, HAS_Z=z is not None, HAS_BIAS=delta_bias is not None,
        SOFTPLUS=delta_softplus, BLOCK_D=bd, BLOCK_N=triton.next_power_of_2(dstate),
        BLOCK_L=block_l or 32, num_warps=num_warps or 4,
    )  # fmt: skip
    return out, last


def reference(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):  # noqa: N803
    """Run the recurrence with a sequential torch loop over time in fp32."""
    dt = delta.float() + (delta_bias.float()[:, None] if delta_bias is not None else 0.0)
    if delta_softplus:
        dt = torch.nn.functional.softplus(dt)
    bsz, dim, seqlen = u.shape
    h = torch.zeros(bsz, dim, A.shape[1], device=u.device)
    ys = []
    for t in range(seqlen):
        d_t = dt[:, :, t, None]  # (B, D, 1)
        h = (
            torch.exp(A.float() * d_t) * h
            + d_t * B.float()[:, None, :, t] * u.float()[:, :, t, None]
        )
        ys.append((h * C.float()[:, None, :, t]).sum(-1))
    y = torch.stack(ys, dim=-1) if ys else torch.zeros(bsz, dim, 0, device=u.device)
    if D is not None:
        y = y + u.float() * D.float()[:, None]
    if z is not None:
        y = y * torch.nn.functional.silu(z.float())
    return y.to(u.dtype), h


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return Mamba-like inputs for ``shape = {"batch", "dim", "dstate", "seqlen"}``.

    A = -(1..N) per channel (S4D-real), delta ~ N(-1, 1) with softplus and a bias, N(0, 1)
    u, B, C, z and D.
    """
    b, d, n, seq = shape["batch"], shape["dim"], shape["dstate"], shape["seqlen"]

    def rnd(*size):
        return torch.randn(*size, device=device).to(dtype)

    return {
        "u": rnd(b, d, seq),
        "delta": (torch.randn(b, d, seq, device=device) - 1).to(dtype),
        "A": -torch.arange(1, n + 1, device=device).float().repeat(d, 1),
        "B": rnd(b, n, seq),
        "C": rnd(b, n, seq),
        "D": torch.randn(d, device=device),
        "z": rnd(b, d, seq),
        "delta_bias": 0.1 * torch.randn(d, device=device),
        "delta_softplus": True,
    }
