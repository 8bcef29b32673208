"""mla_decode_attention via torch.nn.functional.scaled_dot_product_attention over the latent cache.

The library baseline: the shared latent cache makes this multi-query attention, so every
sequence's query heads become the query rows of one SDPA call with a single KV head: q (B, 1,
nhead, 576) against keys (B, 1, ctx, 576) and values, their first kv_lora_rank dims (a view, no
copy), in bf16. On the GPU PyTorch picks its memory-efficient kernel (fp32 softmax and
accumulation; FlashAttention does not take 576-d keys with 512-d values), on the CPU its math or
CPU flash kernel; about 1e-3 relative from the reference's fp32 computation, inside bf16's
tolerance. Sequences of equal length (every upstream shape) are one batched call; otherwise each
sequence gets its own call, as the reference loops.
"""

import math

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    """Latent (MQA) decode attention by SDPA (no parameters)."""

    def __init__(self, nhead=16, kv_lora_rank=512, qk_rope_head_dim=64):
        super().__init__()
        self.nhead = nhead
        self.kv_lora_rank = kv_lora_rank
        self.qk_rope_head_dim = qk_rope_head_dim

    def _attend(self, q, kv):
        """q (B, nhead, D), kv (B, n, D) -> (B, nhead, kv_lora_rank), one KV head."""
        scale = 1.0 / math.sqrt(self.kv_lora_rank + self.qk_rope_head_dim)
        kv = kv.unsqueeze(1)
        out = F.scaled_dot_product_attention(
            q.unsqueeze(1), kv, kv[..., : self.kv_lora_rank], scale=scale
        )
        return out[:, 0]

    def forward(self, q, kv_cache, seq_lens):
        """Attend each sequence's query heads to its latent cache rows."""
        lens = seq_lens.tolist()
        batch = len(lens)
        if batch and all(n == lens[0] for n in lens) and lens[0] * batch == kv_cache.shape[0]:
            return self._attend(q, kv_cache.view(batch, lens[0], -1))
        out = torch.empty(q.shape[0], q.shape[1], self.kv_lora_rank, dtype=q.dtype, device=q.device)
        start = 0
        for b, n in enumerate(lens):
            out[b] = self._attend(q[b : b + 1], kv_cache[start : start + n, 0].unsqueeze(0))[0]
            start += n
        return out
