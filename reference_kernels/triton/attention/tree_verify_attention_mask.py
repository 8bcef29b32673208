"""
---
id: tree_verify_attention_mask
title: Tree speculative-decoding verify attention, draft queries vs dense cache plus a bitmask tile
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [tree-attention, speculative-verify, bitmask, multi-query-tile, online-softmax, gqa]
status: reference
launcher: tree_verify_attention_mask
tuning:
  block_n: [64, 16, 32, 128]
  num_warps: [4, 2, 8]
args:
  q: {shape: [B, K, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k_cache: {shape: [B, T, HKV, D], like: q, aliases: [k, key_cache]}
  v_cache: {shape: [B, T, HKV, D], like: q, aliases: [v, value_cache]}
  prefix_lens: {shape: [B], dtypes: [int32], aliases: [context_lens, seq_lens]}
  tree_mask: {shape: [B, K], dtypes: [int64], aliases: [custom_mask, tree_bitmask]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale]}
returns:
  - {name: out, shape: [B, K, HQ, D], dtype: q}
problem:
  shapes: [{batch: 2, drafts: 7, prefix: [37, 0], num_heads_q: 4, num_heads_kv: 2, head_dim: 40}, {batch: 1, drafts: 64, prefix: 5, num_heads_q: 1, num_heads_kv: 1, head_dim: 16}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
Verification step of tree speculative decoding (Medusa, EAGLE, SpecInfer): each sequence has K
draft tokens arranged in a tree, written to the dense cache right after its accepted prefix
(slots prefix_len .. prefix_len + K - 1). Draft i attends to every prefix token and to the drafts
j whose bit j is set in tree_mask[b, i] (its ancestors and itself). One program owns one
(batch, query head) and holds the K draft queries as the rows of a tensor-core tile (padded to
16): the prefix phase streams BLOCK_N keys per step with no mask beyond the length, so the prefix
K/V is read once for all K drafts instead of K times; the tree phase is one extra (K x K) score
tile whose visibility comes from shifting each row's 64-bit mask word, so the mask costs 8 bytes
per draft instead of a K x K boolean matrix. Softmax is online across both phases (fp32).
Limits: K <= 64 (one int64 word per row); GQA heads of one group re-read the same K/V (from L2);
no split over the prefix, so few sequences with long prefixes under-fill the GPU; prefix_len + K
must fit the cache length T: the kernel clips a longer prefix to T - K (the launcher reads no
length on the host; check_inputs raises for it, with a sync, outside the launch).
"""

import os

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr):
    """Return acc + a @ b with an fp32 accumulator (exact fp32 operands under the interpreter)."""
    if UPCAST:
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(a.to(b.dtype), b, acc)
    return acc


@triton.jit
def _tree_verify_attention_mask_kernel(
    # pointers
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    prefix_lens_ptr,
    mask_ptr,
    # sizes and scalars
    num_drafts,
    max_prefix,  # T - K: a longer prefix_len is clipped (no read past the cache)
    head_dim,
    scale_log2e,
    # strides (elements; head_dim contiguous)
    stride_qb,
    stride_qk,
    stride_qh,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_vb,
    stride_vt,
    stride_vh,
    stride_ob,
    stride_ok,
    stride_oh,
    stride_mb,
    # meta
    GROUP_SIZE: tl.constexpr,
    BLOCK_K: tl.constexpr,  # drafts padded to a power of two >= 16
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    batch = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    kv_head = head // GROUP_SIZE
    prefix_len = tl.minimum(tl.load(prefix_lens_ptr + batch), max_prefix)
    offs_k = tl.arange(0, BLOCK_K)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_k = offs_k < num_drafts
    mask_d = offs_d < head_dim
    q = tl.load(q_ptr + batch * stride_qb + offs_k[:, None] * stride_qk + head * stride_qh
                + offs_d[None, :], mask=mask_k[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    k_seq = k_ptr + batch * stride_kb + kv_head * stride_kh
    v_seq = v_ptr + batch * stride_vb + kv_head * stride_vh

    m_i = tl.full([BLOCK_K], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_K], tl.float32)
    acc = tl.zeros([BLOCK_K, BLOCK_D], tl.float32)
    # phase 1: the accepted prefix, visible to every draft (read once for all K rows)
    for n_start in range(0, prefix_len, BLOCK_N):
        tok = n_start + offs_n
        mask_n = tok < prefix_len
        k_t = tl.load(k_seq + tok[None, :] * stride_kt + offs_d[:, None],
                      mask=mask_d[:, None] & mask_n[None, :], other=0.0)  # fmt: skip
        s = _mma(q, k_t, tl.zeros([BLOCK_K, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_seq + tok[:, None] * stride_vt + offs_d[None, :],
                    mask=mask_n[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new

    # phase 2: the drafts themselves, one (K x K) tile masked by each row's bit word
    tok = prefix_len + offs_k
    bits = tl.load(mask_ptr + batch * stride_mb + offs_k, mask=mask_k, other=0)
    shift = offs_k.to(tl.int64)
    visible = (((bits[:, None] >> shift[None, :]) & 1) != 0) & mask_k[None, :]
    k_t = tl.load(k_seq + tok[None, :] * stride_kt + offs_d[:, None],
                  mask=mask_d[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
    s = _mma(q, k_t, tl.zeros([BLOCK_K, BLOCK_K], tl.float32), UPCAST) * scale_log2e
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that sees nothing stays 0
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = tl.load(v_seq + tok[:, None] * stride_vt + offs_d[None, :],
                mask=mask_k[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    acc = _mma(p, v, acc * alpha[:, None], UPCAST)

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(out_ptr + batch * stride_ob + offs_k[:, None] * stride_ok + head * stride_oh
             + offs_d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=mask_k[:, None] & mask_d[None, :])  # fmt: skip


def _validate(q, k_cache, v_cache, prefix_lens, tree_mask) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)},"
              f" prefix_lens {tuple(prefix_lens.shape)},"
              f" tree_mask {tuple(tree_mask.shape)}")  # fmt: skip
    if q.dim() != 4 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"need q (B, K, HQ, D) and k_cache, v_cache (B, T, HKV, D); got {shapes}")
    b, kd, hq, d = q.shape
    if k_cache.shape[0] != b or k_cache.shape[3] != d or hq % k_cache.shape[2]:
        raise ValueError(f"batch, head_dim or head counts (HQ % HKV == 0) disagree: {shapes}")
    if prefix_lens.shape != (b,) or prefix_lens.dtype != torch.int32:
        raise ValueError(f"prefix_lens must be int32 of shape (B,) = ({b},); got {shapes}")
    if tree_mask.shape != (b, kd) or tree_mask.dtype != torch.int64:
        raise ValueError(f"tree_mask must be int64 of shape (B, K) = ({b}, {kd}); got {shapes}")
    if kd > 64 or d > 256:
        raise ValueError(f"need K <= 64 drafts (one int64 mask word) and head_dim <= 256: {shapes}")
    if kd > k_cache.shape[1]:
        raise ValueError(f"K drafts exceed the cache length T: {shapes}")
    if not (q.dtype == k_cache.dtype == v_cache.dtype):
        raise ValueError(f"q, k_cache, v_cache need one dtype; got {q.dtype}, {k_cache.dtype}")
    if any(t.stride(-1) != 1 for t in (q, k_cache, v_cache)):
        raise ValueError("q, k_cache, v_cache need a contiguous last (head_dim) axis")


def tree_verify_attention_mask(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    prefix_lens: torch.Tensor,
    tree_mask: torch.Tensor,
    softmax_scale: float | None = None,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return each draft's attention over the prefix and its tree-visible drafts.

    Args:
        q: (B, K, HQ, D) draft queries, bf16/fp16/fp32, last axis contiguous.
        k_cache: (B, T, HKV, D) keys: prefix at 0..P-1, drafts at P..P+K-1 (P = prefix_lens[b]).
        v_cache: (B, T, HKV, D) values, same layout.
        prefix_lens: (B,) int32 accepted prefix lengths.
        tree_mask: (B, K) int64; bit j of tree_mask[b, i] lets draft i see draft j.
        softmax_scale: Score scale; None means 1/sqrt(D).
        block_n: Prefix keys per loop step (power of two >= 16); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        (B, K, HQ, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes or layouts do not fit together (check_inputs checks the
            prefix_lens values against T).
    """
    _validate(q, k_cache, v_cache, prefix_lens, tree_mask)
    b, kd, hq, d = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if out.numel() == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    kc, vc, tm = k_cache, v_cache, tree_mask.contiguous()
    _tree_verify_attention_mask_kernel[(b, hq)](
        q, kc, vc, out, prefix_lens, tm,
        kd, kc.shape[1] - kd, d, scale * LOG2E,
        q.stride(0), q.stride(1), q.stride(2),
        kc.stride(0), kc.stride(1), kc.stride(2),
        vc.stride(0), vc.stride(1), vc.stride(2),
        out.stride(0), out.stride(1), out.stride(2), tm.stride(0),
        GROUP_SIZE=hq // kc.shape[2], BLOCK_K=max(16, triton.next_power_of_2(kd)),
        BLOCK_N=block_n or 64, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=num_warps or 4,
    )  # fmt: skip
    return out


def check_inputs(q: torch.Tensor, k_cache: torch.Tensor, prefix_lens: torch.Tensor) -> None:
    """Raise ValueError if prefix_lens + K exceeds the cache length T (reads prefix_lens: a sync).

    Outside the timed path: the launcher does not read prefix_lens on the host; its kernel clips
    such a prefix to T - K instead.
    """
    kd, t = q.shape[1], k_cache.shape[1]
    if prefix_lens.numel() and int(prefix_lens.max()) + kd > t:
        raise ValueError(f"prefix_lens + K ({int(prefix_lens.max())} + {kd}) exceeds the cache "
                         f"length T = {t}")  # fmt: skip


def reference(q, k_cache, v_cache, prefix_lens, tree_mask, softmax_scale=None):
    """Build each sequence's boolean (K, P + K) mask and run masked attention in fp32."""
    b, kd, hq, d = q.shape
    group = hq // k_cache.shape[2]
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    bit = torch.arange(kd, device=q.device)
    out = torch.zeros_like(q, memory_format=torch.contiguous_format)
    for i in range(b):
        p = int(prefix_lens[i])
        tree = ((tree_mask[i][:, None] >> bit[None, :]) & 1).bool()  # (K, K)
        vis = torch.cat([torch.ones(kd, p, dtype=torch.bool, device=q.device), tree], dim=1)
        ks = k_cache[i, : p + kd].float().repeat_interleave(group, dim=1)  # (P + K, HQ, D)
        vs = v_cache[i, : p + kd].float().repeat_interleave(group, dim=1)
        s = torch.einsum("khd,nhd->hkn", q[i].float(), ks) * scale
        w = s.masked_fill(~vis, float("-inf")).softmax(-1).nan_to_num(0.0)
        out[i] = torch.einsum("hkn,nhd->khd", w, vs).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return draft queries, a cache holding prefix + drafts, and a random tree's ancestor masks.

    ``shape``: ``batch``, ``drafts`` (K), ``prefix`` (list of B lengths or one int),
    ``num_heads_q``, ``num_heads_kv``, ``head_dim``. Draft i's parent is a random earlier draft
    (draft 0's parent is the prefix); each mask word holds the ancestors and the draft itself.
    """
    b, kd = shape["batch"], shape["drafts"]
    hq, hkv, d = shape["num_heads_q"], shape["num_heads_kv"], shape["head_dim"]
    prefix = shape["prefix"] if isinstance(shape["prefix"], list) else [shape["prefix"]] * b
    t = max(prefix) + kd
    masks = torch.zeros(b, kd, dtype=torch.int64)
    for i in range(b):
        for j in range(kd):
            parent = int(torch.randint(0, j, ()).item()) if j else -1
            word = (1 << j) | ((int(masks[i, parent]) & (2**64 - 1)) if parent >= 0 else 0)
            masks[i, j] = word - 2**64 if word >= 2**63 else word  # bit 63 is the sign bit
    return {
        "q": torch.randn(b, kd, hq, d, device=device).to(dtype),
        "k_cache": torch.randn(b, t, hkv, d, device=device).to(dtype),
        "v_cache": torch.randn(b, t, hkv, d, device=device).to(dtype),
        "prefix_lens": torch.tensor(prefix, dtype=torch.int32, device=device),
        "tree_mask": masks.to(device),
    }
