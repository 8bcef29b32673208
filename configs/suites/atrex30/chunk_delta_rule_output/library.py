"""chunk_delta_rule_output via batched cuBLAS GEMMs on bf16 operands with fp32 output.

The library baseline: the three products of each chunk (q h_c, q k^T and the decayed, masked
scores times v) are batched GEMMs on the bf16 inputs as they are, on the tensor cores with fp32
accumulation and fp32 output (``torch.bmm(..., out_dtype=torch.float32)`` on CUDA; fp32 bmm of
the upcast operands on the CPU, the same arithmetic), the GQA query heads broadcast over their
value heads; the reference instead upcasts everything, the per-chunk states h included, and runs
fp32 einsums. The decay, mask and sum stay fp32; only the decayed scores, the operand of the last
product, are rounded to bf16 (as a tensor-core chunk kernel feeds them), then the output once.
"""

import math

import torch


def _bmm_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Broadcast batched a @ b of bf16 operands with fp32 accumulation and output."""
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a3 = a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:])
    b3 = b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
    if a.is_cuda:
        out = torch.bmm(a3, b3, out_dtype=torch.float32)
    else:
        out = torch.bmm(a3.float(), b3.float())
    return out.view(*batch, a.shape[-2], b.shape[-1])


class Model(torch.nn.Module):
    """Chunked gated delta-rule output by bf16 batched matmuls (no parameters)."""

    def __init__(self, chunk_size: int = 64):
        super().__init__()
        self.chunk_size = chunk_size

    def forward(self, q, k, v, h, g):
        """q, k (B, T, HQ, K), v (B, T, HV, V), h (B, NC, HV, K, V) bf16, g (B, T, HV) fp32.

        Returns (B, T, HV, V) bf16.
        """
        batch, tokens, q_heads, key_dim = q.shape
        v_heads, value_dim = v.shape[2], v.shape[3]
        size, group = self.chunk_size, v_heads // q_heads
        chunks = math.ceil(tokens / size)
        if h.shape[1] != chunks:
            raise ValueError(
                f"h holds {h.shape[1]} chunk states; T={tokens} with chunk_size={size} "
                f"needs {chunks}"
            )
        pad = chunks * size - tokens

        def chunked(x):  # (B, T, H, D) -> (B, NC, H, C, D), zero rows past T
            x = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, pad))
            return x.view(batch, chunks, size, x.shape[2], x.shape[3]).transpose(2, 3)

        qc = chunked(q).unsqueeze(3)  # (B, NC, HQ, 1, C, K)
        kc = chunked(k).unsqueeze(3)
        vc = chunked(v).unflatten(2, (q_heads, group))  # (B, NC, HQ, G, C, V)
        gc = torch.nn.functional.pad(g.float(), (0, 0, 0, pad)).view(batch, chunks, size, v_heads)
        gc = gc.transpose(2, 3).unflatten(2, (q_heads, group))  # (B, NC, HQ, G, C)
        inter = _bmm_fp32(qc, h.unflatten(2, (q_heads, group)))  # (B, NC, HQ, G, C, V)
        scores = _bmm_fp32(qc, kc.transpose(-1, -2))  # (B, NC, HQ, 1, C, C)
        causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
        decay = torch.exp(gc[..., :, None] - gc[..., None, :]).masked_fill(~causal, 0.0)
        intra = _bmm_fp32((scores * decay).to(q.dtype), vc)
        out = ((inter * gc.exp()[..., None] + intra) * key_dim**-0.5).bfloat16()
        out = out.flatten(2, 3).transpose(2, 3).reshape(batch, chunks * size, v_heads, value_dim)
        return out[:, :tokens].contiguous()
