"""chunk_delta_rule_output: the output stage of chunked gated delta-rule attention (chunks of 64).

Inputs (B = ``batch_size``, T = ``token_count``, HQ query/key heads, HV value heads, HV a
multiple of HQ, K = ``key_dim``, V = ``value_dim``, C = ``chunk_size``, NC = ceil(T / C)):
``q``, ``k`` (B, T, HQ, K) and ``v`` (B, T, HV, V) bf16, drawn N(0, 1) * 0.02 * 2^4;
``h`` (B, NC, HV, K, V) bf16, the state at the start of each chunk, drawn N(0, 1) * 0.02 * 2^8;
``g`` (B, T, HV) fp32 drawn -U(0, 1), the log-decays, used as given (the chunk kernel reads them
as chunk-local cumulative sums; here they are independent draws, so g_i - g_j may be positive).
Semantics, in fp32 from the upcast inputs, for each chunk c (its last one may be partial), value
head h and query/key head h // (HV / HQ): o = K^-1/2 * ((q h_c) * exp(g)[:, None] +
(M * (q k^T) * exp(g[:, None] - g[None, :])) v), where q, k, v, g are the chunk's rows and M is
the causal mask that keeps i >= j (a token sees itself and the earlier tokens of its chunk);
rounded to bf16 once. Output: ``out`` (B, T, HV, V) bf16, a plain tensor. Scales: with
upstream's 0.02 draws the output is about 2e-4, far below bf16's atol of 1e-2, so q, k and v are
scaled by 2^4 and h by 2^8 (powers of two, exact in bf16): both terms then grow by the same
factor 2^12 and the output is about 1; an all-zero or a constant output has a relative L2 error
near 1 and fails. ``chunk_size`` is both an init and an input argument upstream (64 in every
shape); the model uses its own and the inputs' h must have ceil(T / chunk_size) chunks. The
metadata's phase is "prefill".
"""

import math

import torch

OP_FAMILY = "attention"
#: Power-of-two factors on upstream's N(0, 1) * 0.02 draws; h's is the product of k's and v's,
#: so the inter-chunk and intra-chunk terms keep upstream's balance.
QKV_SCALE = 2.0**4
H_SCALE = 2.0**8

SMOKE = [
    {
        "id": "smoke_b2_t45_c16_gqa",
        "init_kwargs": {"chunk_size": 16},
        "input_kwargs": {
            "batch_size": 2,
            "token_count": 45,
            "num_q_heads": 2,
            "num_v_heads": 4,
            "key_dim": 32,
            "value_dim": 24,
            "chunk_size": 16,
        },
    },
    {
        "id": "smoke_b1_t70_c64",
        "init_kwargs": {"chunk_size": 64},
        "input_kwargs": {
            "batch_size": 1,
            "token_count": 70,
            "num_q_heads": 1,
            "num_v_heads": 1,
            "key_dim": 64,
            "value_dim": 64,
            "chunk_size": 64,
        },
    },
]


class Model(torch.nn.Module):
    """Chunked gated delta-rule output (no parameters)."""

    def __init__(self, chunk_size: int = 64):
        super().__init__()
        self.chunk_size = chunk_size

    def forward(self, q, k, v, h, g):
        """q, k (B, T, HQ, K), v (B, T, HV, V), h (B, NC, HV, K, V) bf16, g (B, T, HV) fp32.

        Returns (B, T, HV, V) bf16.
        """
        batch, tokens, q_heads, key_dim = q.shape
        v_heads, value_dim = v.shape[2], v.shape[3]
        size = self.chunk_size
        chunks = math.ceil(tokens / size)
        if h.shape[1] != chunks:
            raise ValueError(
                f"h holds {h.shape[1]} chunk states; T={tokens} with chunk_size={size} "
                f"needs {chunks}"
            )
        pad = chunks * size - tokens

        def chunked(x):  # (B, T, H, D) -> (B, NC, C, HV, D) fp32, zero rows past T
            x = x.float().repeat_interleave(v_heads // x.shape[2], dim=2)
            x = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, pad))
            return x.view(batch, chunks, size, v_heads, x.shape[-1])

        qc, kc, vc = chunked(q), chunked(k), chunked(v)
        # Zero-padded keys and values contribute nothing; padded queries are dropped below.
        gc = torch.nn.functional.pad(g.float(), (0, 0, 0, pad)).view(batch, chunks, size, v_heads)
        inter = torch.einsum("bclhk,bchkv->bclhv", qc, h.float()) * gc.exp()[..., None]
        scores = torch.einsum("bclhk,bcmhk->bchlm", qc, kc)
        g_h = gc.permute(0, 1, 3, 2)  # (B, NC, HV, C)
        scores = scores * torch.exp(g_h[..., :, None] - g_h[..., None, :])
        causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, 0.0)
        intra = torch.einsum("bchlm,bcmhv->bclhv", scores, vc)
        out = (inter + intra) * key_dim**-0.5
        out = out.reshape(batch, chunks * size, v_heads, value_dim)[:, :tokens]
        return out.to(torch.bfloat16)


def _make_inputs(
    batch_size: int = 1,
    token_count: int = 64,
    num_q_heads: int = 16,
    num_v_heads: int = 32,
    key_dim: int = 128,
    value_dim: int = 128,
    chunk_size: int = 64,
    device: str = "cuda",
):
    """Upstream's N(0, 1) * 0.02 draws scaled by QKV_SCALE / H_SCALE; g ~ -U(0, 1) fp32."""
    bf16 = torch.bfloat16
    B, T, HQ, HV = batch_size, token_count, num_q_heads, num_v_heads  # noqa: N806
    chunks = math.ceil(T / chunk_size)

    def small(*shape):
        return (torch.randn(*shape, device=device) * 0.02).to(bf16)

    return {
        "q": small(B, T, HQ, key_dim) * QKV_SCALE,
        "k": small(B, T, HQ, key_dim) * QKV_SCALE,
        "v": small(B, T, HV, value_dim) * QKV_SCALE,
        "h": small(B, chunks, HV, key_dim, value_dim) * H_SCALE,
        "g": -torch.rand(B, T, HV, device=device),
    }
