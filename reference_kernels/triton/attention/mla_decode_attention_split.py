"""
---
id: mla_decode_attention_split
title: DeepSeek MLA decode (absorbed weights) with split-KV partials and a streaming merge kernel
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [mla-absorbed, latent-cache, varlen, split-kv, flash-decoding, lse-reduce,
             head-packing, online-softmax, fp32-accumulate]
status: reference
launcher: mla_decode_attention_split
tuning:
  num_kv_splits: [8, 1, 2, 4, 16, 32]
  block_h: [16, 32]
  block_n: [32, 16, 64]
  num_warps: [8, 4]
args:
  q: {shape: [B, H, DK], dtypes: [bf16, fp16, fp32], aliases: [query]}
  kv_cache: {shape: [TT, 1, DK], like: q, aliases: [latent_cache, kv_c]}
  seq_lens: {shape: [B], dtypes: [int32], aliases: [cache_seqlens, context_lens]}
  kv_lora_rank: {type: int, default: 512, aliases: [rank]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
  q_pe: {shape: ['?', '?', '?'], like: q, optional: true}
  k_pe: {shape: ['?', '?', '?'], like: q, optional: true}
returns:
  - {name: out, shape: [B, H, kv_lora_rank], dtype: q}
problem:
  shapes: [{seq_lens: [37, 0, 20], num_heads: 5, kv_lora_rank: 48, rope_dim: 16}, {seq_lens: [40], num_heads: 20, kv_lora_rank: 64, rope_dim: 16}]
  dtypes: [fp32, bf16]
measured: []
---
The operator of mla_decode_attention_absorbed (absorbed MLA decode: scores q_nope . c_kv + q_pe .
k_pe, output P . c_kv in latent space), restructured for small batches with long contexts: each
batch entry's tokens are cut into NUM_KV_SPLITS equal chunks (rounded to BLOCK_N, so every entry
of a ragged batch is split evenly), and the grid is batch x head block x split. A split program
packs BLOCK_H heads into the tensor-core M dimension, reuses its c_kv tile as V, and writes an
unnormalised fp32 partial (running max, denominator, BLOCK_H x rank accumulator). A second kernel,
one program per (batch, head), streams over the used splits and merges them with a running
log-sum-exp, so its registers hold one rank-wide row whatever the split count. Layouts, told
apart by whether q_pe / k_pe are given: packed (the header's, atrex30's mla_decode_attention and
make_inputs' default), q (B, H, R + P) and kv_cache (sum(seq_lens), 1, R + P) rows [c_kv | k_pe],
sequence b's rows after those of 0 .. b-1 (its first row is an in-kernel sum of the earlier
seq_lens, O(B) loads per program, no host prefix sum), R = kv_lora_rank; or padded with the rope
part apart (make_inputs' ``layout: padded``), q (B, H, R) and kv_cache (B, T, R) with q_pe (B, H,
P) and k_pe (B, T, P), R = q's width. Bytes: (R + P) x 2 B per token per head block, plus (R + 2)
x 4 B per head and split through the workspace (written and read once). Limits: the workspace
grows with splits x heads x rank (32 x 128 x 512 x 4 B = 8 MiB per batch entry at the largest
setting); the default split count reads no seq_lens values, only shapes (two waves of programs,
capped at the cache's rows / 32 rounded up to a power of two), so in a ragged batch the short
entries' surplus splits are launched and exit at once; lengths past the cache's rows (or
negative) are clipped in-kernel and check_inputs raises for them; fp32 inputs take exact fp32 dots
(no TF32: its 10-bit mantissa misses fp32 tolerances), far slower than bf16 on tensor cores.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr):
    """Return acc + a @ b with an fp32 accumulator (exact fp32 operands for UPCAST)."""
    if UPCAST:
        # CPU interpreter (its bf16 tl.dot is wrong) or fp32 inputs: exact fp32 products
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(a.to(b.dtype), b, acc)  # GPU: tensor cores on the storage dtype
    return acc


@triton.jit
def _split_chunk(seq_len, NUM_SPLITS: tl.constexpr, BLOCK_N: tl.constexpr):
    """Return one batch entry's tokens per split (a BLOCK_N multiple; both kernels use it)."""
    return tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_N) * BLOCK_N


@triton.jit
def _seq_extent(seq_lens_ptr, batch, max_rows, HAS_LENS: tl.constexpr, PACKED: tl.constexpr,
                BLOCK_B: tl.constexpr):  # fmt: skip
    """Return a batch entry's first cache row and its tokens, clipped to the cache's rows."""
    start = tl.zeros([], tl.int64)
    if PACKED:  # the earlier sequences' rows come first: sum their lengths
        for b0 in range(0, batch, BLOCK_B):
            offs_b = b0 + tl.arange(0, BLOCK_B)
            lens = tl.load(seq_lens_ptr + offs_b, mask=offs_b < batch, other=0)
            start += tl.sum(tl.maximum(lens, 0).to(tl.int64))  # a negative length counts 0
    seq_len = tl.zeros([], tl.int64) + max_rows
    if HAS_LENS:
        seq_len = tl.load(seq_lens_ptr + batch).to(tl.int64)
    return start, tl.maximum(tl.minimum(seq_len, max_rows - start), 0)


@triton.jit
def _attention_mla_split_partial_kernel(
    # packed layout: q_pe_ptr = q_nope_ptr and k_pe_ptr = c_kv_ptr, rope from column pe_col
    q_nope_ptr, q_pe_ptr, c_kv_ptr, k_pe_ptr,
    m_part_ptr, l_part_ptr,  # (B, H, NUM_SPLITS) fp32: running max (log2 domain), denominator
    acc_part_ptr,  # (B, H, NUM_SPLITS, rank) fp32, unnormalised
    seq_lens_ptr,
    num_heads, rank, rope_dim,
    pe_col,  # first rope column of q_pe / k_pe rows (packed: rank; padded: 0)
    max_rows,  # cache rows a batch entry may use (packed: all of them; padded: T)
    scale_log2e,
    # strides (elements; last axes contiguous; packed: stride_cb = stride_kb = 0)
    stride_qnb, stride_qnh, stride_qpb, stride_qph, stride_cb, stride_ct, stride_kb, stride_kt,
    NUM_SPLITS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_B: tl.constexpr,
    HAS_LENS: tl.constexpr, PACKED: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    batch = tl.program_id(0)
    split = tl.program_id(2)
    start, seq_len = _seq_extent(seq_lens_ptr, batch, max_rows, HAS_LENS, PACKED, BLOCK_B)
    chunk = _split_chunk(seq_len, NUM_SPLITS, BLOCK_N)
    split_start = split * chunk
    if split_start >= seq_len:  # an empty split; the merge never reads its slot
        return
    split_end = tl.minimum(seq_len, split_start + chunk)

    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_n = tl.arange(0, BLOCK_N)
    offs_r = tl.arange(0, BLOCK_R)
    offs_p = tl.arange(0, BLOCK_P)
    mask_h = offs_h < num_heads
    mask_r = offs_r < rank
    mask_p = offs_p < rope_dim

    qn_ptrs = q_nope_ptr + batch * stride_qnb + offs_h[:, None] * stride_qnh + offs_r[None, :]
    q_nope = tl.load(qn_ptrs, mask=mask_h[:, None] & mask_r[None, :], other=0.0)
    qp_row = q_pe_ptr + batch * stride_qpb + pe_col
    qp_ptrs = qp_row + offs_h[:, None] * stride_qph + offs_p[None, :]
    q_pe = tl.load(qp_ptrs, mask=mask_h[:, None] & mask_p[None, :], other=0.0)

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_R], tl.float32)  # fp32 accumulation

    c_base = c_kv_ptr + batch.to(tl.int64) * stride_cb + start * stride_ct
    k_base = k_pe_ptr + batch.to(tl.int64) * stride_kb + start * stride_kt + pe_col
    for n_start in range(split_start, split_end, BLOCK_N):
        tok = n_start + offs_n
        mask_n = tok < split_end
        c_ptrs = c_base + tok[:, None].to(tl.int64) * stride_ct + offs_r[None, :]
        c_kv = tl.load(c_ptrs, mask=mask_n[:, None] & mask_r[None, :], other=0.0)  # key and value
        kp_ptrs = k_base + tok[:, None].to(tl.int64) * stride_kt + offs_p[None, :]
        k_pe = tl.load(kp_ptrs, mask=mask_n[:, None] & mask_p[None, :], other=0.0)

        s = _mma(q_nope, tl.trans(c_kv), tl.zeros([BLOCK_H, BLOCK_N], tl.float32), UPCAST)
        s = _mma(q_pe, tl.trans(k_pe), s, UPCAST) * scale_log2e
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: each step has a valid token
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = _mma(p, c_kv, acc * alpha[:, None], UPCAST)
        m_i = m_new

    # workspace rows: (batch, head, split), contiguous
    slot = (batch * num_heads + offs_h).to(tl.int64) * NUM_SPLITS + split
    tl.store(m_part_ptr + slot, m_i, mask=mask_h)
    tl.store(l_part_ptr + slot, l_i, mask=mask_h)
    a_ptrs = acc_part_ptr + slot[:, None] * rank + offs_r[None, :]
    tl.store(a_ptrs, acc, mask=mask_h[:, None] & mask_r[None, :])


@triton.jit
def _attention_mla_split_merge_kernel(
    m_part_ptr, l_part_ptr, acc_part_ptr, out_ptr, seq_lens_ptr,
    num_heads, rank, max_rows, stride_ob, stride_oh,
    # NUM_SPLITS, BLOCK_N and the layout flags must match the partial kernel's
    NUM_SPLITS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK_B: tl.constexpr, HAS_LENS: tl.constexpr, PACKED: tl.constexpr,
):  # fmt: skip
    batch = tl.program_id(0)
    head = tl.program_id(1)
    _, seq_len = _seq_extent(seq_lens_ptr, batch, max_rows, HAS_LENS, PACKED, BLOCK_B)
    chunk = _split_chunk(seq_len, NUM_SPLITS, BLOCK_N)
    used = tl.cdiv(seq_len, tl.maximum(chunk, 1))  # splits that hold at least one token
    offs_r = tl.arange(0, BLOCK_R)
    mask_r = offs_r < rank
    base = (batch * num_heads + head).to(tl.int64) * NUM_SPLITS

    # streaming log-sum-exp merge: one rank-wide row in registers at a time
    m_run = float("-inf")
    l_run = 0.0
    acc = tl.zeros([BLOCK_R], tl.float32)
    for split in range(0, used):
        m = tl.load(m_part_ptr + base + split)
        m_new = tl.maximum(m_run, m)
        old_w = tl.exp2(m_run - m_new)  # first split: exp2(-inf) = 0
        new_w = tl.exp2(m - m_new)
        l_run = l_run * old_w + tl.load(l_part_ptr + base + split) * new_w
        part = tl.load(acc_part_ptr + (base + split) * rank + offs_r, mask=mask_r, other=0.0)
        acc = acc * old_w + part * new_w
        m_run = m_new

    out = acc / tl.where(l_run > 0.0, l_run, 1.0)  # seq_len 0 writes zeros
    o_ptrs = out_ptr + batch * stride_ob + head * stride_oh + offs_r
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_r)


def _launch_config(batch: int, num_heads: int, rank: int, max_rows: int,
                   device: torch.device) -> dict[str, int]:  # fmt: skip
    """Return splits (two waves of programs, at most 32, no more than the rows fill) and tiles."""
    sms = (
        torch.cuda.get_device_properties(device).multi_processor_count
        if device.type == "cuda"
        else 132
    )
    block_h = 16 if rank >= 256 or num_heads <= 16 else 32
    base = batch * triton.cdiv(num_heads, block_h)
    splits = min(32, triton.next_power_of_2(triton.cdiv(2 * sms, base)))
    # max_rows bounds every entry's length (a shape, not a read of seq_lens)
    splits = min(splits, triton.next_power_of_2(max(1, triton.cdiv(max_rows, 32))))
    return {"num_kv_splits": splits, "block_h": block_h, "block_n": 32, "num_warps": 8}


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _validate(q, kv_cache, seq_lens, kv_lora_rank, q_pe, k_pe) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit either layout."""
    named = {"q": q, "kv_cache": kv_cache, "seq_lens": seq_lens, "q_pe": q_pe, "k_pe": k_pe}
    shapes = ", ".join(f"{k} {tuple(t.shape)}" for k, t in named.items() if t is not None)
    tensors = [t for k, t in named.items() if t is not None and k != "seq_lens"]
    if any(t.dim() != 3 for t in tensors):
        raise ValueError(f"need 3-D q, kv_cache (and q_pe, k_pe); got {shapes}")
    b, h, dq = q.shape
    if (q_pe is None) != (k_pe is None):
        raise ValueError(f"the padded layout needs both q_pe and k_pe; got {shapes}")
    if k_pe is None:  # packed: (B, H, DK) and (sum(seq_lens), 1, DK)
        if kv_cache.shape[1] != 1 or kv_cache.shape[2] != dq or not 0 < kv_lora_rank < dq:
            raise ValueError(f"need q (B, H, DK), kv_cache (rows, 1, DK) and 0 < kv_lora_rank"
                             f" ({kv_lora_rank}) < DK; got {shapes}")  # fmt: skip
        if seq_lens is None:
            raise ValueError("the packed layout needs seq_lens (each sequence's rows)")
    elif q_pe.shape[:2] != (b, h) or kv_cache.shape[0] != b or kv_cache.shape[2] != dq:
        raise ValueError(f"need q (B, H, R), q_pe (B, H, P), kv_cache (B, T, R); got {shapes}")
    elif k_pe.shape[:2] != kv_cache.shape[:2] or k_pe.shape[2] != q_pe.shape[2]:
        raise ValueError(f"need k_pe (B, T, P) beside kv_cache (B, T, R); got {shapes}")
    if seq_lens is not None and (seq_lens.shape != (b,) or seq_lens.dtype != torch.int32):
        raise ValueError(f"seq_lens must be int32 ({b},); got {seq_lens.dtype} {shapes}")
    if len({t.dtype for t in tensors}) != 1:
        raise ValueError(f"q, kv_cache (q_pe, k_pe) need one dtype; got {shapes}")
    if any(t.stride(2) != 1 for t in tensors):
        raise ValueError("every tensor needs a contiguous last axis")


def mla_decode_attention_split(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    seq_lens: torch.Tensor | None = None,
    kv_lora_rank: int = 512,
    softmax_scale: float | None = None,
    *,
    q_pe: torch.Tensor | None = None,
    k_pe: torch.Tensor | None = None,
    num_kv_splits: int | None = None,
    block_h: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return MLA decode attention in latent space, split over the KV length.

    Args:
        q: Packed: (B, H, DK) bf16/fp16/fp32, DK = kv_lora_rank + rope dim P, queries already
            multiplied by W_UK. Padded: (B, H, R), their latent part only.
        kv_cache: Packed: (sum(seq_lens), 1, DK) same dtype, rows [c_kv | k_pe], sequences back
            to back. Padded: (B, T, R) same dtype, the latent cache (keys and values).
        seq_lens: (B,) int32 tokens per sequence; the packed layout needs it, padded: None
            means all T (each <= T).
        kv_lora_rank: Packed: latent width R, the values are each row's first R columns.
            Padded: not used (R is q's width).
        softmax_scale: Score scale; None means 1/sqrt(R + P).
        q_pe: Padded only: (B, H, P) same dtype, the rotary part of the queries.
        k_pe: Padded only: (B, T, P) same dtype, the shared rotary keys.
        num_kv_splits: Chunks each entry's tokens are cut into; None uses the heuristic.
        block_h: Heads per program (power of two >= 16); None uses the heuristic.
        block_n: Tokens per loop step (power of two >= 16); None uses the heuristic.
        num_warps: Warps per split program; None uses the heuristic.

    Returns:
        (B, H, R) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes or layouts do not fit together (check_inputs checks the
            seq_lens values against the cache's rows).
    """
    _validate(q, kv_cache, seq_lens, kv_lora_rank, q_pe, k_pe)
    b, h, dq = q.shape
    packed = k_pe is None
    if packed:  # rope columns after the latent ones of the same rows; rows found by seq_lens
        r, p, rows, q_pe, k_pe = kv_lora_rank, dq - kv_lora_rank, kv_cache.shape[0], q, kv_cache
        c_strides = k_strides = (0, kv_cache.stride(0))
    else:
        r, p, rows = dq, q_pe.shape[2], kv_cache.shape[1]
        c_strides, k_strides = kv_cache.stride()[:2], k_pe.stride()[:2]
    out = torch.empty((b, h, r), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else (r + p) ** -0.5
    cfg = _launch_config(b, h, r, rows, q.device)
    splits = num_kv_splits or cfg["num_kv_splits"]
    bh, bn = block_h or cfg["block_h"], block_n or cfg["block_n"]
    block_r = max(16, triton.next_power_of_2(r))
    layout = {"BLOCK_B": min(1024, triton.next_power_of_2(b)), "HAS_LENS": seq_lens is not None,
              "PACKED": packed}  # fmt: skip
    lens = seq_lens if seq_lens is not None else q  # never read without HAS_LENS
    # fp32 workspace; slots of empty splits stay unwritten and unread
    # one allocation; accumulators first, so their base keeps its alignment
    work = torch.empty(b * h * splits * (r + 2), dtype=torch.float32, device=q.device)
    acc_part = work[: b * h * splits * r].view(b, h, splits, r)
    m_part, l_part = work[b * h * splits * r :].view(2, b, h, splits).unbind(0)
    _attention_mla_split_partial_kernel[(b, triton.cdiv(h, bh), splits)](
        q, q_pe, kv_cache, k_pe, m_part, l_part, acc_part, lens,
        h, r, p, r if packed else 0, rows, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), q_pe.stride(0), q_pe.stride(1), *c_strides, *k_strides,
        NUM_SPLITS=splits, BLOCK_H=bh, BLOCK_N=bn, BLOCK_R=block_r,
        BLOCK_P=max(16, triton.next_power_of_2(p)),
        UPCAST=_interpreting() or q.dtype == torch.float32, **layout,
        num_warps=num_warps or cfg["num_warps"], num_stages=2,
    )  # fmt: skip
    _attention_mla_split_merge_kernel[(b, h)](
        m_part, l_part, acc_part, out, lens,
        h, r, rows,
        out.stride(0), out.stride(1),
        NUM_SPLITS=splits, BLOCK_N=bn, BLOCK_R=block_r, **layout, num_warps=4,
    )  # fmt: skip
    return out


def check_inputs(kv_cache: torch.Tensor, seq_lens: torch.Tensor, padded: bool = False) -> None:
    """Raise ValueError if seq_lens do not fit the cache's rows (reads seq_lens: a sync).

    Outside the timed path: the launcher does not read seq_lens on the host; its kernels clip
    such lengths to the cache's rows instead.
    """
    if seq_lens.numel() == 0:
        return
    if int(seq_lens.min()) < 0:
        raise ValueError(f"a seq_len is negative ({int(seq_lens.min())})")
    need, have = (int(seq_lens.max()), kv_cache.shape[1]) if padded else (
        int(seq_lens.sum()), kv_cache.shape[0])  # fmt: skip
    if need > have:
        what = "the longest seq_len" if padded else "sum(seq_lens)"
        raise ValueError(f"{what} ({need}) exceeds the cache's {have} rows")


def reference(q, kv_cache, seq_lens=None, kv_lora_rank=512, softmax_scale=None, *, q_pe=None,
              k_pe=None):  # fmt: skip
    """Per sequence, fp32 softmax against the full [c_kv | k_pe] keys, mixing the latent rows."""
    if k_pe is None:  # packed: sequence i's rows follow those of 0 .. i-1
        bounds = [0, *torch.cumsum(seq_lens, 0).tolist()]
        rows = [kv_cache[s:e, 0] for s, e in zip(bounds[:-1], bounds[1:], strict=True)]
    else:  # padded: join the rope columns back on
        kv_lora_rank, q = q.shape[2], torch.cat([q, q_pe], -1)
        lens = [kv_cache.shape[1]] * q.shape[0] if seq_lens is None else seq_lens.tolist()
        rows = [torch.cat([kv_cache[i, :n], k_pe[i, :n]], -1) for i, n in enumerate(lens)]
    scale = softmax_scale if softmax_scale is not None else q.shape[2] ** -0.5
    out = torch.empty(q.shape[0], q.shape[1], kv_lora_rank, dtype=q.dtype, device=q.device)
    for i, kv in enumerate(rows):
        kv = kv.float()
        p = (q[i].float() @ kv.T * scale).softmax(-1)  # (H, n)
        out[i] = (p @ kv[:, :kv_lora_rank]).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return absorbed MLA decode inputs with N(0, 1) entries.

    ``shape``: ``seq_lens`` (list) or ``batch`` and ``seq_len``, ``num_heads``, ``kv_lora_rank``
    (512), ``rope_dim`` (64) and ``layout``: ``packed`` (default; q (B, H, R + P), kv_cache
    (sum(seq_lens), 1, R + P)) or ``padded`` (q (B, H, R), kv_cache (B, T, R), q_pe, k_pe; the
    cache length T is ``seq_len``, default the longest of ``seq_lens``).
    """
    h, r, p = shape["num_heads"], shape.get("kv_lora_rank", 512), shape.get("rope_dim", 64)
    lens = list(shape["seq_lens"]) if "seq_lens" in shape else [shape["seq_len"]] * shape["batch"]
    q = torch.randn(len(lens), h, r + p, device=device).to(dtype)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    if shape.get("layout", "packed") == "packed":
        kv_cache = torch.randn(sum(lens), 1, r + p, device=device).to(dtype)
        return {"q": q, "kv_cache": kv_cache, "seq_lens": seq_lens, "kv_lora_rank": r}
    kv = torch.randn(len(lens), shape.get("seq_len", max(lens, default=0)), r + p, device=device)
    kv = kv.to(dtype)
    return {
        "q": q[..., :r].contiguous(),
        "kv_cache": kv[..., :r].contiguous(),
        "seq_lens": seq_lens,
        "q_pe": q[..., r:].contiguous(),
        "k_pe": kv[..., r:].contiguous(),
    }
