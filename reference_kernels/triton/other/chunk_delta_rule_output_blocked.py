"""
---
id: chunk_delta_rule_output_blocked
title: Chunked gated delta-rule output, K-blocked intra-chunk attention plus the state term
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [chunked-linear-attention, k-blocking, v-split-grid, gated-decay, tensor-core-mma, gqa]
status: reference
launcher: chunk_delta_rule_output_blocked
tuning:
  block_k: [64, 16, 32, 128]
  block_v: [64, 16, 32, 128]
  num_warps: [4, 2, 8]
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
  shapes: [{batch: 2, tokens: 45, q_heads: 2, v_heads: 4, key_dim: 32, value_dim: 24, chunk: 16}, {batch: 1, tokens: 70, q_heads: 1, v_heads: 1, key_dim: 64, value_dim: 64, chunk: 64}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
The output stage of chunked gated delta-rule (Gated DeltaNet) attention. Tokens are cut into
chunks of C = chunk_size (the last may be partial); h holds each chunk's starting state (K, V) per
value head and g the log-decays. For chunk c, value head h and q/k head h // (HV / HQ): o = K^-1/2 *
((q h_c) * exp(g)[:, None] + (M * (q k^T) * exp(g_i - g_j)) v), M the causal mask i >= j inside
the chunk. Grid: (B * HV, chunk, V / BLOCK_V). Each program walks the K axis in BLOCK_K slices and
accumulates, from the same q slice, both the inter-chunk term q h_c (C x BLOCK_V) and the
intra-chunk scores q k^T (C x C), so q is read once per program and no K-wide tile is ever held
whole (K = 256 costs registers only for BLOCK_K); then it applies the decay factors and the causal
mask to the scores in fp32 and multiplies them into the chunk's v slice (one more tensor-core
product). FLOPs per chunk and head: 2 C K V (inter) + 2 C^2 K (scores) + 2 C^2 V (intra); bytes:
q, k, v, h once (k re-read by each V tile, from L2) and o once. Limits: BLOCK_C = next_pow2(C)
rows (C <= 128 fits registers at BLOCK_V = 64); scores go to the product in the storage dtype on
the GPU (bf16 probabilities, like the chunk kernels they model); k and the scores are recomputed
by every V tile (V / BLOCK_V times).
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr):
    """Return acc + a @ b with an fp32 accumulator (exact fp32 operands under the interpreter)."""
    if UPCAST:
        # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(a.to(b.dtype), b, acc)  # GPU: tensor cores on the storage dtype
    return acc


@triton.jit
def _chunk_delta_output_kernel(
    q_ptr, k_ptr, v_ptr, h_ptr, g_ptr, out_ptr,
    T, HQ, HV, K, V, NC, CHUNK, scale,
    BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid_bh = tl.program_id(0)
    chunk = tl.program_id(1)
    batch = pid_bh // HV
    hv = pid_bh % HV
    hq = hv // (HV // HQ)  # GQA: several value heads share one q/k head
    offs_c = tl.arange(0, BLOCK_C)
    offs_v = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    tok = chunk * CHUNK + offs_c
    mask_c = (offs_c < CHUNK) & (tok < T)
    mask_v = offs_v < V
    rows = batch.to(tl.int64) * T + tok  # (batch, token) rows, int64
    h_base = h_ptr + ((batch.to(tl.int64) * NC + chunk) * HV + hv) * K * V

    inter = tl.zeros([BLOCK_C, BLOCK_V], tl.float32)
    scores = tl.zeros([BLOCK_C, BLOCK_C], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        qk_rows = (rows * HQ + hq)[:, None] * K + offs_k[None, :]
        qk_mask = mask_c[:, None] & mask_k[None, :]
        q = tl.load(q_ptr + qk_rows, mask=qk_mask, other=0.0)
        k = tl.load(k_ptr + qk_rows, mask=qk_mask, other=0.0)
        h = tl.load(h_base + offs_k[:, None] * V + offs_v[None, :],
                    mask=mask_k[:, None] & mask_v[None, :], other=0.0)  # fmt: skip
        inter = _mma(q, h, inter, UPCAST)
        scores = _mma(q, tl.trans(k), scores, UPCAST)

    g = tl.load(g_ptr + rows * HV + hv, mask=mask_c, other=0.0).to(tl.float32)
    causal = (offs_c[:, None] >= offs_c[None, :]) & mask_c[None, :]
    scores = tl.where(causal, scores * tl.exp(g[:, None] - g[None, :]), 0.0)
    v = tl.load(v_ptr + (rows * HV + hv)[:, None] * V + offs_v[None, :],
                mask=mask_c[:, None] & mask_v[None, :], other=0.0)  # fmt: skip
    o = _mma(scores, v, inter * tl.exp(g)[:, None], UPCAST) * scale
    tl.store(out_ptr + (rows * HV + hv)[:, None] * V + offs_v[None, :],
             o.to(out_ptr.dtype.element_ty), mask=mask_c[:, None] & mask_v[None, :])  # fmt: skip


def _check(q, k, v, h, g, chunk_size) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, h {tuple(h.shape)},"
              f" g {tuple(g.shape)}")  # fmt: skip
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"need q, k (B, T, HQ, K) and v (B, T, HV, V); got {shapes}")
    bsz, t, hq, kd = q.shape
    hv, vd = v.shape[2:]
    if hv % hq:
        raise ValueError(f"need HQ dividing HV; got {shapes}")
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


def chunk_delta_rule_output_blocked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    h: torch.Tensor,
    g: torch.Tensor,
    chunk_size: int = 64,
    *,
    block_k: int | None = None,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the chunked gated delta-rule output (inter-chunk state term + intra-chunk term).

    Args:
        q: (B, T, HQ, K) bf16/fp16/fp32.
        k: (B, T, HQ, K) same dtype.
        v: (B, T, HV, V) same dtype; HV a multiple of HQ.
        h: (B, ceil(T / chunk_size), HV, K, V) same dtype, each chunk's starting state.
        g: (B, T, HV) log-decays (any float dtype), used as given.
        chunk_size: Tokens per chunk (1..128).
        block_k: K slice per step (power of two >= 16); None = min(next_pow2(K), 64).
        block_v: Value columns per program (power of two >= 16); None = min(next_pow2(V), 64).
        num_warps: Warps per program; None = 4.

    Returns:
        (B, T, HV, V) in q's dtype.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    _check(q, k, v, h, g, chunk_size)
    bsz, t, hq, kd = q.shape
    hv, vd = v.shape[2:]
    out = torch.empty((bsz, t, hv, vd), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    chunks = triton.cdiv(t, chunk_size)
    block_k = block_k or min(max(16, triton.next_power_of_2(kd)), 64)
    block_v = block_v or min(max(16, triton.next_power_of_2(vd)), 64)
    c = [x.contiguous() for x in (q, k, v, h, g)]
    _chunk_delta_output_kernel[(bsz * hv, chunks, triton.cdiv(vd, block_v))](
        *c, out, t, hq, hv, kd, vd, chunks, chunk_size, kd**-0.5,
        BLOCK_C=max(16, triton.next_power_of_2(chunk_size)), BLOCK_K=block_k, BLOCK_V=block_v,
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=num_warps or 4,
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
