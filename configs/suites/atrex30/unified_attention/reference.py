"""unified_attention: causal GQA attention of varlen queries over a paged bf16 KV cache.

Inputs: ``q`` (sum of the query lengths, HQ, D) bf16 N(0,1); ``k_cache``/``v_cache``
(num_blocks, block_size, HKV, D) bf16 N(0,1) with num_blocks = (ceil(max_len / block_size) + 2)
* num_seqs + 64 (the unused blocks hold noise too); ``block_table`` (num_seqs,
ceil(max_len / block_size)) int32, sequence s owning the contiguous blocks s * width ... ;
``cu_seqlens_q`` (num_seqs + 1) int32 prefix sums of the query lengths; ``seqused_k`` (num_seqs)
int32 key lengths. Every upstream shape has query length == key length == ``seq_lens[s]``
(a prefill with no cached history), so the attention is plain causal; the reference also handles
query length < key length, aligning the queries to the end of the keys (query i sees keys
0 .. kv_len - q_len + i). Semantics: per sequence, gather its keys/values from the cache through
the block table, repeat each KV head for its HQ / HKV query heads, softmax(q k^T * D^-0.5) v in
fp32 (queries processed in chunks so that no score matrix exceeds 2^28 elements, which keeps the
49152-token shape within memory on any SDPA backend), cast to bf16. Output ``out`` (sum of the
query lengths, HQ, D) **bf16**: metadata.json says fp32, but the upstream reference returns the
query dtype and so does this one. Scales: q, k, v ~ N(0,1) as upstream, so scores are ~N(0,1) and
outputs are O(0.1) averages of V (smaller for rows that see thousands of keys); an all-zero or
constant output fails the relative L2 check. Phase rule: every sequence contributes exactly one
query token -> "decode", otherwise "prefill" (all upstream shapes are prefill).
"""

import math

import torch

OP_FAMILY = "attention"
SMOKE = [
    {
        "id": "smoke_varlen_gqa",
        "init_kwargs": {},
        "input_kwargs": {
            "num_seqs": 3,
            "seq_lens": [5, 19, 33],
            "num_query_heads": 4,
            "num_kv_heads": 2,
            "head_size": 72,
            "block_size": 16,
        },
    },
    {
        "id": "smoke_single_mqa",
        "init_kwargs": {},
        "input_kwargs": {
            "num_seqs": 1,
            "seq_lens": [23],
            "num_query_heads": 3,
            "num_kv_heads": 1,
            "head_size": 80,
            "block_size": 16,
        },
    },
]

_MAX_SCORES = 1 << 28  # largest score matrix (heads x queries x keys) built at once


def phase_of(seq_lens=(1,), **_: object) -> str:
    """One query token per sequence (query length == key length == 1 here) -> decode."""
    return "decode" if all(int(n) == 1 for n in seq_lens) else "prefill"


def _causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """fp32 (H, Lq, D) x (H, Lk, D) attention, queries aligned to the end of the keys."""
    heads, q_len, _ = q.shape
    kv_len = k.shape[1]
    offset = kv_len - q_len
    chunk = max(1, _MAX_SCORES // max(1, heads * kv_len))
    outs = []
    for start in range(0, q_len, chunk):
        stop = min(q_len, start + chunk)
        visible = offset + stop  # keys beyond the chunk's last query are masked for all of it
        rows = torch.arange(offset + start, offset + stop, device=q.device).unsqueeze(1)
        cols = torch.arange(visible, device=q.device).unsqueeze(0)
        outs.append(
            torch.nn.functional.scaled_dot_product_attention(
                q[:, start:stop],
                k[:, :visible],
                v[:, :visible],
                attn_mask=cols <= rows,
                scale=1.0 / math.sqrt(q.shape[-1]),
            )
        )
    return torch.cat(outs, dim=1)


class Model(torch.nn.Module):
    """Paged varlen causal attention (no parameters)."""

    def forward(self, q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table):
        """Attend each sequence's queries to its paged keys/values."""
        block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
        group = q.shape[1] // num_kv_heads
        starts = cu_seqlens_q.tolist()
        kv_lens = seqused_k.tolist()
        out = torch.empty_like(q)
        for s, kv_len in enumerate(kv_lens):
            q_start, q_stop = starts[s], starts[s + 1]
            if q_stop == q_start:
                continue
            blocks = block_table[s, : (kv_len + block_size - 1) // block_size].long()
            k = k_cache[blocks].flatten(0, 1)[:kv_len]  # (kv_len, HKV, D)
            v = v_cache[blocks].flatten(0, 1)[:kv_len]
            k = k.float().repeat_interleave(group, dim=1).transpose(0, 1)
            v = v.float().repeat_interleave(group, dim=1).transpose(0, 1)
            o = _causal_attention(q[q_start:q_stop].float().transpose(0, 1), k, v)
            out[q_start:q_stop] = o.transpose(0, 1).to(q.dtype)
        return out


def _make_inputs(
    num_seqs=1,
    seq_lens=(16,),
    num_query_heads=16,
    num_kv_heads=1,
    head_size=128,
    block_size=16,
    device: str = "cuda",
):
    """q/k/v N(0,1) bf16, a contiguous block table, query length == key length per sequence."""
    lens = [int(n) for n in seq_lens][:num_seqs]
    width = math.ceil(max(lens) / block_size)
    num_blocks = (width + 2) * num_seqs + 64
    bf16 = torch.bfloat16
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    return {
        "q": torch.randn(cu[-1], num_query_heads, head_size, dtype=bf16, device=device),
        "k_cache": torch.randn(
            num_blocks, block_size, num_kv_heads, head_size, dtype=bf16, device=device
        ),
        "v_cache": torch.randn(
            num_blocks, block_size, num_kv_heads, head_size, dtype=bf16, device=device
        ),
        "cu_seqlens_q": torch.tensor(cu, dtype=torch.int32, device=device),
        "seqused_k": torch.tensor(lens, dtype=torch.int32, device=device),
        "block_table": torch.arange(num_seqs * width, dtype=torch.int32, device=device).view(
            num_seqs, width
        ),
    }
