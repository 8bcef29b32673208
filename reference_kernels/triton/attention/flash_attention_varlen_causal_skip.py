"""
---
id: flash_attention_varlen_causal_skip
title: Varlen flash-attention forward with a mask-free interior loop and causal tile skipping
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [online-softmax, varlen-cu-seqlens, causal-tile-skip, mask-peeling,
             longest-first-order, fp32-accumulate]
status: reference
launcher: flash_attention_varlen_causal_skip
tuning:
  block_m: [128, 16, 32, 64]
  block_n: [32, 16, 64]
  num_warps: [8, 2, 4]
args:
  q: {shape: [TQ, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [TK, HKV, D], like: q, aliases: [key]}
  v: {shape: [TK, HKV, D], like: q, aliases: [value]}
  cu_seqlens: {shape: ['?'], dtypes: [int32], aliases: [cu_seqlens_q, cu_seq_lens]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
  max_seqlen: {type: int, default: null, aliases: [max_seq_len, max_seqlen_q]}
  causal: {type: bool, default: false, aliases: [is_causal]}
  cu_seqlens_k: {shape: ['?'], dtypes: [int32], optional: true, aliases: [cu_seqlens_kv]}
returns:
  - {name: out, shape: [TQ, HQ, D], dtype: q}
problem:
  shapes:
    - {seq_lens: [1, 17, 33], num_heads: 4, head_dim: 32, causal: true}
    - {seq_lens: [1, 17, 33], num_heads: 4, head_dim: 32, causal: false}
    # own key lengths: more keys than queries (cached prefix), fewer (rows that see no key), none
    - {seq_lens: [1, 17, 33, 5], kv_lens: [9, 40, 20, 0], num_heads: 2, head_dim: 64, causal: true}
  dtypes: [fp32, bf16]
  allow_tf32: true
measured:
  - {device: NVIDIA H200, shape: attention_forward/0, dtype: bf16, latency_us: 55.696, sol_fraction: 0.0547, date: '2026-12-04'}
---
The varlen attention forward of flash_attention_varlen_fwd (packed q (sum(q_lens), H, D) and k, v
(sum(k_lens), H, D), int32 cu_seqlens and optional cu_seqlens_k, which default to q's) with an
optional causal mask and a two-phase key loop. The causal diagonal is aligned to the bottom right
as in flash-attn 2.1+: query i of a sequence sees keys 0..i + (k_len - q_len), so q_len == k_len
is the usual self-attention mask, extra keys are a visible prefix, and when k_len < q_len the
first q_len - k_len rows see no key and are written as zeros. Phase 1 walks the key tiles every
row of the query block sees whole (all keys up to the block's first row's diagonal when causal,
all full tiles otherwise) with no bounds or causal masks at all; phase 2 handles the remaining
diagonal tiles (causal) or the one ragged tail tile, masking per element. Key tiles past the
block's last row's diagonal are never loaded, so causal attention does about half the work and
traffic of the non-causal case. Query blocks run last-first (the longest key ranges
start first, which shortens the tail of a causal grid). HEAD_DIM is a compile-time constant, so
the head-dim masks fold away for power-of-two heads. Online softmax in the exp2 domain, fp32
accumulator. Bytes: Q and O once, K and V once per query block (about half that when causal).
Limits: the grid is sized by the caller's max_seqlen (the longest query sequence; the total query
token count when it is not given: cu_seqlens is never read on the host, and key lengths are read
on device); head_dim <= 256; fp32 inputs use TF32 on the GPU.
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
def _attend_key_range(
    acc, m_i, l_i, q,  # running state and the Q tile
    k_seq, v_seq, stride_kt, stride_vt,  # this sequence's K/V for the head
    lo, hi, k_len, diag, offs_m, offs_n, offs_d, scale_log2e,  # diag = k_len - q_len
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,  # phase 2: per-element bounds (and causal) masks
    CAUSAL: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    """Fold the key tiles [lo, hi) into the online-softmax state and return it."""
    mask_d = offs_d < HEAD_DIM  # all true (folded) when HEAD_DIM is a power of two
    for n_start in range(lo, hi, BLOCK_N):
        offs_kv = n_start + offs_n
        kt_ptrs = k_seq + offs_kv[None, :] * stride_kt + offs_d[:, None]  # (BLOCK_D, BLOCK_N)
        v_ptrs = v_seq + offs_kv[:, None] * stride_vt + offs_d[None, :]
        if MASKED:
            mask_n = offs_kv < k_len
            k_t = tl.load(kt_ptrs, mask=mask_d[:, None] & mask_n[None, :], other=0.0)
        else:
            k_t = tl.load(kt_ptrs, mask=mask_d[:, None], other=0.0)
        s = _mma(q, k_t, tl.zeros([BLOCK_M, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        if MASKED:
            visible = mask_n[None, :]
            if CAUSAL:
                visible = visible & (offs_m[:, None] + diag >= offs_kv[None, :])
            s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = m_new  # finite when every row sees a key: phase 1 and non-causal tiles
        if MASKED and CAUSAL:
            # a row may have seen no key yet (k_len < q_len): shift by 0, not -inf (no inf - inf)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if MASKED:
            v = tl.load(v_ptrs, mask=mask_n[:, None] & mask_d[None, :], other=0.0)
        else:
            v = tl.load(v_ptrs, mask=mask_d[None, :], other=0.0)
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attention_varlen_causal_skip_kernel(
    # pointers
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    cu_seqlens_ptr,
    cu_seqlens_k_ptr,  # the same pointer as cu_seqlens_ptr when keys share q's boundaries
    # scalars
    scale_log2e,
    # strides (elements; head_dim contiguous)
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    # meta
    HEAD_DIM: tl.constexpr,
    GROUP_SIZE: tl.constexpr,  # query heads per KV head (1 without GQA)
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    seq = tl.program_id(0)
    q_block = tl.num_programs(1) - 1 - tl.program_id(1)  # last (longest causal) blocks first
    head = tl.program_id(2)
    kv_head = head // GROUP_SIZE

    start = tl.load(cu_seqlens_ptr + seq)
    seq_len = tl.load(cu_seqlens_ptr + seq + 1) - start
    q_lo = q_block * BLOCK_M
    if q_lo >= seq_len:
        return
    k_start = tl.load(cu_seqlens_k_ptr + seq)
    k_len = tl.load(cu_seqlens_k_ptr + seq + 1) - k_start
    diag = k_len - seq_len  # bottom-right causal alignment: row i sees keys <= i + diag

    offs_m = q_lo + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < seq_len
    mask_d = offs_d < HEAD_DIM
    q_rows = (start + offs_m).to(tl.int64)
    q_ptrs = q_ptr + q_rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=mask_m[:, None] & mask_d[None, :], other=0.0)
    k_seq = k_ptr + k_start.to(tl.int64) * stride_kt + kv_head * stride_kh
    v_seq = v_ptr + k_start.to(tl.int64) * stride_vt + kv_head * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # fp32 accumulation

    # split [0, key_end) into whole tiles every row sees and the rest
    if CAUSAL:
        # whole tiles at or before the first row's diagonal (clamped: it may lie before key 0);
        # they end at or before key q_lo + diag <= k_len - 1, so they need no bounds mask either
        full_end = (tl.maximum(q_lo + diag, 0) // BLOCK_N) * BLOCK_N
        key_end = tl.minimum(q_lo + BLOCK_M + diag, k_len)  # nothing past the last row's diagonal
    else:
        full_end = (k_len // BLOCK_N) * BLOCK_N
        key_end = k_len
    acc, m_i, l_i = _attend_key_range(
        acc, m_i, l_i, q, k_seq, v_seq, stride_kt, stride_vt,
        0, full_end, k_len, diag, offs_m, offs_n, offs_d, scale_log2e,
        HEAD_DIM, BLOCK_M, BLOCK_N, False, CAUSAL, UPCAST,
    )  # fmt: skip
    acc, m_i, l_i = _attend_key_range(
        acc, m_i, l_i, q, k_seq, v_seq, stride_kt, stride_vt,
        full_end, key_end, k_len, diag, offs_m, offs_n, offs_d, scale_log2e,
        HEAD_DIM, BLOCK_M, BLOCK_N, True, CAUSAL, UPCAST,
    )  # fmt: skip

    # l_i >= 1 once a key was seen (the row max contributes exp2(0)); no key: acc = 0, out = 0
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    o_ptrs = out_ptr + q_rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])


def _launch_config(head_dim: int) -> dict[str, int]:
    """Return tile sizes and warps that compile without spills for sm_90 (checked with ptxas).

    The two key loops are two copies of the tile body, so 4 warps spill at D = 128 where the
    single-loop flash_attention_varlen_fwd does not; 8 warps and 128-row tiles do not.
    """
    if head_dim <= 64:
        return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8}
    if head_dim <= 128:
        return {"BLOCK_M": 128, "BLOCK_N": 32, "num_warps": 8}
    return {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4}


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


def flash_attention_varlen_causal_skip(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    softmax_scale: float | None = None,
    max_seqlen: int | None = None,
    causal: bool = False,
    cu_seqlens_k: torch.Tensor | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return (optionally causal) attention of each packed sequence's queries to its keys.

    Args:
        q: (sum(q_lens), Hq, D) bf16/fp16/fp32, last axis contiguous.
        k: (sum(k_lens), Hkv, D) same dtype, Hq a multiple of Hkv.
        v: (sum(k_lens), Hkv, D) same dtype.
        cu_seqlens: (S+1,) int32 prefix sums of the query lengths (starting at 0).
        softmax_scale: Score scale; None means 1/sqrt(D).
        max_seqlen: Longest query sequence (sizes the grid, as flash-attn's max_seqlen_q);
            None sizes it by the total query token count (surplus programs exit at once).
        causal: Mask keys after each query's diagonal, aligned to the bottom right: query i
            sees keys 0..i + (k_len - q_len) of its sequence (0..i when the lengths match).
            Rows that see no key (k_len < q_len) get zeros.
        cu_seqlens_k: (S+1,) int32 prefix sums of the key lengths (flash-attn's
            cu_seqlens_k); None means keys share the queries' boundaries (self-attention).
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
    _attention_varlen_causal_skip_kernel[grid](
        q, k, v, out, cu_seqlens, cu_seqlens_k,
        scale * 1.4426950408889634,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1),
        HEAD_DIM=d, GROUP_SIZE=hq // k.shape[1], CAUSAL=bool(causal),
        BLOCK_D=max(16, triton.next_power_of_2(d)), UPCAST=_interpreting(), num_stages=2, **cfg,
    )  # fmt: skip
    return out


def reference(
    q, k, v, cu_seqlens, softmax_scale=None, max_seqlen=None, causal=False, cu_seqlens_k=None
):
    """Run (optionally causal) softmax attention per sequence in fp32, cast to q's dtype.

    The causal mask is bottom-right aligned (query i sees keys up to i + k_len - q_len); rows
    that see no key are zero.
    """
    group = q.shape[1] // k.shape[1]
    scale = softmax_scale if softmax_scale is not None else q.shape[2] ** -0.5
    cu_k = cu_seqlens if cu_seqlens_k is None else cu_seqlens_k
    out = torch.empty_like(q)
    for s in range(cu_seqlens.shape[0] - 1):
        a, b = int(cu_seqlens[s]), int(cu_seqlens[s + 1])
        ka, kb = int(cu_k[s]), int(cu_k[s + 1])
        ks = k[ka:kb].float().repeat_interleave(group, dim=1)
        vs = v[ka:kb].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q[a:b].float(), ks) * scale
        if causal:
            diag = (kb - ka) - (b - a)
            future = torch.ones(b - a, kb - ka, dtype=torch.bool, device=q.device).triu(diag + 1)
            scores = scores.masked_fill(future, float("-inf"))
        # nan_to_num: a row with every key masked (or none) softmaxes to NaN; it is zero
        p = scores.softmax(-1).nan_to_num(0.0)
        out[a:b] = torch.einsum("hqk,khd->qhd", p, vs).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return packed N(0, 1) q, k, v, their cu_seqlens and the causal flag.

    ``shape``: ``seq_lens`` (list of query lengths), ``num_heads``, ``head_dim``, optional
    ``num_heads_kv`` (default ``num_heads``), ``causal`` (default False) and ``kv_lens`` (key
    lengths, passed as cu_seqlens_k; without it the keys share the queries' lengths).
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
        "causal": bool(shape.get("causal", False)),
    }
    if "kv_lens" in shape:
        inputs["cu_seqlens_k"] = prefix(kv_lens)
    return inputs
