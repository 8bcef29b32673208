"""
---
id: chunk_delta_rule_output_token_recurrent
title: Chunked gated delta-rule output as a token-by-token recurrence inside each chunk
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: latency
techniques: [chunked-linear-attention, token-loop, state-in-registers, v-split-grid, gqa]
status: reference
launcher: chunk_delta_rule_output_token_recurrent
tuning:
  block_v: [32, 16, 64, 128]
  num_warps: [4, 1, 2, 8]
args:
  q: {shape: [B, T, HQ, K], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [B, T, HQ, K], like: q, aliases: [key]}
  v: {shape: [B, T, HV, V], like: q, aliases: [value]}
  h: {shape: [B, NC, HV, K, V], like: q, aliases: [chunk_states]}
  g: {shape: [B, T, HV], dtypes: [float], aliases: [g_cumsum]}
  chunk_size: {type: int, default: 64, aliases: [chunk]}
returns:
  - {name: out, shape: [B, T, HV, V], dtype: q}
problem:
  shapes: [{batch: 2, tokens: 21, q_heads: 1, v_heads: 2, key_dim: 32, value_dim: 24, chunk: 16}, {batch: 1, tokens: 9, q_heads: 1, v_heads: 1, key_dim: 16, value_dim: 16, chunk: 5}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
The output stage of chunked gated delta-rule attention, o_i = K^-1/2 * (exp(g_i) q_i h_c + sum_{j
<= i in the chunk} exp(g_i - g_j) (q_i . k_j) v_j) for chunks of C = chunk_size tokens (value head h
reads q/k head h // (HV / HQ)), computed without any C x C score matrix: inside chunk c the running
matrix S_i = exp(g_i) h_c + sum_{j <= i} exp(g_i - g_j) k_j v_j^T obeys S_i = exp(g_i - g_{i-1})
S_{i-1} + k_i v_i^T, starting from S_{-1} = h_c with g_{-1} = 0, and o_i = K^-1/2 q_i S_i. One
program per (sequence, value head, V tile) holds a (K, BLOCK_V) fp32 S in registers and walks the
chunks in order; at each chunk start it reloads S from h_c, then per token does one decay, one
rank-1 update and one K-wide matrix-vector product (about 4 K BLOCK_V FLOPs per token on vector
units, no tensor cores, against 2 C (K + V) + 2 K V per token for the chunk-parallel kernels).
Bytes:
q, k, v, g, h and the output once per V tile (q, k re-read V / BLOCK_V times, from L2). When it
wins: short inputs (decode-sized T, one partial chunk) and small chunks, where the C x C products
of the blocked kernel are mostly masked work. For long prefills the serial token loop makes it
latency-bound (the grid has no chunk axis); use the blocked kernel there. Limits: the ratios
exp(g_i - g_{i-1}) telescope the decays, exact up to fp32 rounding (about C ulps); K <= 256 lives
whole in registers.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _chunk_output_recurrent_kernel(
    q_ptr, k_ptr, v_ptr, h_ptr, g_ptr, out_ptr, T, HQ, HV, K, V, NC, CHUNK, scale,
    BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    pid_bh = tl.program_id(0)
    batch = pid_bh // HV
    hv = pid_bh % HV
    hq = hv // (HV // HQ)  # GQA: several value heads share one q/k head
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k = offs_k < K
    mask_v = offs_v < V
    kv_mask = mask_k[:, None] & mask_v[None, :]
    for c in range(0, NC):
        h_base = h_ptr + ((batch.to(tl.int64) * NC + c) * HV + hv) * K * V
        S = tl.load(h_base + offs_k[:, None] * V + offs_v[None, :], mask=kv_mask,
                    other=0.0).to(tl.float32)  # fmt: skip
        g_prev = 0.0  # S = exp(0) h_c before the chunk's first token
        for i in range(0, tl.minimum(CHUNK, T - c * CHUNK)):
            row = batch.to(tl.int64) * T + c * CHUNK + i
            g_i = tl.load(g_ptr + row * HV + hv).to(tl.float32)
            qk_off = (row * HQ + hq) * K + offs_k
            q = tl.load(q_ptr + qk_off, mask=mask_k, other=0.0).to(tl.float32)
            k = tl.load(k_ptr + qk_off, mask=mask_k, other=0.0).to(tl.float32)
            v = tl.load(v_ptr + (row * HV + hv) * V + offs_v, mask=mask_v, other=0.0)
            S = S * tl.exp(g_i - g_prev) + k[:, None] * v.to(tl.float32)[None, :]
            o = tl.sum(S * q[:, None], axis=0) * scale
            tl.store(out_ptr + (row * HV + hv) * V + offs_v, o.to(out_ptr.dtype.element_ty),
                     mask=mask_v)  # fmt: skip
            g_prev = g_i


def _check(q, k, v, h, g, chunk_size) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, h {tuple(h.shape)},"
              f" g {tuple(g.shape)}")  # fmt: skip
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"need q, k (B, T, HQ, K) and v (B, T, HV, V); got {shapes}")
    bsz, t, hq, kd = q.shape
    hv, vd = v.shape[2:]
    if hv % hq or kd > 256:
        raise ValueError(f"need HQ dividing HV and K <= 256 (held whole per program); got {shapes}")
    if chunk_size < 1 or chunk_size > 128:
        raise ValueError(f"chunk_size must be in 1..128; got {chunk_size}")
    chunks = triton.cdiv(t, chunk_size)
    if tuple(h.shape) != (bsz, chunks, hv, kd, vd) or tuple(g.shape) != (bsz, t, hv):
        raise ValueError(
            f"need h ({bsz}, {chunks}, {hv}, {kd}, {vd}) (ceil(T / chunk_size) chunk states) and "
            f"g ({bsz}, {t}, {hv}); got {shapes}"
        )
    if not (q.dtype == k.dtype == v.dtype == h.dtype):
        raise ValueError(f"q, k, v, h dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}, {h.dtype}")


def chunk_delta_rule_output_token_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    h: torch.Tensor,
    g: torch.Tensor,
    chunk_size: int = 64,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the chunked gated delta-rule output by a per-chunk token recurrence from h_c.

    Args:
        q: (B, T, HQ, K) bf16/fp16/fp32, K <= 256.
        k: (B, T, HQ, K) same dtype.
        v: (B, T, HV, V) same dtype; HV a multiple of HQ.
        h: (B, ceil(T / chunk_size), HV, K, V) same dtype, each chunk's starting state.
        g: (B, T, HV) log-decays (any float dtype), used as given.
        chunk_size: Tokens per chunk (1..128).
        block_v: Value columns per program (power of two); None = min(next_pow2(V), 32).
        num_warps: Warps per program; None = 4.

    Returns:
        (B, T, HV, V) in q's dtype.

    Raises:
        ValueError: The shapes or dtypes do not fit, or block_v is not a power of two.
    """
    _check(q, k, v, h, g, chunk_size)
    bsz, t, hq, kd = q.shape
    hv, vd = v.shape[2:]
    out = torch.empty((bsz, t, hv, vd), dtype=q.dtype, device=q.device)
    block_v = block_v or min(triton.next_power_of_2(vd), 32)
    if block_v <= 0 or block_v & (block_v - 1):
        raise ValueError(f"block_v must be a power of two; got {block_v}")
    if out.numel() == 0:
        return out
    c = [x.contiguous() for x in (q, k, v, h, g)]
    _chunk_output_recurrent_kernel[(bsz * hv, triton.cdiv(vd, block_v))](
        *c, out, t, hq, hv, kd, vd, triton.cdiv(t, chunk_size), chunk_size, kd**-0.5,
        BLOCK_K=triton.next_power_of_2(kd), BLOCK_V=block_v, num_warps=num_warps or 4,
    )  # fmt: skip
    return out


def reference(q, k, v, h, g, chunk_size=64):
    """Per chunk, fp32 inter-chunk (q h_c exp(g)) plus causal decayed intra-chunk attention."""
    bsz, t, hq, kd = q.shape
    hv = v.shape[2]
    qf = q.float().repeat_interleave(hv // hq, dim=2)
    kf = k.float().repeat_interleave(hv // hq, dim=2)
    out = torch.empty(v.shape, dtype=torch.float32, device=q.device)
    for c in range(triton.cdiv(t, chunk_size)):
        s0, s1 = c * chunk_size, min(t, (c + 1) * chunk_size)
        qc, kc, vc, gc = qf[:, s0:s1], kf[:, s0:s1], v[:, s0:s1].float(), g[:, s0:s1].float()
        inter = torch.einsum("blhk,bhkv->blhv", qc, h[:, c].float()) * gc.exp()[..., None]
        scores = torch.einsum("blhk,bmhk->bhlm", qc, kc)
        gh = gc.permute(0, 2, 1)  # (B, HV, L)
        scores = (scores * torch.exp(gh[..., :, None] - gh[..., None, :])).tril()
        out[:, s0:s1] = (inter + torch.einsum("bhlm,bmhv->blhv", scores, vc)) * kd**-0.5
    return out.to(q.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``{batch, tokens, q_heads, v_heads, key_dim, value_dim, chunk}``.

    q, k, v ~ 0.3 N(0, 1), h ~ N(0, 1) (both terms of the output show), g ~ -U(0, 1) fp32.
    """
    bsz, t, hq, hv = shape["batch"], shape["tokens"], shape["q_heads"], shape["v_heads"]
    kd, vd, size = shape["key_dim"], shape["value_dim"], shape["chunk"]
    chunks = triton.cdiv(t, size)
    return {
        "q": (torch.randn(bsz, t, hq, kd, device=device) * 0.3).to(dtype),
        "k": (torch.randn(bsz, t, hq, kd, device=device) * 0.3).to(dtype),
        "v": (torch.randn(bsz, t, hv, vd, device=device) * 0.3).to(dtype),
        "h": torch.randn(bsz, chunks, hv, kd, vd, device=device).to(dtype),
        "g": -torch.rand(bsz, t, hv, device=device),
        "chunk_size": size,
    }
