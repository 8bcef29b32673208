"""
---
id: retention_decay_chunked
title: Retention (per-head scalar decay linear attention, RetNet) in chunks, grid split over V tiles
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [retention, decay-mask, chunked-parallel, state-in-registers, v-split-grid]
status: reference
launcher: retention_decay_chunked
tuning:
  block_c: [64, 16, 32, 128]
  block_v: [64, 16, 32, 128]
  num_warps: [4, 2, 8]
args:
  q: {shape: [B, H, L, K], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [B, H, L, K], like: q, aliases: [key]}
  v: {shape: [B, H, L, V], like: q, aliases: [value]}
  gamma: {shape: [H], dtypes: [fp32], aliases: [decay]}
  scale: {type: float, default: null, aliases: [softmax_scale]}
returns:
  - {name: o, shape: [B, H, L, V], dtype: q}
  - {name: final_state, shape: [B, H, K, V], dtype: fp32}
problem:
  shapes: [{batch: 1, heads: 2, seqlen: 45, dk: 32, dv: 40}, {batch: 2, heads: 3, seqlen: 16, dk: 16, dv: 16}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.06
  rtol: 0.03
measured: []
---
Retention (RetNet's multi-scale retention without its group norm): o_t = scale * sum_{s <= t}
gamma_h^(t - s) (q_t . k_s) v_s with one decay gamma_h in (0, 1] per head. Chunked form with the
state S = sum_{s < c0} gamma^(c0 - 1 - s) k_s^T v_s (K x V, fp32 registers): for row i of the
chunk starting at c0, o_i = gamma^(i + 1) q_i S + sum_{j <= i} gamma^(i - j) (q_i . k_j) v_j,
then S <- gamma^n S + sum_j gamma^(n - 1 - j) k_j^T v_j over the chunk's n valid rows. The decays
are built in registers from the index vectors with exp2(log2(gamma) * distance), so no decay mask
is read. Columns of S (and of o) are independent, so the grid is (B x H, V / BLOCK_V): each
program owns a (K, BLOCK_V) slice of the state, which multiplies the parallelism by V / BLOCK_V
over a per-head grid at the cost of recomputing the (C x C) q k^T tile once per V slice. Four
tensor-core products per chunk; bytes: q, k once per V slice, v and o once. Limits: K <= 128 (the
whole key dim in one tile); scalar decay per head only (no data-dependent gates); the state
enters the MMA in the input dtype on the GPU; a head whose gamma lies outside (0, 1] gets NaN
output and state (the launcher reads no gamma on the host; check_inputs raises for it, with a
sync, outside the launch).
"""

import math
import os

import torch
import triton
import triton.language as tl


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr):
    """Return acc + a @ b with an fp32 accumulator (exact fp32 operands under the interpreter)."""
    if UPCAST:
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b.to(a.dtype), acc)
    return acc


@triton.jit
def _retention_decay_chunked_kernel(
    # pointers
    q_ptr,
    k_ptr,
    v_ptr,
    gamma_ptr,  # fp32 (H,): log2 taken here, NaN for a decay outside (0, 1]
    o_ptr,
    state_ptr,
    # sizes and scalars
    num_heads,
    seqlen,
    dk,
    dv,
    scale,
    # strides (elements; last axis contiguous)
    stride_qb,
    stride_qh,
    stride_ql,
    stride_kb,
    stride_kh,
    stride_kl,
    stride_vb,
    stride_vh,
    stride_vl,
    stride_ob,
    stride_oh,
    stride_ol,
    stride_sb,
    stride_sh,
    stride_sk,
    # meta
    BLOCK_C: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
    UPCAST: tl.constexpr,
):
    bh = tl.program_id(0)
    batch = (bh // num_heads).to(tl.int64)
    head = bh % num_heads
    g = tl.load(gamma_ptr + head)
    lg = tl.where((g > 0.0) & (g <= 1.0), tl.log2(g), float("nan"))  # log2(gamma) <= 0
    offs_c = tl.arange(0, BLOCK_C)
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k = offs_k < dk
    mask_v = offs_v < dv
    dist = (offs_c[:, None] - offs_c[None, :]).to(tl.float32)
    # intra-chunk decay mask gamma^(i - j) on and below the diagonal, from the indices
    decay = tl.where(dist >= 0, tl.exp2(lg * tl.maximum(dist, 0.0)), 0.0)
    q_decay = tl.exp2(lg * (offs_c + 1).to(tl.float32))  # gamma^(i + 1): the state's age at row i
    q_base = q_ptr + batch * stride_qb + head * stride_qh
    k_base = k_ptr + batch * stride_kb + head * stride_kh
    v_base = v_ptr + batch * stride_vb + head * stride_vh
    o_base = o_ptr + batch * stride_ob + head * stride_oh

    state = tl.zeros([BLOCK_K, BLOCK_V], tl.float32)
    for c0 in range(0, seqlen, BLOCK_C):
        rows = c0 + offs_c
        mask_c = rows < seqlen
        n = tl.minimum(seqlen - c0, BLOCK_C)  # valid rows in this chunk
        q = tl.load(q_base + rows[:, None] * stride_ql + offs_k[None, :],
                    mask=mask_c[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
        k_t = tl.load(k_base + rows[None, :] * stride_kl + offs_k[:, None],
                      mask=mask_k[:, None] & mask_c[None, :], other=0.0)  # fmt: skip
        v = tl.load(v_base + rows[:, None] * stride_vl + offs_v[None, :],
                    mask=mask_c[:, None] & mask_v[None, :], other=0.0)  # fmt: skip
        o = _mma(q, state, tl.zeros([BLOCK_C, BLOCK_V], tl.float32), UPCAST) * q_decay[:, None]
        s = _mma(q, k_t, tl.zeros([BLOCK_C, BLOCK_C], tl.float32), UPCAST) * decay
        o = _mma(s.to(q.dtype), v, o, UPCAST) * scale
        tl.store(o_base + rows[:, None] * stride_ol + offs_v[None, :],
                 o.to(o_ptr.dtype.element_ty), mask=mask_c[:, None] & mask_v[None, :])  # fmt: skip
        # S <- gamma^n S + sum_j gamma^(n - 1 - j) k_j^T v_j
        k_decay = tl.exp2(lg * tl.maximum(n - 1 - offs_c, 0).to(tl.float32))
        k_w = (k_t.to(tl.float32) * k_decay[None, :]).to(q.dtype)
        state = _mma(k_w, v, state * tl.exp2(lg * n.to(tl.float32)), UPCAST)

    s_ptrs = state_ptr + batch * stride_sb + head * stride_sh + offs_k[:, None] * stride_sk
    tl.store(s_ptrs + offs_v[None, :], state, mask=mask_k[:, None] & mask_v[None, :])


def retention_decay_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    gamma: torch.Tensor,
    scale: float | None = None,
    *,
    block_c: int | None = None,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return retention output o and the final decayed state.

    Args:
        q: (B, H, L, K) bf16/fp16/fp32, last axis contiguous.
        k: (B, H, L, K) same dtype.
        v: (B, H, L, V) same dtype.
        gamma: (H,) fp32 per-head decay in (0, 1].
        scale: Multiplies q . k; None means K^-0.5.
        block_c: Tokens per chunk (power of two >= 16); None = 64.
        block_v: Value columns per program (power of two >= 16); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        ``(o, final_state)``: (B, H, L, V) in q's dtype and (B, H, K, V) fp32 with
        final_state = sum_s gamma^(L - 1 - s) k_s^T v_s.

    Raises:
        ValueError: Shapes, dtypes or layouts are invalid (check_inputs checks the decay
            values; the kernel gives NaN for a head whose gamma is outside (0, 1]).
    """
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"need q, k (B, H, L, K) and v (B, H, L, V); got {shapes}")
    b, h, seqlen, dk = q.shape
    dv = v.shape[3]
    if gamma.shape != (h,) or gamma.dtype != torch.float32:
        raise ValueError(
            f"gamma must be fp32 of shape (H,) = ({h},); got {tuple(gamma.shape)} {gamma.dtype}"
        )
    if dk > 128:
        raise ValueError(f"K must be <= 128 (the whole key dim is one tile); got {shapes}")
    if not (q.dtype == k.dtype == v.dtype) or any(t.stride(-1) != 1 for t in (q, k, v)):
        raise ValueError(f"q, k, v need one dtype and a contiguous last axis; got {shapes}")
    o = torch.empty(b, h, seqlen, dv, dtype=q.dtype, device=q.device)
    state = torch.zeros(b, h, dk, dv, dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, state
    bv = block_v or min(64, max(16, triton.next_power_of_2(dv)))
    _retention_decay_chunked_kernel[(b * h, triton.cdiv(dv, bv))](
        q, k, v, gamma.contiguous(), o, state,
        h, seqlen, dk, dv, scale if scale is not None else dk**-0.5,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        state.stride(0), state.stride(1), state.stride(2),
        BLOCK_C=block_c or 64, BLOCK_K=max(16, triton.next_power_of_2(dk)), BLOCK_V=bv,
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=num_warps or 4,
    )  # fmt: skip
    return o, state


def check_inputs(gamma: torch.Tensor) -> None:
    """Raise ValueError unless every decay lies in (0, 1] (reads gamma on the host: a sync).

    Outside the timed path: the launcher does not read gamma on the host; its kernel gives NaN
    for a head whose decay is out of range instead.
    """
    if gamma.numel() and not bool(((gamma > 0) & (gamma <= 1)).all()):
        raise ValueError(f"gamma must lie in (0, 1]; got {gamma.tolist()}")


def reference(q, k, v, gamma, scale=None):
    """Parallel form in fp32: o = scale * ((q k^T) * D) v with D_ts = gamma^(t - s), t >= s."""
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    seqlen = q.shape[2]
    pos = torch.arange(seqlen, device=q.device).float()
    dist = pos[:, None] - pos[None, :]
    decay = gamma.float()[:, None, None] ** dist.clamp(min=0) * (dist >= 0)  # (H, L, L)
    qf, kf, vf = q.float(), k.float(), v.float()
    o = scale * ((qf @ kf.transpose(-1, -2)) * decay) @ vf
    w = gamma.float()[:, None] ** (seqlen - 1 - pos)  # (H, L)
    state = (kf * w[None, :, :, None]).transpose(-1, -2) @ vf
    return o.to(q.dtype), state


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return N(0, 1) q, k, v and RetNet-like decays for ``batch, heads, seqlen, dk, dv``."""
    b, h, seq, dk, dv = (shape[n] for n in ("batch", "heads", "seqlen", "dk", "dv"))
    gamma = torch.tensor([1.0 - 2.0 ** (-5.0 - math.log2(1 + i)) for i in range(h)])
    return {
        "q": torch.randn(b, h, seq, dk, device=device).to(dtype),
        "k": torch.randn(b, h, seq, dk, device=device).to(dtype),
        "v": torch.randn(b, h, seq, dv, device=device).to(dtype),
        "gamma": gamma.to(device),
    }
