"""paged_attention_decode via F.scaled_dot_product_attention on the gathered paged cache.

The library baseline: the paged keys and values are gathered through the block tables and
un-tiled in the input dtype (one copy each, as the reference does before upcasting), then one
masked SDPA call: each KV head's group of query heads forms the query rows of a batch entry
(batch = sequences, heads = KV heads, rows = the group's query heads), the mask hides positions
past each sequence's length. On the GPU PyTorch runs its memory-efficient kernel (fp32 softmax
and accumulation; the mask rules out FlashAttention), on the CPU its math or CPU flash kernel.
The result differs from the reference's fp32 computation by about 3e-4 relative in fp16 and
1e-3 in bf16, inside their tolerances.
"""

import math

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    """Paged decode attention by SDPA (no parameters)."""

    def forward(self, query, k_cache, v_cache, block_tables, seq_lens):
        """Attend each sequence's single query to its paged context."""
        num_seqs, num_heads, head_size = query.shape
        num_kv_heads, block_size = v_cache.shape[1], v_cache.shape[3]
        width = block_tables.shape[1]
        blocks = block_tables.long()
        # (S, W, HKV, D/x, B, x) -> (S, HKV, W*B, D) and (S, W, HKV, D, B) -> (S, HKV, W*B, D)
        k = k_cache[blocks].permute(0, 2, 1, 4, 3, 5)
        k = k.reshape(num_seqs, num_kv_heads, width * block_size, head_size)
        v = v_cache[blocks].permute(0, 2, 1, 4, 3)
        v = v.reshape(num_seqs, num_kv_heads, width * block_size, head_size)
        q = query.view(num_seqs, num_kv_heads, num_heads // num_kv_heads, head_size)
        pos = torch.arange(width * block_size, device=query.device)
        valid = pos.view(1, 1, 1, -1) < seq_lens.view(-1, 1, 1, 1)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=valid, scale=1.0 / math.sqrt(head_size)
        )
        return out.reshape(num_seqs, num_heads, head_size)
