"""
---
id: flash_attention_causal_dense
title: Causal flash attention on dense (B, H, S, D), bottom-right diagonal, upper tiles skipped
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [online-softmax, causal-tile-skip, mask-peeling, bottom-right-causal, gqa-head-map,
  exp2-softmax, fp32-accumulate]
status: reference
launcher: flash_attention_causal_dense
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [64, 16, 32, 128]
  num_warps: [4, 2, 8]
  num_stages: [2, 1, 3]
args:
  q: {shape: [B, H, SQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [B, HKV, SK, D], like: q, aliases: [key]}
  v: {shape: [B, HKV, SK, D], like: q, aliases: [value]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [B, H, SQ, D], dtype: q}
problem:
  shapes: [{batch: 2, heads: 4, kv_heads: 2, sq: 24, sk: 40, d: 32}, {batch: 1, heads: 2, kv_heads: 2, sq: 33, sk: 33, d: 40}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
Causal attention forward for the dense, padded (batch, heads, seq, head_dim) layout of
torch's scaled_dot_product_attention, with SQ <= SK and the diagonal aligned bottom-right: query i
sees keys j <= i + (SK - SQ), so the SQ queries are the last SQ positions of the SK-token context
(a prefill chunk or a speculative-decoding verify step over a cache; SQ = SK is ordinary causal
prefill). Grouped-query attention maps query head h to KV head h // (H / HKV). Program (query
block, batch x head) splits its key loop in two: the keys every row of the block sees (below the
block's first diagonal position, rounded down to a key tile) run with no causal or bounds mask;
then the one or two tiles crossing the diagonal run with the per-element mask; tiles wholly above
the diagonal are never visited, halving the FLOPs of square causal attention (2*B*H*SQ*SK*D
when SQ << SK). Online softmax in the exp2 domain with fp32 running max, denominator and
accumulator. Bytes: Q and O once, K and V once per query block (from L2 across the heads of a
group). Limits: head_dim <= 256; no longest-block-first ordering (the causal load imbalance shows
as a tail on small grids); no split over keys, so B * H * cdiv(SQ, BLOCK_M) programs must fill
the GPU; top-left alignment (SQ > SK) is not supported.
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
        # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(a.to(b.dtype), b, acc)  # GPU: tensor cores on the storage dtype
    return acc


@triton.jit
def _attend_tile(q, k_base, v_base, n_start, offs_m, acc, m_i, l_i, SK, causal_shift, scale_log2e,
                 stride_kn, stride_vn, offs_n, offs_d, mask_d,
                 MASKED: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """One key tile of the online softmax; MASKED applies the causal and key-bound masks."""
    keys = n_start + offs_n
    if MASKED:  # noqa: SIM108 (a constexpr branch: only one side is compiled)
        mask_n = keys < SK
    else:
        mask_n = offs_n >= 0  # all true: the tile lies inside the sequence
    k_t = tl.load(k_base + keys[None, :].to(tl.int64) * stride_kn + offs_d[:, None],
                  mask=mask_d[:, None] & mask_n[None, :], other=0.0)  # fmt: skip
    s = _mma(q, k_t, tl.zeros([q.shape[0], k_t.shape[1]], tl.float32), UPCAST) * scale_log2e
    if MASKED:
        visible = (keys[None, :] <= offs_m[:, None] + causal_shift) & mask_n[None, :]
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: every row sees key 0
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = tl.load(v_base + keys[:, None].to(tl.int64) * stride_vn + offs_d[None, :],
                mask=mask_n[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    acc = _mma(p, v, acc * alpha[:, None], UPCAST)
    return acc, m_new, l_i


@triton.jit
def _flash_attention_causal_dense_kernel(
    # pointers
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    # sizes and scalars
    H,
    SQ,
    SK,
    head_dim,
    scale_log2e,  # softmax scale * log2(e): scores go through exp2
    # strides (elements; head_dim contiguous)
    stride_qb,
    stride_qh,
    stride_qm,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_ob,
    stride_oh,
    stride_om,
    # meta
    GROUP_SIZE: tl.constexpr,  # query heads per KV head
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_m = tl.program_id(0)
    batch = tl.program_id(1) // H
    head = tl.program_id(1) % H
    kv_head = head // GROUP_SIZE
    causal_shift = SK - SQ  # bottom-right alignment: query i sees keys <= i + shift

    q_start = pid_m * BLOCK_M
    offs_m = q_start + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < SQ
    mask_d = offs_d < head_dim

    q_base = q_ptr + batch.to(tl.int64) * stride_qb + head * stride_qh
    q = tl.load(q_base + offs_m[:, None].to(tl.int64) * stride_qm + offs_d[None, :],
                mask=mask_m[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    k_base = k_ptr + batch.to(tl.int64) * stride_kb + kv_head * stride_kh
    v_base = v_ptr + batch.to(tl.int64) * stride_vb + kv_head * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # phase 1: key tiles every row of the block sees whole, no masks
    full_end = ((q_start + causal_shift + 1) // BLOCK_N) * BLOCK_N
    for n_start in range(0, full_end, BLOCK_N):
        acc, m_i, l_i = _attend_tile(q, k_base, v_base, n_start, offs_m, acc, m_i, l_i, SK,
                                     causal_shift, scale_log2e, stride_kn, stride_vn, offs_n,
                                     offs_d, mask_d, MASKED=False, UPCAST=UPCAST)  # fmt: skip
    # phase 2: the tiles crossing the diagonal; the tiles above it are skipped
    diag_end = tl.minimum(SK, q_start + BLOCK_M + causal_shift)
    for n_start in range(full_end, diag_end, BLOCK_N):
        acc, m_i, l_i = _attend_tile(q, k_base, v_base, n_start, offs_m, acc, m_i, l_i, SK,
                                     causal_shift, scale_log2e, stride_kn, stride_vn, offs_n,
                                     offs_d, mask_d, MASKED=True, UPCAST=UPCAST)  # fmt: skip

    out = acc / l_i[:, None]
    o_base = out_ptr + batch.to(tl.int64) * stride_ob + head * stride_oh
    tl.store(o_base + offs_m[:, None].to(tl.int64) * stride_om + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])  # fmt: skip


def _launch_config(head_dim: int) -> dict[str, int]:
    """Return tiles, warps and stages: 64x64 tiles, narrower key tiles for wide heads."""
    if head_dim > 128:
        return {"block_m": 64, "block_n": 32, "num_warps": 4, "num_stages": 2}
    return {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2}


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise ValueError when the shapes, dtypes or layouts do not fit."""
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(
            f"need q (B, H, SQ, D) and k, v (B, HKV, SK, D); got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    b, h, sq, d = q.shape
    if k.shape[0] != b or k.shape[3] != d or k.shape[1] == 0 or h % k.shape[1]:
        raise ValueError(
            f"k {tuple(k.shape)} must share q's batch and head_dim, with HKV dividing H = {h}"
        )
    if sq > k.shape[2]:
        raise ValueError(f"SQ = {sq} > SK = {k.shape[2]}: queries must be the context's last ones")
    if d > 256:
        raise ValueError(f"head_dim {d} > 256 does not fit in registers")
    if (
        q.dtype not in (torch.bfloat16, torch.float16, torch.float32)
        or k.dtype != q.dtype
        or (v.dtype != q.dtype)
    ):
        raise ValueError(f"need one bf16/fp16/fp32 dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("q, k and v need a contiguous last (head_dim) dimension")


def flash_attention_causal_dense(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return causal softmax(q k^T * scale) v with the diagonal aligned bottom-right.

    Args:
        q: (B, H, SQ, D) bf16/fp16/fp32, head_dim contiguous.
        k: (B, HKV, SK, D) same dtype, SK >= SQ, HKV dividing H.
        v: (B, HKV, SK, D) same dtype.
        softmax_scale: Score scale; None = 1 / sqrt(D).
        block_m: Query rows per program (power of two >= 16); None = 64.
        block_n: Keys per step (power of two >= 16); None picks by head_dim.
        num_warps: Warps per program; None = 4.
        num_stages: Software-pipelining depth on the GPU; None = 2.

    Returns:
        out: (B, H, SQ, D) in q's dtype, contiguous.

    Raises:
        ValueError: The shapes, dtypes or layouts do not fit.
    """
    _check(q, k, v)
    b, h, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    out = torch.empty((b, h, sq, d), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    cfg = _launch_config(d)
    given = {"block_m": block_m, "block_n": block_n, "num_warps": num_warps,
             "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(sq, cfg["block_m"]), b * h)
    _flash_attention_causal_dense_kernel[grid](
        q, k, v, out,
        h, sq, sk, d, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        GROUP_SIZE=h // hkv,
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        BLOCK_D=max(16, triton.next_power_of_2(d)), UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return out


def reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float | None = None
) -> torch.Tensor:
    """Return bottom-right causal attention computed in fp32, cast to q's dtype."""
    group = q.shape[1] // k.shape[1]
    sq, sk = q.shape[2], k.shape[2]
    visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(diagonal=sk - sq)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.float(),
        k.float().repeat_interleave(group, dim=1),
        v.float().repeat_interleave(group, dim=1),
        attn_mask=visible,
        scale=softmax_scale,
    )
    return out.to(q.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"q", "k", "v"}`` ~ N(0, 1) for ``{batch, heads, kv_heads, sq, sk, d}``."""
    b, h, hkv = shape["batch"], shape["heads"], shape["kv_heads"]
    sq, sk, d = shape["sq"], shape["sk"], shape["d"]
    return {
        "q": torch.randn(b, h, sq, d, device=device).to(dtype),
        "k": torch.randn(b, hkv, sk, d, device=device).to(dtype),
        "v": torch.randn(b, hkv, sk, d, device=device).to(dtype),
    }
