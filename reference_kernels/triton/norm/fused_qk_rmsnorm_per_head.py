"""
---
id: fused_qk_rmsnorm_per_head
title: Per-head q/k RMSNorm of a packed QKV row, one program per (token, head), v copied
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp16, bf16, fp32]
bound: memory
techniques: [program-per-head, packed-qkv, weight-after-cast, passthrough-copy, fp32-accumulate]
status: reference
launcher: fused_qk_rmsnorm_per_head
tuning:
  num_warps: [1, 2, 4]
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
  - {device: NVIDIA H200, shape: fused_qk_rmsnorm/0, dtype: fp16, latency_us: 3.904, sol_fraction: 0.7295, date: '2026-12-04'}
---
The q/k norm of Qwen3-style attention (atrex30 fused_qk_rmsnorm): each token's packed row holds
[q heads | k heads | v heads] of D values each; every q and k head is normalised on its own,
x * rsqrt(mean(x^2) + eps) in fp32, ROUNDED to the activation dtype, and only then multiplied by its
weight (q_weight or k_weight) with one more rounding, as the reference applies the weight after the
cast; v is copied through. The grid is (T, head_num + 2 * kv_head_num): program (t, h) owns one
head of one token, a D-element vector (64..256) in registers: q and k programs reduce and scale,
v programs copy. Every head is independent, so a decode step of one token still yields H + 2 HKV
programs (48 for 32 + 2 x 8). Bytes per element: one read and one write (4 bytes in fp16), the
weights from L1/L2. Limits: programs are tiny (one head), so per-program overhead shows at large
T (fused_qk_rmsnorm_token_tile amortises it over a token); D up to 65536.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _fused_qk_rmsnorm_per_head_kernel(
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
    BLOCK_D: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)  # int64: tok * stride can pass 2^31 elements
    head = tl.program_id(1)
    offs = tl.arange(0, BLOCK_D)
    mask = offs < D
    x_head = x_ptr + tok * stride_xt + head * D
    y_head = y_ptr + tok * stride_yt + head * D

    if head < H + HKV:
        x = tl.load(x_head + offs, mask=mask, other=0.0).to(tl.float32)
        if head < H:
            w = tl.load(qw_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        else:
            w = tl.load(kw_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        normed = x * tl.rsqrt(tl.sum(x * x, axis=0) / D + eps)
        # cast back first, then the weight multiply in the activation dtype (one more rounding)
        normed = normed.to(y_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_head + offs, (normed * w).to(y_ptr.dtype.element_ty), mask=mask)
    else:  # a v head: copied unchanged
        tl.store(y_head + offs, tl.load(x_head + offs, mask=mask), mask=mask)


def fused_qk_rmsnorm_per_head(
    hidden_states: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    head_num: int,
    kv_head_num: int,
    eps: float = 1e-6,
    *,
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
        num_warps: Warps per program; None = 1 for D <= 256, else more.

    Returns:
        out: a new tensor shaped and typed like ``hidden_states``.

    Raises:
        ValueError: The shapes or dtypes do not fit together.
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
    x = hidden_states if hidden_states.stride(-1) == 1 else hidden_states.contiguous()
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if y.numel() == 0:
        return y
    block_d = triton.next_power_of_2(d)
    _fused_qk_rmsnorm_per_head_kernel[(x.shape[0], heads)](
        x, q_weight.contiguous(), k_weight.contiguous(), y,
        head_num, kv_head_num, d,
        x.stride(0), y.stride(0),
        eps,
        BLOCK_D=block_d,
        num_warps=num_warps or min(max(block_d // 256, 1), 8),
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
