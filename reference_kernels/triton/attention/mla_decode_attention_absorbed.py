"""
---
id: mla_decode_attention_absorbed
title: DeepSeek MLA decode with absorbed weights, one program per (batch, head block)
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [mla-absorbed, latent-kv-reuse, head-packing, online-softmax, fp32-accumulate,
             exp2-softmax]
status: reference
launcher: mla_decode_attention_absorbed
tuning:
  block_h: [16, 32]
  block_n: [32, 16, 64]
  num_warps: [8, 4]
args:
  q_nope: {shape: [B, H, R], dtypes: [bf16, fp16, fp32]}
  q_pe: {shape: [B, H, P], like: q_nope, aliases: [q_rope]}
  c_kv: {shape: [B, T, R], like: q_nope, aliases: [kv_c, latent_cache, ckv]}
  k_pe: {shape: [B, T, P], like: q_nope, aliases: [k_rope]}
  seq_lens: {shape: [B], dtypes: [int32], optional: true, aliases: [cache_seqlens]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [B, H, R], dtype: q_nope}
problem:
  shapes: [{batch: 2, num_heads: 4, seq_len: 37, kv_lora_rank: 64, rope_dim: 16}, {batch: 3, num_heads: 20, seq_len: 40, seq_lens: [0, 17, 40], kv_lora_rank: 64, rope_dim: 16}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
Multi-head latent attention (DeepSeek-V2/V3) for decode, after the up-projections have been
absorbed: every head's query is q_nope_absorbed (kv_lora_rank wide) plus q_pe (rope_dim wide), and
every head attends the same per-token latent c_kv and shared rope key k_pe (MQA over the latent).
Scores are q_nope . c_kv + q_pe . k_pe, softmax-scaled, and the output is P . c_kv in latent space
(the caller applies W_UV afterwards). One program owns BLOCK_H heads of one batch entry: the
heads form the M dimension of two tensor-core products per tile (rank and rope parts summed into
one fp32 score tile), and the loaded c_kv tile is reused as V for P . c_kv, so each latent row is
read once per head block. Online softmax in the exp2 domain, fp32 accumulator of BLOCK_H x rank.
Bytes: (rank + rope) x 2 B per token per head block, plus Q/O once. Limits: B x ceil(H / BLOCK_H)
programs only (16-128 heads -> few programs per batch entry), so long contexts at small batch
leave SMs idle (see mla_decode_attention_split); the BLOCK_H x rank accumulator (16 x 512 fp32)
bounds BLOCK_H to 32 (64 spills at rank 512); fp32 inputs use TF32 on the GPU.
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
def _attention_mla_absorbed_kernel(
    # pointers
    q_nope_ptr,
    q_pe_ptr,
    c_kv_ptr,
    k_pe_ptr,
    out_ptr,
    seq_lens_ptr,
    # sizes and scalars
    num_heads,
    rank,
    rope_dim,
    scale_log2e,  # softmax scale * log2(e): scores go through exp2
    # strides (elements; the last axis of every tensor is contiguous)
    stride_qnb,
    stride_qnh,
    stride_qpb,
    stride_qph,
    stride_cb,
    stride_ct,
    stride_kb,
    stride_kt,
    stride_ob,
    stride_oh,
    # meta
    BLOCK_H: tl.constexpr,  # heads per program (tensor-core M, >= 16)
    BLOCK_N: tl.constexpr,  # tokens per loop step
    BLOCK_R: tl.constexpr,  # kv_lora_rank, padded to a power of two
    BLOCK_P: tl.constexpr,  # rope_dim, padded to a power of two
    UPCAST: tl.constexpr,
):
    batch = tl.program_id(0)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_n = tl.arange(0, BLOCK_N)
    offs_r = tl.arange(0, BLOCK_R)
    offs_p = tl.arange(0, BLOCK_P)
    mask_h = offs_h < num_heads
    mask_r = offs_r < rank
    mask_p = offs_p < rope_dim
    seq_len = tl.load(seq_lens_ptr + batch)

    # queries of BLOCK_H heads: (BLOCK_H, rank) and (BLOCK_H, rope); padded heads load zeros
    qn_ptrs = q_nope_ptr + batch * stride_qnb + offs_h[:, None] * stride_qnh + offs_r[None, :]
    q_nope = tl.load(qn_ptrs, mask=mask_h[:, None] & mask_r[None, :], other=0.0)
    qp_ptrs = q_pe_ptr + batch * stride_qpb + offs_h[:, None] * stride_qph + offs_p[None, :]
    q_pe = tl.load(qp_ptrs, mask=mask_h[:, None] & mask_p[None, :], other=0.0)

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_R], tl.float32)  # fp32 accumulation in latent space

    c_base = c_kv_ptr + batch.to(tl.int64) * stride_cb
    k_base = k_pe_ptr + batch.to(tl.int64) * stride_kb
    for n_start in range(0, seq_len, BLOCK_N):
        tok = n_start + offs_n
        mask_n = tok < seq_len
        # the latent tile is both the key (rank part) and the value
        c_ptrs = c_base + tok[:, None].to(tl.int64) * stride_ct + offs_r[None, :]
        c_kv = tl.load(c_ptrs, mask=mask_n[:, None] & mask_r[None, :], other=0.0)
        kp_ptrs = k_base + tok[:, None].to(tl.int64) * stride_kt + offs_p[None, :]
        k_pe = tl.load(kp_ptrs, mask=mask_n[:, None] & mask_p[None, :], other=0.0)

        # scores = q_nope . c_kv + q_pe . k_pe: two products into one fp32 tile
        s = _mma(q_nope, tl.trans(c_kv), tl.zeros([BLOCK_H, BLOCK_N], tl.float32), UPCAST)
        s = _mma(q_pe, tl.trans(k_pe), s, UPCAST) * scale_log2e
        s = tl.where(mask_n[None, :], s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: each step has a valid token
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = _mma(p, c_kv, acc * alpha[:, None], UPCAST)
        m_i = m_new

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # seq_len 0 writes zeros
    o_ptrs = out_ptr + batch * stride_ob + offs_h[:, None] * stride_oh + offs_r[None, :]
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_h[:, None] & mask_r[None, :])


def _launch_config(num_heads: int, rank: int) -> dict[str, int]:
    """Return heads per program, tokens per step and warps for the BLOCK_H x rank accumulator."""
    if rank >= 256:  # DeepSeek's 512-wide latent: ptxas (sm_90) spills on 4 warps, not on 8
        return {"block_h": 16, "block_n": 32, "num_warps": 8}
    return {"block_h": 16 if num_heads <= 16 else 32, "block_n": 32, "num_warps": 4}


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _validate(q_nope, q_pe, c_kv, k_pe, seq_lens) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"q_nope {tuple(q_nope.shape)}, q_pe {tuple(q_pe.shape)}, c_kv {tuple(c_kv.shape)},"
              f" k_pe {tuple(k_pe.shape)}, seq_lens {tuple(seq_lens.shape)}")  # fmt: skip
    if any(t.dim() != 3 for t in (q_nope, q_pe, c_kv, k_pe)):
        raise ValueError(
            f"need q_nope (B, H, R), q_pe (B, H, P), c_kv (B, T, R), k_pe (B, T, P); got {shapes}"
        )
    b, h, r = q_nope.shape
    if q_pe.shape[:2] != (b, h) or c_kv.shape[0] != b or c_kv.shape[2] != r:
        raise ValueError(f"batch, heads or kv_lora_rank disagree: {shapes}")
    if k_pe.shape[:2] != c_kv.shape[:2] or k_pe.shape[2] != q_pe.shape[2] or seq_lens.shape != (b,):
        raise ValueError(f"tokens or rope_dim disagree: {shapes}")
    if r < 16 or q_pe.shape[2] < 16:
        raise ValueError(f"kv_lora_rank and rope_dim must be >= 16 (tensor-core K): {shapes}")
    if len({t.dtype for t in (q_nope, q_pe, c_kv, k_pe)}) != 1 or seq_lens.dtype != torch.int32:
        raise ValueError("q_nope, q_pe, c_kv, k_pe need one dtype and seq_lens int32")
    if any(t.stride(2) != 1 for t in (q_nope, q_pe, c_kv, k_pe)):
        raise ValueError("every tensor needs a contiguous last axis")


def mla_decode_attention_absorbed(
    q_nope: torch.Tensor,
    q_pe: torch.Tensor,
    c_kv: torch.Tensor,
    k_pe: torch.Tensor,
    seq_lens: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    *,
    block_h: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return MLA decode attention in latent space.

    Args:
        q_nope: (B, H, R) bf16/fp16/fp32, queries already multiplied by W_UK (R = kv_lora_rank).
        q_pe: (B, H, P) same dtype, rotary part of the queries (P = rope_dim).
        c_kv: (B, T, R) same dtype, the latent cache (keys and values).
        k_pe: (B, T, P) same dtype, the shared rotary keys.
        seq_lens: (B,) int32 valid tokens per batch entry (<= T); None means all T.
        softmax_scale: Score scale; None means 1/sqrt(R + P).
        block_h: Heads per program (power of two >= 16); None uses the heuristic.
        block_n: Tokens per loop step (power of two >= 16); None uses the heuristic.
        num_warps: Warps per program; None uses the heuristic.

    Returns:
        (B, H, R) tensor of q_nope's dtype.

    Raises:
        ValueError: Shapes, dtypes or layouts do not fit together.
    """
    b, h, r = q_nope.shape
    if seq_lens is None:
        seq_lens = torch.full((b,), c_kv.shape[1], dtype=torch.int32, device=q_nope.device)
    _validate(q_nope, q_pe, c_kv, k_pe, seq_lens)
    p = q_pe.shape[2]
    out = torch.empty_like(q_nope)
    if b == 0 or h == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else (r + p) ** -0.5
    cfg = _launch_config(h, r)
    bh = block_h or cfg["block_h"]
    _attention_mla_absorbed_kernel[(b, triton.cdiv(h, bh))](
        q_nope, q_pe, c_kv, k_pe, out, seq_lens,
        h, r, p, scale * 1.4426950408889634,
        q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
        c_kv.stride(0), c_kv.stride(1), k_pe.stride(0), k_pe.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_H=bh, BLOCK_N=block_n or cfg["block_n"],
        BLOCK_R=triton.next_power_of_2(r), BLOCK_P=triton.next_power_of_2(p),
        UPCAST=_interpreting(), num_warps=num_warps or cfg["num_warps"], num_stages=2,
    )  # fmt: skip
    return out


def reference(q_nope, q_pe, c_kv, k_pe, seq_lens=None, softmax_scale=None):
    """Score against the latent and rope keys, softmax in fp32, and mix the latent rows."""
    b, _, r = q_nope.shape
    scale = softmax_scale if softmax_scale is not None else (r + q_pe.shape[2]) ** -0.5
    out = torch.empty_like(q_nope)
    for i in range(b):
        n = c_kv.shape[1] if seq_lens is None else int(seq_lens[i])
        ckv, kpe = c_kv[i, :n].float(), k_pe[i, :n].float()
        scores = (q_nope[i].float() @ ckv.T + q_pe[i].float() @ kpe.T) * scale  # (H, n)
        out[i] = (scores.softmax(-1) @ ckv).to(q_nope.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return absorbed MLA decode inputs with N(0, 1) entries.

    ``shape``: ``batch``, ``num_heads``, ``seq_len`` (cache length T), optional ``seq_lens`` (list,
    each <= T), ``kv_lora_rank`` (512) and ``rope_dim`` (64).
    """
    b, h, t = shape["batch"], shape["num_heads"], shape["seq_len"]
    r, p = shape.get("kv_lora_rank", 512), shape.get("rope_dim", 64)
    lens = shape.get("seq_lens", [t] * b)
    return {
        "q_nope": torch.randn(b, h, r, device=device).to(dtype),
        "q_pe": torch.randn(b, h, p, device=device).to(dtype),
        "c_kv": torch.randn(b, t, r, device=device).to(dtype),
        "k_pe": torch.randn(b, t, p, device=device).to(dtype),
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device),
    }
