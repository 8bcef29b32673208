"""
---
id: fused_qk_rmsnorm_head_grid_2d
title: Per-head q/k RMSNorm of packed QKV on a (token tile, head) grid of tokens x head_dim tiles
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp16, bf16, fp32]
bound: memory
techniques: [2d-tile, multi-row-tile, program-per-head, packed-qkv, weight-reuse, weight-after-cast,
  passthrough-copy, fp32-accumulate]
status: reference
launcher: fused_qk_rmsnorm_head_grid_2d
tuning:
  block_t: [16, 1, 4, 8, 32, 64]
  num_warps: [4, 1, 2, 8]
args:
  hidden_states:
    shape: [T, "(head_num + 2 * kv_head_num) * D"]
    dtypes: [fp16, bf16, fp32]
    aliases: [qkv, x]
  q_weight: {shape: [D], like: hidden_states, aliases: [q_norm_weight]}
  k_weight: {shape: [D], like: hidden_states, aliases: [k_norm_weight]}
  head_num: {type: int, aliases: [num_heads, num_q_heads, num_attention_heads]}
  kv_head_num: {type: int, aliases: [num_kv_heads, num_key_value_heads]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: out, shape: [T, "(head_num + 2 * kv_head_num) * D"], dtype: hidden_states}
problem:
  shapes: [{tokens: 7, heads: 5, kv_heads: 1, d: 96}, {tokens: 1, heads: 2, kv_heads: 2, d: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: fused_qk_rmsnorm/0, dtype: fp16, latency_us: 3.68, sol_fraction: 0.7652, date: '2026-12-04'}
---
atrex30 fused_qk_rmsnorm: each token's packed row holds [q heads | k heads | v heads] of D values;
every q and k head is normalised on its own, x * rsqrt(mean(x^2) + eps) in fp32, ROUNDED to the
activation dtype, then multiplied by q_weight or k_weight (one more rounding, as the reference
applies the weight after the cast); v is copied through. The grid is (cdiv(T, BLOCK_T), head_num +
2 kv_head_num): program (i, h) owns head h of tokens i BLOCK_T .. i BLOCK_T + BLOCK_T - 1 as one
(BLOCK_T, next_pow2(D)) tile whose rows are D-element runs one packed-row stride apart; it loads the
head's weight once for BLOCK_T tokens, reduces along axis 1 and stores, or copies the tile for a v
head. It sits between fused_qk_rmsnorm_per_head (one token x one head: tiny programs, the weight
reloaded per token) and fused_qk_rmsnorm_token_tile (one token x all heads: only T programs): the
program count is cdiv(T, BLOCK_T) x (H + 2 HKV), so prefill gets large tiles and decode (BLOCK_T
shrinks to next_pow2(T)) still gets one program per head. Bytes per element: one read, one write
(4 in fp16). Limits: each tile row is a separate 2 D-byte run (strided rows), so small D (64) makes
short bursts; tile up to 2^20 elements.
"""

import torch
import triton
import triton.language as tl

BLOCK_T_DEFAULT = 16


@triton.jit
def _norm_tile(x_ptrs, w, mask, D, eps, OUT_DTYPE: tl.constexpr):
    """Return rmsnorm of a (BLOCK_T, BLOCK_D) tile of heads, cast, then weighted (fp32 out)."""
    x = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
    normed = x * tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)[:, None]
    # cast back first, then the weight multiply in the activation dtype (one more rounding)
    return normed.to(OUT_DTYPE).to(tl.float32) * w[None, :]


@triton.jit
def _fused_qk_rmsnorm_head_grid_2d_kernel(
    # pointers
    x_ptr,
    qw_ptr,
    kw_ptr,
    y_ptr,
    # sizes
    T,
    H,
    HKV,
    D,
    # strides (elements; the last dim is contiguous)
    stride_xt,
    stride_yt,
    # scalars
    eps,
    # meta
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    head = tl.program_id(1)
    offs = tl.arange(0, BLOCK_D)
    mask = (toks < T)[:, None] & (offs < D)[None, :]
    toks64 = toks.to(tl.int64)[:, None]  # int64: toks * stride can pass 2^31 elements
    x_ptrs = x_ptr + toks64 * stride_xt + head * D + offs[None, :]
    y_ptrs = y_ptr + toks64 * stride_yt + head * D + offs[None, :]

    if head < H + HKV:
        if head < H:
            w = tl.load(qw_ptr + offs, mask=offs < D, other=0.0).to(tl.float32)
        else:
            w = tl.load(kw_ptr + offs, mask=offs < D, other=0.0).to(tl.float32)
        y = _norm_tile(x_ptrs, w, mask, D, eps, y_ptr.dtype.element_ty)
        tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:  # a v head: copied unchanged
        tl.store(y_ptrs, tl.load(x_ptrs, mask=mask), mask=mask)


def fused_qk_rmsnorm_head_grid_2d(
    hidden_states: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    head_num: int,
    kv_head_num: int,
    eps: float = 1e-6,
    *,
    block_t: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return hidden_states with every q and k head RMS-normalised and weighted, v unchanged.

    Args:
        hidden_states: (T, (head_num + 2 * kv_head_num) * D) fp16/bf16/fp32, packed [q | k | v].
        q_weight: (D,) same dtype, the q heads' weight.
        k_weight: (D,) same dtype, the k heads' weight.
        head_num: Number of q heads.
        kv_head_num: Number of k heads (and of v heads).
        eps: Added to mean(x^2) before the reciprocal square root.
        block_t: Tokens per program (power of two); None = min(BLOCK_T_DEFAULT, next_pow2(T)).
        num_warps: Warps per program; None picks by tile size.

    Returns:
        out: a new tensor shaped and typed like ``hidden_states``.

    Raises:
        ValueError: The shapes or dtypes do not fit together, or block_t is not a power of two.
    """
    d = q_weight.shape[0] if q_weight.dim() == 1 else -1
    heads = head_num + 2 * kv_head_num
    if hidden_states.dim() != 2 or d < 1 or head_num < 1 or kv_head_num < 0:
        raise ValueError(
            f"need hidden_states (T, W), q_weight (D,), head_num >= 1, kv_head_num >= 0; got "
            f"{tuple(hidden_states.shape)}, {tuple(q_weight.shape)}, {head_num}, {kv_head_num}"
        )
    if hidden_states.shape[1] != heads * d or k_weight.shape != (d,):
        raise ValueError(
            f"hidden_states width {hidden_states.shape[1]} must be (head_num + 2 * kv_head_num) "
            f"* D = {heads} * {d}, and k_weight ({d},); got k_weight {tuple(k_weight.shape)}"
        )
    if not (q_weight.dtype == k_weight.dtype == hidden_states.dtype):
        raise ValueError(
            f"q_weight, k_weight must have hidden_states' dtype {hidden_states.dtype}; "
            f"got {q_weight.dtype}, {k_weight.dtype}"
        )
    if block_t is not None and (block_t < 1 or block_t & (block_t - 1)):
        raise ValueError(f"block_t must be a power of two; got {block_t}")
    x = hidden_states if hidden_states.stride(-1) == 1 else hidden_states.contiguous()
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if y.numel() == 0:
        return y
    t = x.shape[0]
    block_d = triton.next_power_of_2(d)
    bt = min(BLOCK_T_DEFAULT, triton.next_power_of_2(t)) if block_t is None else block_t
    bt = max(1, min(bt, 2**20 // block_d))  # Triton's tile limit
    warps = min(max(bt * block_d // 512, 1), 8) if num_warps is None else num_warps
    _fused_qk_rmsnorm_head_grid_2d_kernel[(triton.cdiv(t, bt), heads)](
        x, q_weight.contiguous(), k_weight.contiguous(), y,
        t, head_num, kv_head_num, d,
        x.stride(0), y.stride(0),
        eps,
        BLOCK_T=bt, BLOCK_D=block_d,
        num_warps=warps,
    )  # fmt: skip
    return y


def reference(
    hidden_states: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    head_num: int,
    kv_head_num: int,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Return the packed row with q/k heads normalised (fp32, cast, then weighted), v copied."""
    t, d = hidden_states.shape[0], q_weight.shape[0]
    q_end, k_end = head_num * d, (head_num + kv_head_num) * d

    def norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)).to(x.dtype) * w

    q = norm(hidden_states[:, :q_end].view(t, head_num, d), q_weight)
    k = norm(hidden_states[:, q_end:k_end].view(t, kv_head_num, d), k_weight)
    return torch.cat([q.flatten(1), k.flatten(1), hidden_states[:, k_end:]], dim=1)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"tokens", "heads", "kv_heads", "d"}`` (N(0, 1), as atrex)."""
    d, heads, kv = shape["d"], shape["heads"], shape["kv_heads"]
    width = (heads + 2 * kv) * d
    return {
        "hidden_states": torch.randn(shape["tokens"], width, device=device).to(dtype),
        "q_weight": torch.randn(d, device=device).to(dtype),
        "k_weight": torch.randn(d, device=device).to(dtype),
        "head_num": heads,
        "kv_head_num": kv,
    }
