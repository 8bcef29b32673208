"""
---
id: flash_attention_varlen_fwd
title: Non-causal varlen flash-attention forward, one program per (sequence, q-block, head)
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [online-softmax, varlen-cu-seqlens, tiled-tl-dot, fp32-accumulate, exp2-softmax]
status: reference
launcher: flash_attention_varlen_fwd
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [64, 16, 32, 128]
  num_warps: [4, 2, 8]
args:
  q: {shape: [TQ, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [TK, HKV, D], like: q, aliases: [key]}
  v: {shape: [TK, HKV, D], like: q, aliases: [value]}
  cu_seqlens: {shape: ['?'], dtypes: [int32], aliases: [cu_seqlens_q, cu_seq_lens]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
  max_seqlen: {type: int, default: null, aliases: [max_seq_len, max_seqlen_q]}
  cu_seqlens_k: {shape: ['?'], dtypes: [int32], optional: true, aliases: [cu_seqlens_kv]}
returns:
  - {name: out, shape: [TQ, HQ, D], dtype: q}
problem:
  shapes:
    - {seq_lens: [1, 17, 33], num_heads: 4, head_dim: 32}
    - {seq_lens: [5, 40, 20], num_heads: 4, num_heads_kv: 2, head_dim: 40}
    - {seq_lens: [1, 17, 33], kv_lens: [9, 0, 40], num_heads: 2, head_dim: 64}  # own key lengths
  dtypes: [fp32, bf16]
  allow_tf32: true
measured:
  - {device: NVIDIA H200, shape: attention_forward/0, dtype: bf16, latency_us: 65.952, sol_fraction: 0.0462, date: '2026-12-04'}
---
Flash-attention forward for a packed batch of variable-length sequences (q (sum(q_lens), H, D)
with boundaries from the int32 prefix sums cu_seqlens; k, v (sum(k_lens), H, D) with their own
prefix sums cu_seqlens_k, or q's boundaries when it is not given), every query attending every
key of its own sequence (no causal mask; a sequence with no keys gives zero rows). One program
owns BLOCK_M query rows of one sequence and one head; it keeps the Q tile in registers, streams
the sequence's K and V in BLOCK_N tiles through two tensor-core products per tile, and carries a
running max, denominator and fp32 accumulator (online softmax in the exp2 domain), so the
Lq x Lk score matrix never reaches memory. Every tile is bounds-masked the same way, including
the interior ones (the simple loop; flash_attention_varlen_causal_skip peels the masks off full
tiles). Bytes: Q and O once, K and V once per query block (so ceil(Lq / BLOCK_M) reads of K/V per
head, mostly from L2). GQA works when H_q is a multiple of H_kv. Limits: the grid is sized by the
caller's max_seqlen (the total query token count when it is not given: the launcher never reads
cu_seqlens on the host; key lengths need no bound, as each program loops over its sequence's keys
read on device), so a skewed batch launches idle programs that exit at once; head_dim <= 256; fp32
inputs use TF32 on the GPU.
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
def _attention_varlen_fwd_kernel(
    # pointers
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    cu_seqlens_ptr,
    cu_seqlens_k_ptr,  # the same pointer as cu_seqlens_ptr when keys share q's boundaries
    # sizes and scalars
    head_dim,
    scale_log2e,  # softmax scale * log2(e): scores go through exp2
    # strides (elements)
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    # meta
    GROUP_SIZE: tl.constexpr,  # query heads per KV head (1 without GQA)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    seq = tl.program_id(0)
    q_block = tl.program_id(1)
    head = tl.program_id(2)
    kv_head = head // GROUP_SIZE

    start = tl.load(cu_seqlens_ptr + seq)
    seq_len = tl.load(cu_seqlens_ptr + seq + 1) - start
    if q_block * BLOCK_M >= seq_len:  # the grid fits the longest sequence; others exit here
        return
    k_start = tl.load(cu_seqlens_k_ptr + seq)
    k_len = tl.load(cu_seqlens_k_ptr + seq + 1) - k_start

    offs_m = q_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < seq_len
    mask_d = offs_d < head_dim

    # this sequence's slice of the packed tensors; int64 rows (tokens x H x D can pass 2^31)
    q_rows = (start + offs_m).to(tl.int64)
    q_ptrs = q_ptr + q_rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=mask_m[:, None] & mask_d[None, :], other=0.0)
    k_seq = k_ptr + k_start.to(tl.int64) * stride_kt + kv_head * stride_kh
    v_seq = v_ptr + k_start.to(tl.int64) * stride_vt + kv_head * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # fp32 accumulation

    for n_start in range(0, k_len, BLOCK_N):
        offs_kv = n_start + offs_n
        mask_n = offs_kv < k_len
        kv_mask = mask_n[:, None] & mask_d[None, :]
        # K read as a (BLOCK_D, BLOCK_N) tile through its strides: no transpose copy
        kt_ptrs = k_seq + offs_kv[None, :] * stride_kt + offs_d[:, None]
        k_t = tl.load(kt_ptrs, mask=mask_n[None, :] & mask_d[:, None], other=0.0)
        s = _mma(q, k_t, tl.zeros([BLOCK_M, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        s = tl.where(mask_n[None, :], s, float("-inf"))

        # every step holds a valid key, so m_new is finite for every row
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_seq + offs_kv[:, None] * stride_vt + offs_d[None, :], mask=kv_mask, other=0.0)
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new

    # l_i >= 1 once a key was seen (the row max contributes exp2(0)); no keys: acc = 0, out = 0
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    o_ptrs = out_ptr + q_rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])


def _launch_config(head_dim: int) -> dict[str, int]:
    """Return tile sizes and warps: 64 x 64 tiles for D <= 64, narrower key tiles for wide heads."""
    if head_dim <= 64:
        return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4}
    if head_dim <= 128:
        return {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4}
    return {"BLOCK_M": 64, "BLOCK_N": 16, "num_warps": 8}


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _validate(q, k, v, cu_seqlens, cu_seqlens_k) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)},"
              f" cu_seqlens {tuple(cu_seqlens.shape)},"
              f" cu_seqlens_k {tuple(cu_seqlens_k.shape)}")  # fmt: skip
    if q.dim() != 3 or k.shape != v.shape or k.dim() != 3 or cu_seqlens.dim() != 1:
        raise ValueError(
            f"need q (Tq, Hq, D), k and v (Tk, Hkv, D), cu_seqlens (S+1,); got {shapes}"
        )
    if k.shape[2] != q.shape[2] or q.shape[1] % k.shape[1]:
        raise ValueError(f"head_dim or head counts (Hq % Hkv == 0) disagree: {shapes}")
    if cu_seqlens_k is cu_seqlens and k.shape[0] != q.shape[0]:
        raise ValueError(f"k has its own token count: pass its cu_seqlens_k; got {shapes}")
    if cu_seqlens_k.shape != cu_seqlens.shape or cu_seqlens_k.dtype != cu_seqlens.dtype:
        raise ValueError(f"cu_seqlens_k needs cu_seqlens' shape and dtype: {shapes}")
    if q.shape[2] > 256 or cu_seqlens.shape[0] < 1 or cu_seqlens.dtype != torch.int32:
        raise ValueError(f"need head_dim <= 256 and int32 cu_seqlens: {shapes}, {cu_seqlens.dtype}")
    if not (q.dtype == k.dtype == v.dtype) or any(t.stride(2) != 1 for t in (q, k, v)):
        raise ValueError("q, k, v need one dtype and a contiguous last (head_dim) axis")


def flash_attention_varlen_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    softmax_scale: float | None = None,
    max_seqlen: int | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return non-causal attention of each packed sequence's queries to its keys.

    Args:
        q: (sum(q_lens), Hq, D) bf16/fp16/fp32, last axis contiguous.
        k: (sum(k_lens), Hkv, D) same dtype, Hq a multiple of Hkv.
        v: (sum(k_lens), Hkv, D) same dtype.
        cu_seqlens: (S+1,) int32 prefix sums of the query lengths (starting at 0).
        softmax_scale: Score scale; None means 1/sqrt(D).
        max_seqlen: Longest query sequence (sizes the grid, as flash-attn's max_seqlen_q);
            None sizes it by the total query token count (surplus programs exit at once).
        cu_seqlens_k: (S+1,) int32 prefix sums of the key lengths (flash-attn's
            cu_seqlens_k); None means keys share the queries' boundaries (self-attention).
            A sequence with no keys gets zero output rows.
        block_m: Query rows per program (power of two >= 16); None uses the heuristic.
        block_n: Keys per loop step (power of two >= 16); None uses the heuristic.
        num_warps: Warps per program; None uses the heuristic.

    Returns:
        (sum(q_lens), Hq, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes or layouts do not fit together.
    """
    cu_seqlens_k = cu_seqlens if cu_seqlens_k is None else cu_seqlens_k
    _validate(q, k, v, cu_seqlens, cu_seqlens_k)
    out = torch.empty_like(q)
    num_seqs = cu_seqlens.shape[0] - 1
    # no host read of cu_seqlens: without max_seqlen the grid covers the total token count
    bound = q.shape[0] if max_seqlen is None else max_seqlen
    if bound == 0 or num_seqs == 0:
        return out
    _, hq, d = q.shape
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    cfg = _launch_config(d)
    cfg["BLOCK_M"] = block_m or cfg["BLOCK_M"]
    cfg["BLOCK_N"] = block_n or cfg["BLOCK_N"]
    cfg["num_warps"] = num_warps or cfg["num_warps"]
    grid = (num_seqs, triton.cdiv(bound, cfg["BLOCK_M"]), hq)
    _attention_varlen_fwd_kernel[grid](
        q, k, v, out, cu_seqlens, cu_seqlens_k,
        d, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1),
        GROUP_SIZE=hq // k.shape[1], BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=_interpreting(), num_stages=2, **cfg,
    )  # fmt: skip
    return out


def reference(q, k, v, cu_seqlens, softmax_scale=None, max_seqlen=None, cu_seqlens_k=None):
    """Run softmax attention per sequence in fp32 and cast back to q's dtype (no keys: zeros)."""
    group = q.shape[1] // k.shape[1]
    scale = softmax_scale if softmax_scale is not None else q.shape[2] ** -0.5
    cu_k = cu_seqlens if cu_seqlens_k is None else cu_seqlens_k
    out = torch.zeros_like(q)
    for s in range(cu_seqlens.shape[0] - 1):
        a, b = int(cu_seqlens[s]), int(cu_seqlens[s + 1])
        ka, kb = int(cu_k[s]), int(cu_k[s + 1])
        if kb == ka:
            continue
        ks = k[ka:kb].float().repeat_interleave(group, dim=1)
        vs = v[ka:kb].float().repeat_interleave(group, dim=1)
        p = (torch.einsum("qhd,khd->hqk", q[a:b].float(), ks) * scale).softmax(-1)
        out[a:b] = torch.einsum("hqk,khd->qhd", p, vs).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return packed N(0, 1) q, k, v and their cu_seqlens (and cu_seqlens_k with ``kv_lens``).

    ``shape``: ``seq_lens`` (list of query lengths), ``num_heads``, ``head_dim``, optional
    ``num_heads_kv`` (default ``num_heads``) and ``kv_lens`` (key lengths; without it the keys
    share the queries' lengths and no cu_seqlens_k is passed).
    """
    lens = list(shape["seq_lens"])
    kv_lens = list(shape.get("kv_lens", lens))
    h, d = shape["num_heads"], shape["head_dim"]
    hkv = shape.get("num_heads_kv", h)

    def prefix(ns: list[int]) -> torch.Tensor:
        cu = torch.zeros(len(ns) + 1, dtype=torch.int32, device=device)
        cu[1:] = torch.tensor(ns, device=device).cumsum(0)
        return cu

    inputs = {
        "q": torch.randn(sum(lens), h, d, device=device).to(dtype),
        "k": torch.randn(sum(kv_lens), hkv, d, device=device).to(dtype),
        "v": torch.randn(sum(kv_lens), hkv, d, device=device).to(dtype),
        "cu_seqlens": prefix(lens),
        "max_seqlen": max(lens, default=0),
    }
    if "kv_lens" in shape:
        inputs["cu_seqlens_k"] = prefix(kv_lens)
    return inputs
