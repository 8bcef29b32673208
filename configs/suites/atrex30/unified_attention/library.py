"""unified_attention via F.scaled_dot_product_attention, causal GQA (flash backend on the GPU).

The library baseline: keys and values are gathered from the paged cache through the block table
in bf16, then causal SDPA with ``enable_gqa`` (no repeat of the KV heads, no fp32 upcast, no
query chunking), which PyTorch runs with its FlashAttention kernel on the GPU (fp32 softmax and
accumulation, probabilities rounded to bf16 for the PV product) and its math or CPU flash kernel
on the CPU: about 1e-3 relative from the reference's fp32 computation, inside bf16's tolerance.
When every sequence has the same query and key length (every upstream shape) all sequences are
one batched call; otherwise one call per sequence. Queries shorter than their keys are aligned
to the end of the keys with an explicit mask, as in the reference (is_causal when equal).
"""

import math

import torch
import torch.nn.functional as F


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """bf16 (S, HQ, Lq, D) x (S, HKV, Lk, D) causal attention, queries aligned to the keys' end."""
    q_len, kv_len = q.shape[2], k.shape[2]
    mask, causal = None, q_len == kv_len
    if not causal:
        rows = torch.arange(kv_len - q_len, kv_len, device=q.device).unsqueeze(1)
        mask = torch.arange(kv_len, device=q.device).unsqueeze(0) <= rows
    return F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        is_causal=causal,
        scale=1.0 / math.sqrt(q.shape[-1]),
        enable_gqa=q.shape[1] != k.shape[1],
    )


class Model(torch.nn.Module):
    """Paged varlen causal attention by SDPA (no parameters)."""

    def forward(self, q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table):
        """Attend each sequence's queries to its paged keys/values."""
        block_size, heads, dim = k_cache.shape[1], q.shape[1], q.shape[2]
        starts, kv_lens = cu_seqlens_q.tolist(), seqused_k.tolist()
        q_lens = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        uniform = len(set(q_lens)) == 1 and len(set(kv_lens)) == 1 and q_lens[0] > 0
        if uniform and starts[0] == 0 and starts[-1] == q.shape[0]:
            num_seqs, q_len, kv_len = len(q_lens), q_lens[0], kv_lens[0]
            blocks = block_table[:, : (kv_len + block_size - 1) // block_size].long()
            k = k_cache[blocks].flatten(1, 2)[:, :kv_len].transpose(1, 2)  # (S, HKV, L, D)
            v = v_cache[blocks].flatten(1, 2)[:, :kv_len].transpose(1, 2)
            qs = q.view(num_seqs, q_len, heads, dim).transpose(1, 2)
            return _attend(qs, k, v).transpose(1, 2).reshape(q.shape)
        out = torch.empty_like(q)
        for s, kv_len in enumerate(kv_lens):
            q0, q1 = starts[s], starts[s + 1]
            if q1 == q0:
                continue
            blocks = block_table[s, : (kv_len + block_size - 1) // block_size].long()
            k = k_cache[blocks].flatten(0, 1)[:kv_len].transpose(0, 1).unsqueeze(0)
            v = v_cache[blocks].flatten(0, 1)[:kv_len].transpose(0, 1).unsqueeze(0)
            o = _attend(q[q0:q1].transpose(0, 1).unsqueeze(0), k, v)
            out[q0:q1] = o[0].transpose(0, 1)
        return out
