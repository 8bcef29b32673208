"""
---
id: merge_attention_states_lse
title: Merge two partial attention outputs by their log-sum-exps, one program per (token, head)
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [lse-merge, cascade-attention, split-kv-combine, row-per-program, fp32-accumulate]
status: reference
launcher: merge_attention_states_lse
tuning:
  num_warps: [1, 2, 4]
args:
  prefix_output: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], aliases: [v_a, output_a]}
  prefix_lse: {shape: [H, T], dtypes: [fp32], layout: any, aliases: [s_a, lse_a]}
  suffix_output: {shape: [T, H, D], like: prefix_output, aliases: [v_b, output_b]}
  suffix_lse: {shape: [H, T], dtypes: [fp32], layout: any, aliases: [s_b, lse_b]}
returns:
  - {name: output, shape: [T, H, D], dtype: prefix_output}
  - {name: output_lse, shape: [H, T], dtype: fp32}
problem:
  shapes: [{tokens: 5, heads: 3, head_dim: 40}, {tokens: 2, heads: 3, head_dim: 8}]
  dtypes: [fp32]
measured: []
---
Combines two attention results over disjoint key sets (a shared-prefix pass and a per-request
suffix pass in cascade attention, or two KV splits) into the attention over their union: with
m = max(lse_a, lse_b), w_a = exp(lse_a - m), w_b = exp(lse_b - m), out = (w_a o_a + w_b o_b) /
(w_a + w_b) and lse = m + log(w_a + w_b). The lse layout is (H, T) as flash-attention returns it.
One program owns one (token, head): two scalar lse loads, two D-vector loads, one D-vector store
and one scalar store, fp32 math. Bytes per element of D: two reads and one write (6 B in bf16), so
the kernel is purely bandwidth-bound; it wins over a torch expression chain (five kernels, three
temporaries) by reading each input once. An lse of +inf (the convention for an empty split in some
kernels) is treated as -inf; when both sides are empty the output is zeros and its lse -inf.
Limits: head_dim <= 4096 per program; T x H programs, each tiny, so H x D below ~256 elements
leaves warps idle (use num_warps 1).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _merge_attention_states_lse_kernel(
    # pointers
    out_ptr,
    out_lse_ptr,
    a_ptr,
    a_lse_ptr,
    b_ptr,
    b_lse_ptr,
    # sizes
    head_dim,
    # strides (elements; head_dim contiguous)
    stride_ot,
    stride_oh,
    stride_at,
    stride_ah,
    stride_bt,
    stride_bh,
    stride_alh,
    stride_alt,
    stride_blh,
    stride_blt,
    stride_olh,
    # meta
    BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    lse_a = tl.load(a_lse_ptr + head * stride_alh + token * stride_alt)
    lse_b = tl.load(b_lse_ptr + head * stride_blh + token * stride_blt)
    lse_a = tl.where(lse_a == float("inf"), float("-inf"), lse_a)  # +inf marks an empty split
    lse_b = tl.where(lse_b == float("inf"), float("-inf"), lse_b)
    m = tl.maximum(lse_a, lse_b)
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # both empty: weights 0, no NaN
    w_a = tl.exp(lse_a - m_safe)
    w_b = tl.exp(lse_b - m_safe)
    total = w_a + w_b
    inv = tl.where(total > 0.0, 1.0 / tl.where(total > 0.0, total, 1.0), 0.0)

    offs = tl.arange(0, BLOCK_D)
    mask = offs < head_dim
    o_a = tl.load(a_ptr + token * stride_at + head * stride_ah + offs, mask=mask, other=0.0)
    o_b = tl.load(b_ptr + token * stride_bt + head * stride_bh + offs, mask=mask, other=0.0)
    out = o_a.to(tl.float32) * (w_a * inv) + o_b.to(tl.float32) * (w_b * inv)
    tl.store(out_ptr + token * stride_ot + head * stride_oh + offs,
             out.to(out_ptr.dtype.element_ty), mask=mask)  # fmt: skip
    lse = m_safe + tl.log(tl.where(total > 0.0, total, 1.0))
    tl.store(out_lse_ptr + head * stride_olh + token, tl.where(total > 0.0, lse, float("-inf")))


def merge_attention_states_lse(
    prefix_output: torch.Tensor,
    prefix_lse: torch.Tensor,
    suffix_output: torch.Tensor,
    suffix_lse: torch.Tensor,
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the attention over the union of two key sets from the two partial results.

    Args:
        prefix_output: (T, H, D) bf16/fp16/fp32, last axis contiguous.
        prefix_lse: (H, T) fp32 natural-log sum-exp of the prefix scores (any strides).
        suffix_output: (T, H, D), same dtype as prefix_output.
        suffix_lse: (H, T) fp32.
        num_warps: Warps per program; None = 1 (D <= 256) or 4.

    Returns:
        ``(output, output_lse)``: (T, H, D) in the outputs' dtype and (H, T) fp32.

    Raises:
        ValueError: Shapes, dtypes or layouts do not fit together.
    """
    shapes = (f"prefix_output {tuple(prefix_output.shape)}, prefix_lse {tuple(prefix_lse.shape)},"
              f" suffix_output {tuple(suffix_output.shape)},"
              f" suffix_lse {tuple(suffix_lse.shape)}")  # fmt: skip
    if prefix_output.dim() != 3 or suffix_output.shape != prefix_output.shape:
        raise ValueError(
            f"need prefix_output and suffix_output of one (T, H, D) shape; got {shapes}"
        )
    t, h, d = prefix_output.shape
    if prefix_lse.shape != (h, t) or suffix_lse.shape != (h, t):
        raise ValueError(
            f"need prefix_lse and suffix_lse of shape (H, T) = ({h}, {t}); got {shapes}"
        )
    if prefix_lse.dtype != torch.float32 or suffix_lse.dtype != torch.float32:
        raise ValueError(f"lse tensors must be fp32; got {prefix_lse.dtype}, {suffix_lse.dtype}")
    if suffix_output.dtype != prefix_output.dtype or d > 4096:
        raise ValueError(f"outputs need one dtype and head_dim <= 4096; got {shapes}")
    if prefix_output.stride(-1) != 1 or suffix_output.stride(-1) != 1:
        raise ValueError("prefix_output and suffix_output need a contiguous last (head_dim) axis")
    out = torch.empty_like(prefix_output, memory_format=torch.contiguous_format)
    out_lse = torch.empty((h, t), dtype=torch.float32, device=out.device)
    if out.numel() == 0:
        return out, out_lse
    a, b = prefix_output, suffix_output
    _merge_attention_states_lse_kernel[(t, h)](
        out, out_lse, a, prefix_lse, b, suffix_lse,
        d,
        out.stride(0), out.stride(1), a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        prefix_lse.stride(0), prefix_lse.stride(1), suffix_lse.stride(0), suffix_lse.stride(1),
        out_lse.stride(0),
        BLOCK_D=triton.next_power_of_2(d), num_warps=num_warps or (1 if d <= 256 else 4),
    )  # fmt: skip
    return out, out_lse


def reference(prefix_output, prefix_lse, suffix_output, suffix_lse):
    """Merge in fp32 with torch ops (same +inf and both-empty conventions)."""
    inf = float("inf")
    la = prefix_lse.float().masked_fill(prefix_lse == inf, -inf).t()[..., None]  # (T, H, 1)
    lb = suffix_lse.float().masked_fill(suffix_lse == inf, -inf).t()[..., None]
    m = torch.maximum(la, lb)
    m = m.masked_fill(m == -inf, 0.0)
    wa, wb = torch.exp(la - m), torch.exp(lb - m)
    total = wa + wb
    inv = torch.where(total > 0, 1.0 / total, torch.zeros_like(total))
    out = prefix_output.float() * (wa * inv) + suffix_output.float() * (wb * inv)
    return out.to(prefix_output.dtype), (m + torch.log(total))[..., 0].t().contiguous()


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return two partial outputs ~N(0, 1) and lse ~ 3 + 2 N(0, 1) (realistic log-sum-exps).

    ``shape``: ``tokens``, ``heads``, ``head_dim``.
    """
    t, h, d = shape["tokens"], shape["heads"], shape["head_dim"]
    return {
        "prefix_output": torch.randn(t, h, d, device=device).to(dtype),
        "prefix_lse": 3 + 2 * torch.randn(h, t, device=device),
        "suffix_output": torch.randn(t, h, d, device=device).to(dtype),
        "suffix_lse": 3 + 2 * torch.randn(h, t, device=device),
    }
