"""
---
id: chunk_delta_rule_output_k_split
title: Chunked gated delta-rule output, K split over programs, fp32 partials summed in pass two
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [chunked-linear-attention, split-k, fp32-partials, two-pass, tensor-core-mma, gqa]
status: reference
launcher: chunk_delta_rule_output_k_split
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
  shapes: [{batch: 2, tokens: 21, q_heads: 1, v_heads: 2, key_dim: 32, value_dim: 24, chunk: 16}, {batch: 1, tokens: 9, q_heads: 1, v_heads: 1, key_dim: 16, value_dim: 16, chunk: 5}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
The output stage of chunked gated delta-rule attention, o = K^-1/2 * ((q h_c) * exp(g)[:, None] +
(M * (q k^T) * exp(g_i - g_j)) v) per chunk of C = chunk_size tokens, value head h and q/k head
h // (HV / HQ), M the causal mask i >= j. Both terms are linear in the K axis: the scores q k^T
are a sum over K slices, and masking, decay and the product with v distribute over that sum. So
the grid is (B * HV, chunk, K / BLOCK_K * V / BLOCK_V): a program takes one BLOCK_K slice of q, k
and h and one V tile, computes its partial inter term q_s h_s * exp(g) and its partial scores q_s
k_s^T, masks and decays them, multiplies them into v and writes the (C, BLOCK_V) fp32 partial to
its split's plane of a workspace; a second kernel sums the K / BLOCK_K partials per element,
applies K^-1/2 and rounds once. Against the K-looping blocked kernel this multiplies the programs
by K / BLOCK_K (filling the SMs for short prefills with few heads) and holds only a K slice per
program, at the price of K / BLOCK_K extra C x C x V products (v re-read per split, from L2) and
an fp32 workspace of K / BLOCK_K planes the size of the output (written and read once). Limits:
the partial scores are rounded to the storage dtype per split before the product with v (the
blocked kernel rounds their sum once); BLOCK_C = next_pow2(C) <= 128.
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
def _partial_kernel(
    q_ptr, k_ptr, v_ptr, h_ptr, g_ptr, part_ptr, T, HQ, HV, K, V, NC, CHUNK, N_VT,
    BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid_bh = tl.program_id(0)
    chunk = tl.program_id(1)
    split = tl.program_id(2) // N_VT  # which K slice
    batch = pid_bh // HV
    hv = pid_bh % HV
    hq = hv // (HV // HQ)  # GQA: several value heads share one q/k head
    offs_c = tl.arange(0, BLOCK_C)
    offs_k = split * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_v = (tl.program_id(2) % N_VT) * BLOCK_V + tl.arange(0, BLOCK_V)
    tok = chunk * CHUNK + offs_c
    mask_c = (offs_c < CHUNK) & (tok < T)
    mask_k = offs_k < K
    mask_v = offs_v < V
    rows = batch.to(tl.int64) * T + tok
    qk_off = (rows * HQ + hq)[:, None] * K + offs_k[None, :]
    qk_mask = mask_c[:, None] & mask_k[None, :]
    q = tl.load(q_ptr + qk_off, mask=qk_mask, other=0.0)
    k = tl.load(k_ptr + qk_off, mask=qk_mask, other=0.0)
    h_base = h_ptr + ((batch.to(tl.int64) * NC + chunk) * HV + hv) * K * V
    h = tl.load(h_base + offs_k[:, None] * V + offs_v[None, :],
                mask=mask_k[:, None] & mask_v[None, :], other=0.0)  # fmt: skip
    g = tl.load(g_ptr + rows * HV + hv, mask=mask_c, other=0.0).to(tl.float32)
    zeros = tl.zeros([BLOCK_C, BLOCK_V], tl.float32)
    inter = _mma(q, h, zeros, UPCAST) * tl.exp(g)[:, None]
    scores = _mma(q, tl.trans(k), tl.zeros([BLOCK_C, BLOCK_C], tl.float32), UPCAST)
    causal = (offs_c[:, None] >= offs_c[None, :]) & mask_c[None, :]
    scores = tl.where(causal, scores * tl.exp(g[:, None] - g[None, :]), 0.0)
    vo_off = (rows * HV + hv)[:, None] * V + offs_v[None, :]
    vo_mask = mask_c[:, None] & mask_v[None, :]
    v = tl.load(v_ptr + vo_off, mask=vo_mask, other=0.0)
    part = _mma(scores, v, inter, UPCAST)
    plane = split.to(tl.int64) * (tl.num_programs(0) // HV) * T * HV * V  # B * T * HV * V
    tl.store(part_ptr + plane + vo_off, part, mask=vo_mask)


@triton.jit
def _reduce_kernel(part_ptr, out_ptr, n, scale, N_SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """Sum the K-split fp32 partials per element, scale and round once."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.zeros([BLOCK], tl.float32)
    for s in tl.static_range(N_SPLIT):
        acc += tl.load(part_ptr + s * n + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, (acc * scale).to(out_ptr.dtype.element_ty), mask=mask)


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


def chunk_delta_rule_output_k_split(
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
    """Return the chunked gated delta-rule output from K-split fp32 partials summed in pass two.

    Args:
        q: (B, T, HQ, K) bf16/fp16/fp32.
        k: (B, T, HQ, K) same dtype.
        v: (B, T, HV, V) same dtype; HV a multiple of HQ.
        h: (B, ceil(T / chunk_size), HV, K, V) same dtype, each chunk's starting state.
        g: (B, T, HV) log-decays (any float dtype), used as given.
        chunk_size: Tokens per chunk (1..128).
        block_k: K slice per program (power of two >= 16); None = min(next_pow2(K), 64).
        block_v: Value columns per program (power of two >= 16); None = min(next_pow2(V), 64).
        num_warps: Warps per program; None = 4.

    Returns:
        (B, T, HV, V) in q's dtype.

    Raises:
        ValueError: The shapes or dtypes do not fit, or a block is not a power of two >= 16.
    """
    _check(q, k, v, h, g, chunk_size)
    bsz, t, hq, kd = q.shape
    hv, vd = v.shape[2:]
    out = torch.empty((bsz, t, hv, vd), dtype=q.dtype, device=q.device)
    block_k = block_k or min(max(16, triton.next_power_of_2(kd)), 64)
    block_v = block_v or min(max(16, triton.next_power_of_2(vd)), 64)
    for name, value in (("block_k", block_k), ("block_v", block_v)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16; got {value}")
    if out.numel() == 0:
        return out
    chunks = triton.cdiv(t, chunk_size)
    n_split, n_vt = triton.cdiv(kd, block_k), triton.cdiv(vd, block_v)
    parts = torch.empty((n_split, bsz, t, hv, vd), dtype=torch.float32, device=q.device)
    c = [x.contiguous() for x in (q, k, v, h, g)]
    _partial_kernel[(bsz * hv, chunks, n_split * n_vt)](
        *c, parts, t, hq, hv, kd, vd, chunks, chunk_size, n_vt,
        BLOCK_C=max(16, triton.next_power_of_2(chunk_size)), BLOCK_K=block_k, BLOCK_V=block_v,
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=num_warps or 4,
    )  # fmt: skip
    n = out.numel()
    _reduce_kernel[(triton.cdiv(n, 1024),)](parts, out, n, kd**-0.5, N_SPLIT=n_split, BLOCK=1024)
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
