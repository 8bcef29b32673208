"""
---
id: mamba2_ssd_chunk_state
title: Mamba-2 SSD chunk-state stage, per-chunk (P x N) states as decay-weighted x^T B dot products
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32]
bound: compute
techniques: [chunked-scan, tensor-core-dot, decay-weighting, grouped-heads, 2d-output-tiles]
status: reference
launcher: mamba2_ssd_chunk_state
tuning:
  block_p: [32, 16, 64]
  block_n: [32, 16, 64, 128]
  block_l: [32, 16, 64]
  input_precision: [ieee, tf32]
  num_warps: [4, 2, 8]
args:
  x: {shape: [Z, L, H, P], dtypes: [fp32], aliases: [hidden_states, u]}
  B: {shape: [Z, L, G, N], dtypes: [fp32], aliases: [b, B_proj]}
  dt: {shape: [Z, H, C, S], dtypes: [fp32], aliases: [delta]}
  dA_cumsum: {shape: [Z, H, C, S], dtypes: [fp32], aliases: [dA_cs, da_cumsum]}
returns:
  - {name: states, shape: [Z, C, H, P, N], dtype: fp32}
problem:
  shapes: [{batch: 1, seqlen: 40, heads: 2, groups: 1, headdim: 16, dstate: 16, chunk: 32}, {batch: 2, seqlen: 32, heads: 4, groups: 2, headdim: 20, dstate: 16, chunk: 16}]
  dtypes: [fp32]
measured: []
---
The chunk-state stage of Mamba-2's SSD (state-space duality) scan: for every batch z, chunk c of S
positions and head h (head group g = h // (H / G)), states[z, c, h] = sum over the chunk's positions
l of exp(dA_cumsum[l_last] - dA_cumsum[l]) * dt[l] * outer(x[l, h, :], B[l, g, :]), i.e. the state
the chunk would leave behind if it started from zero (the state-passing and output stages then
combine chunks). Program (z * C * H + c * H + h, P-tile x N-tile) walks its chunk in BLOCK_L slices:
it loads a (BLOCK_P, BLOCK_L) slice of x (transposed view, strided), scales each column by its decay
weight computed from dt and dA_cumsum in registers, and accumulates tl.dot with the (BLOCK_L,
BLOCK_N) slice of B in fp32. FLOPs: 2 * P * N per position and head; bytes: x and B once per (P, N)
tile pair plus dt/dA per position, so with P = 64, N = 128 it is compute-bound on tensor cores in
tf32 and near the FP32 roof with ieee (the exact default). The last chunk may be partial (L not a
multiple of S): its decays use its last valid position. Limits: fp32 only; H must be a multiple of
G; a P or N tile smaller than 16 pads (tl.dot needs 16); no seq_idx (varlen) reset within a chunk.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _ssd_chunk_state_kernel(
    # pointers
    x_ptr, b_ptr, dt_ptr, dacs_ptr, out_ptr,
    # sizes
    L, H, C, P, N, S, HEADS_PER_GROUP,
    # strides (elements)
    sxz, sxl, sxh, sxp,
    sbz, sbl, sbg, sbn,
    sdz, sdh, sdc, sds,  # shared by dt and dA_cumsum (same layout)
    soz, soc, soh, sop, son,
    # meta
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    z = pid // (C * H)
    c = (pid // H) % C
    h = pid % H
    g = h // HEADS_PER_GROUP
    n_tiles_n = tl.cdiv(N, BLOCK_N)
    offs_p = (tl.program_id(1) // n_tiles_n) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = (tl.program_id(1) % n_tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    chunk_len = tl.minimum(S, L - c * S)
    x_base = x_ptr + z.to(tl.int64) * sxz + (c * S).to(tl.int64) * sxl + h * sxh
    b_base = b_ptr + z.to(tl.int64) * sbz + (c * S).to(tl.int64) * sbl + g * sbg
    d_off = z.to(tl.int64) * sdz + h * sdh + c * sdc
    da_last = tl.load(dacs_ptr + d_off + (chunk_len - 1) * sds)
    acc = tl.zeros((BLOCK_P, BLOCK_N), dtype=tl.float32)
    for l0 in range(0, chunk_len, BLOCK_L):
        offs_l = l0 + tl.arange(0, BLOCK_L)
        l_ok = offs_l < chunk_len
        x_t = tl.load(
            x_base + offs_l[None, :] * sxl + offs_p[:, None] * sxp,
            mask=l_ok[None, :] & (offs_p < P)[:, None],
            other=0.0,
        )  # (BLOCK_P, BLOCK_L): x transposed
        b = tl.load(
            b_base + offs_l[:, None] * sbl + offs_n[None, :] * sbn,
            mask=l_ok[:, None] & (offs_n < N)[None, :],
            other=0.0,
        )  # (BLOCK_L, BLOCK_N)
        da = tl.load(dacs_ptr + d_off + offs_l * sds, mask=l_ok, other=0.0)
        dt = tl.load(dt_ptr + d_off + offs_l * sds, mask=l_ok, other=0.0)
        weight = tl.where(l_ok, tl.exp(da_last - da) * dt, 0.0)
        acc += tl.dot(x_t * weight[None, :], b, input_precision=INPUT_PRECISION)
    out = out_ptr + z.to(tl.int64) * soz + c * soc + h * soh
    tl.store(
        out + offs_p[:, None] * sop + offs_n[None, :] * son,
        acc,
        mask=(offs_p < P)[:, None] & (offs_n < N)[None, :],
    )


def mamba2_ssd_chunk_state(
    x: torch.Tensor,
    B: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    *,
    block_p: int | None = None,
    block_n: int | None = None,
    block_l: int | None = None,
    input_precision: str | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the zero-initial per-chunk SSD states (Z, C, H, P, N).

    Args:
        x: (Z, L, H, P) fp32 inputs.
        B: (Z, L, G, N) fp32 input projections, H a multiple of G.
        dt: (Z, H, C, S) fp32 step sizes (after softplus), C = ceil(L / S) chunks of S positions.
        dA_cumsum: (Z, H, C, S) fp32 cumulative sum of dt * A within each chunk.
        block_p: Head-dim tile (power of two >= 16); None = 32.
        block_n: State-dim tile (power of two >= 16); None = 32.
        block_l: Positions per dot step (power of two >= 16); None = 32.
        input_precision: tl.dot precision, "ieee" (exact fp32, default) or "tf32".
        num_warps: Warps per program; None = 4.

    Returns:
        states: (Z, C, H, P, N) fp32, contiguous.

    Raises:
        ValueError: Wrong dtypes, ranks or mismatched dimensions.
    """
    named = {"x": x, "B": B, "dt": dt, "dA_cumsum": dA_cumsum}
    for name, t in named.items():
        if t.dim() != 4 or t.dtype != torch.float32:
            raise ValueError(f"{name} must be a 4-D fp32 tensor; got {t.dtype} {tuple(t.shape)}")
    z, seqlen, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    if B.shape[:2] != (z, seqlen) or g < 1 or h % g:
        raise ValueError(
            f"B must be ({z}, {seqlen}, G, N) with H={h} a multiple of G; got {B.shape}"
        )
    s = dt.shape[3]
    c = -(-seqlen // s) if s else 0
    if dt.shape != (z, h, c, s) or dA_cumsum.shape != dt.shape:
        raise ValueError(
            f"dt and dA_cumsum must both be ({z}, {h}, ceil(L / S), S) = ({z}, {h}, {c}, {s}); "
            f"got {tuple(dt.shape)} and {tuple(dA_cumsum.shape)}"
        )
    if dt.stride() != dA_cumsum.stride():
        dt, dA_cumsum = dt.contiguous(), dA_cumsum.contiguous()
    out = torch.empty((z, c, h, p, n), dtype=torch.float32, device=x.device)
    if out.numel() == 0:
        return out
    bp, bn = block_p or 32, block_n or 32
    grid = (z * c * h, triton.cdiv(p, bp) * triton.cdiv(n, bn))
    _ssd_chunk_state_kernel[grid](
        x, B, dt, dA_cumsum, out,
        seqlen, h, c, p, n, s, h // g,
        *x.stride(), *B.stride(), *dt.stride(), *out.stride(),
        BLOCK_P=bp, BLOCK_N=bn, BLOCK_L=block_l or 32,
        INPUT_PRECISION=input_precision or "ieee",
        num_warps=num_warps or 4,
    )  # fmt: skip
    return out


def reference(
    x: torch.Tensor, B: torch.Tensor, dt: torch.Tensor, dA_cumsum: torch.Tensor
) -> torch.Tensor:
    """Return the per-chunk states by einsum over zero-padded chunks, in fp64 then fp32."""
    z, seqlen, h, p = x.shape
    g, s, c = B.shape[2], dt.shape[3], dt.shape[2]
    pad = c * s - seqlen
    xc = torch.nn.functional.pad(x.double(), (0, 0, 0, 0, 0, pad)).reshape(z, c, s, h, p)
    bc = torch.nn.functional.pad(B.double(), (0, 0, 0, 0, 0, pad)).reshape(z, c, s, g, -1)
    bc = bc.repeat_interleave(h // g, dim=3)  # (Z, C, S, H, N)
    last = torch.full((c,), s - 1, device=x.device)
    last[-1] = seqlen - (c - 1) * s - 1  # the partial last chunk decays to its last valid slot
    da = dA_cumsum.double()
    da_last = da.gather(3, last.view(1, 1, c, 1).expand(z, h, c, 1))
    valid = (torch.arange(s, device=x.device) <= last[:, None]).double()  # (C, S)
    weight = torch.exp(da_last - da) * dt.double() * valid  # (Z, H, C, S)
    return torch.einsum("zcshp,zhcs,zcshn->zchpn", xc, weight, bc).float()


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return SSD inputs for ``shape = {"batch", "seqlen", "heads", "groups", "headdim", "dstate",
    "chunk"}``: dt = softplus(N(0, 1) - 2), A = -exp(N(0, 1)), per-chunk cumulative dA."""
    z, seqlen, h, s = shape["batch"], shape["seqlen"], shape["heads"], shape["chunk"]
    c = -(-seqlen // s)
    x = torch.randn(z, seqlen, h, shape["headdim"], device=device)
    b = torch.randn(z, seqlen, shape["groups"], shape["dstate"], device=device)
    dt = torch.nn.functional.softplus(torch.randn(z, h, c * s, device=device) - 2.0)
    dt[:, :, seqlen:] = 0.0  # the padded tail of the last chunk
    a = -torch.exp(torch.randn(h, device=device))
    dt = dt.reshape(z, h, c, s)
    da_cumsum = torch.cumsum(dt * a.view(1, h, 1, 1), dim=-1)
    return {"x": x, "B": b, "dt": dt, "dA_cumsum": da_cumsum}
