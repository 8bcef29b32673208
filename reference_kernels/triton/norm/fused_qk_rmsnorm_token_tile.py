"""
---
id: fused_qk_rmsnorm_token_tile
title: Per-head q/k RMSNorm of a packed QKV row, one program per token over a (heads, D) tile
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp16, bf16, fp32]
bound: memory
techniques: [row-per-program, 2d-block, packed-qkv, weight-reuse, weight-after-cast,
  passthrough-copy]
status: reference
launcher: fused_qk_rmsnorm_token_tile
tuning:
  num_warps: [4, 1, 2, 8]
  block_v: [1024, 256, 4096]
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
  shapes: [{tokens: 3, heads: 5, kv_heads: 1, d: 96}, {tokens: 2, heads: 4, kv_heads: 2, d: 64}]
  dtypes: [bf16, fp16]
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: fused_qk_rmsnorm/0, dtype: fp16, latency_us: 6.784, sol_fraction: 0.4434, date: '2026-12-04'}
---
The q/k norm of Qwen3-style attention (atrex30 fused_qk_rmsnorm) with one program per token. The q
and k heads are adjacent in the packed row [q | k | v], so the program loads them as ONE 2-D tile
(next_pow2(head_num + kv_head_num), next_pow2(D)) with a single contiguous address range, reduces
every head's sum of squares along axis 1 in fp32, normalises, rounds to the activation dtype and
multiplies by q_weight or k_weight (both loaded once per token and selected per tile row), rounding
again, as the reference applies the weight after the cast. The v slice (kv_head_num * D values) is
then copied in BLOCK_V chunks by the same program. Bytes per element: one read and one write (4
bytes in fp16). Against a program per head it issues 1/(H + 2 HKV) as many programs, each with
enough loads in flight to hide latency, which pays at prefill sizes. Limits: decode (T = 1..8)
runs on T programs, so most SMs idle (use fused_qk_rmsnorm_per_head); the tile padding to powers of
two wastes lanes when H + HKV is not one (40 heads pad to 64 rows); tile up to 2^20 elements.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _fused_qk_rmsnorm_token_tile_kernel(
    # pointers
    x_ptr,
    qw_ptr,
    kw_ptr,
    y_ptr,
    # sizes
    H,
    HKV,
    D,
    # strides (elements; the last dim is contiguous)
    stride_xt,
    stride_yt,
    # scalars
    eps,
    # meta
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)  # int64: tok * stride can pass 2^31 elements
    x_row = x_ptr + tok * stride_xt
    y_row = y_ptr + tok * stride_yt
    heads = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    d_mask = d < D
    mask = (heads < H + HKV)[:, None] & d_mask[None, :]
    offs = heads[:, None] * D + d[None, :]  # q and k heads are one contiguous run

    x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)  # (BLOCK_H,), one per head
    # cast back first, then the weight multiply in the activation dtype (one more rounding)
    normed = (x * inv_rms[:, None]).to(y_ptr.dtype.element_ty).to(tl.float32)
    qw = tl.load(qw_ptr + d, mask=d_mask, other=0.0).to(tl.float32)
    kw = tl.load(kw_ptr + d, mask=d_mask, other=0.0).to(tl.float32)
    w = tl.where((heads < H)[:, None], qw[None, :], kw[None, :])
    tl.store(y_row + offs, (normed * w).to(y_ptr.dtype.element_ty), mask=mask)

    # the v slice is copied unchanged
    v_start = (H + HKV) * D
    v_len = HKV * D
    for start in range(0, v_len, BLOCK_V):
        cols = v_start + start + tl.arange(0, BLOCK_V)
        v_mask = cols < v_start + v_len
        tl.store(y_row + cols, tl.load(x_row + cols, mask=v_mask), mask=v_mask)


def fused_qk_rmsnorm_token_tile(
    hidden_states: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    head_num: int,
    kv_head_num: int,
    eps: float = 1e-6,
    *,
    num_warps: int | None = None,
    block_v: int | None = None,
) -> torch.Tensor:
    """Return hidden_states with every q and k head RMS-normalised and weighted, v unchanged.

    Args:
        hidden_states: (T, (head_num + 2 * kv_head_num) * D) fp16/bf16/fp32, packed [q | k | v].
        q_weight: (D,) same dtype, the q heads' weight.
        k_weight: (D,) same dtype, the k heads' weight.
        head_num: Number of q heads.
        kv_head_num: Number of k heads (and of v heads).
        eps: Added to mean(x^2) before the reciprocal square root.
        num_warps: Warps per program; None = 4.
        block_v: Elements of the v copy per loop step (power of two); None = 1024.

    Returns:
        out: a new tensor shaped and typed like ``hidden_states``.

    Raises:
        ValueError: The shapes or dtypes do not fit together, the q/k tile exceeds 2^20
            elements, or block_v is not a power of two.
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
    block_h = triton.next_power_of_2(head_num + kv_head_num)
    block_d = triton.next_power_of_2(d)
    if block_h * block_d > 2**20:
        raise ValueError(f"the q/k tile {block_h} x {block_d} exceeds 2^20 elements")
    block_v = block_v or 1024
    if block_v < 1 or block_v & (block_v - 1):
        raise ValueError(f"block_v must be a power of two; got {block_v}")
    x = hidden_states if hidden_states.stride(-1) == 1 else hidden_states.contiguous()
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if y.numel() == 0:
        return y
    _fused_qk_rmsnorm_token_tile_kernel[(x.shape[0],)](
        x, q_weight.contiguous(), k_weight.contiguous(), y,
        head_num, kv_head_num, d,
        x.stride(0), y.stride(0),
        eps,
        BLOCK_H=block_h, BLOCK_D=block_d, BLOCK_V=block_v,
        num_warps=num_warps or 4,
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
