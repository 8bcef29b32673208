"""chunk_gated_delta_rule_state: chunk-by-chunk gated delta-rule state propagation (chunks of 64).

Inputs (B = ``batch_size`` sequences of T = ``token_count`` tokens, HK key heads, HV value heads, HV
a multiple of HK, K = ``key_dim``, V = ``value_dim``, S = ``state_count``, C = the constructor's
``chunk_size``, NC = ceil(T / C)): ``k`` (B, T, HK, K), ``w`` (B, T, HV, K) and ``u`` (B, T, HV, V)
bf16 and ``initial_state`` (S, HV, K, V) fp32, all drawn N(0, 1) * 0.02 as upstream; ``g`` (B, T,
HV) fp32 drawn -U(0, 1), the log-decays, used as given (the chunk kernel reads them as chunk-local
cumulative sums; here they are independent draws, so g_last - g may be positive);
``initial_state_indices`` (B) int32 = arange(B) % S (sequence -> state slot). Semantics: each
sequence starts from state = initial_state[slot] (per value head a (K, V) fp32 matrix; value head h
uses key head h // (HV / HK)) and, for each chunk in order (the last may be partial): h_c =
bf16(state) is recorded; v_new = u - w @ h_c; then state = state * exp(g_last) + k^T @ bf16(v_new *
exp(g_last - g)), where g_last is g at the chunk's last token. Precision: fp32 accumulation and an
fp32 state throughout; the semantics leave the intermediate roundings open, and this reference
rounds exactly the two product operands a tensor-core kernel must feed as bf16 (h_c, the very values
it records, and v_new * exp(g_last - g)), so a kernel built that way matches the fp32 final_state to
fp32's tolerance. Outputs: a dict ``{"h": (B, NC, HV, K, V) bf16, "v_new": (B, T, HV, V) bf16,
"final_state": (S, HV, K, V) fp32}``; final_state is the whole pool, a copy of initial_state whose
active slots hold their sequence's last state (the other slots unchanged). The inputs are not
modified. Every upstream shape has B <= S, so the slots are distinct; were two sequences to share
one, both would start from the input pool and the later one's state would land there. Scales are
upstream's: v_new is about 0.02 and h about 0.005-0.02, small next to bf16's atol of 1e-2, so for
them the scorer's relative L2 bound (1e-2) carries the judgement; an all-zero or a constant output
has a relative L2 error near 1 and fails. They are deliberately not scaled up: h and final_state are
the same quantity, and final_state is fp32 with an absolute atol of 1e-4, while a faithful kernel's
fp32 rounding can flip a bf16 operand by one ulp, which moves a state entry by about 3e-4 of its
size. Checked on the CPU (T = 11027, 32 value heads) against the same algorithm in fp64: the worst
final_state error is 0.17 of the allowed one at these scales, 0.33 at twice them, and some entries
fail at 4x. The metadata's phase is "prefill".
"""

import math

import torch

OP_FAMILY = "scan"
SMOKE = [
    {
        "id": "smoke_b2_t45_c16_gqa",
        "init_kwargs": {"chunk_size": 16},
        "input_kwargs": {
            "batch_size": 2,
            "token_count": 45,
            "num_k_heads": 2,
            "num_v_heads": 4,
            "key_dim": 32,
            "value_dim": 24,
            "state_count": 5,
        },
    },
    {
        "id": "smoke_b1_t70_c64",
        "init_kwargs": {"chunk_size": 64},
        "input_kwargs": {
            "batch_size": 1,
            "token_count": 70,
            "num_k_heads": 1,
            "num_v_heads": 1,
            "key_dim": 64,
            "value_dim": 64,
            "state_count": 3,
        },
    },
]


class Model(torch.nn.Module):
    """Chunk-by-chunk gated delta-rule state propagation over a pool of fp32 states."""

    def __init__(self, chunk_size: int = 64):
        super().__init__()
        self.chunk_size = chunk_size

    def forward(self, k, w, u, g, initial_state, initial_state_indices):
        """k (B, T, HK, K), w (B, T, HV, K), u (B, T, HV, V) bf16; g (B, T, HV) fp32; pool fp32.

        Returns {"h": (B, NC, HV, K, V) bf16, "v_new": (B, T, HV, V) bf16,
        "final_state": (S, HV, K, V) fp32}.
        """
        batch, tokens, k_heads, key_dim = k.shape
        v_heads, value_dim = w.shape[2], u.shape[3]
        size = self.chunk_size
        chunks = math.ceil(tokens / size)
        # GQA: value head h reads key head h // (HV / HK).
        kf = k.float().repeat_interleave(v_heads // k_heads, dim=2)
        wf, uf, gf = w.float(), u.float(), g.float()
        slots = initial_state_indices.long()
        state = initial_state[slots].clone()  # (B, HV, K, V), fp32 throughout
        h = torch.empty(
            batch, chunks, v_heads, key_dim, value_dim, dtype=torch.bfloat16, device=k.device
        )
        v_new = torch.empty(batch, tokens, v_heads, value_dim, dtype=torch.float32, device=k.device)
        for c in range(chunks):
            start, end = c * size, min(tokens, (c + 1) * size)
            # Recorded, and w @ h's operand: bf16, as a tensor-core kernel must feed it.
            h_c = state.to(torch.bfloat16)
            h[:, c] = h_c
            v_c = uf[:, start:end] - torch.einsum("bthk,bhkv->bthv", wf[:, start:end], h_c.float())
            v_new[:, start:end] = v_c
            g_c = gf[:, start:end]  # (B, L, HV)
            g_last = g_c[:, -1]  # (B, HV): the chunk's last token, also in a partial chunk
            # The k^T (...) product's second operand is rounded to bf16, as a tensor core takes it.
            weighted = (v_c * torch.exp(g_last[:, None] - g_c)[..., None]).to(torch.bfloat16)
            update = torch.einsum("bthk,bthv->bhkv", kf[:, start:end], weighted.float())
            state = state * torch.exp(g_last)[..., None, None] + update
        final_state = initial_state.clone()
        for i in range(batch):  # in order (the later of two sharing a slot wins); no host sync
            final_state.index_copy_(0, slots[i : i + 1], state[i : i + 1])
        return {"h": h, "v_new": v_new.to(torch.bfloat16), "final_state": final_state}


def _make_inputs(
    batch_size: int = 1,
    token_count: int = 64,
    num_k_heads: int = 16,
    num_v_heads: int = 32,
    key_dim: int = 128,
    value_dim: int = 128,
    state_count: int = 2,
    device: str = "cuda",
):
    """Upstream's draws: N(0, 1) * 0.02 for k, w, u and the state; g ~ -U(0, 1) fp32."""
    bf16 = torch.bfloat16
    B, T, HK, HV = batch_size, token_count, num_k_heads, num_v_heads  # noqa: N806

    def small(*shape, dtype=bf16):
        return (torch.randn(*shape, device=device) * 0.02).to(dtype)

    return {
        "k": small(B, T, HK, key_dim),
        "w": small(B, T, HV, key_dim),
        "u": small(B, T, HV, value_dim),
        "g": -torch.rand(B, T, HV, device=device),
        "initial_state": small(state_count, HV, key_dim, value_dim, dtype=torch.float32),
        "initial_state_indices": (torch.arange(B, device=device) % state_count).to(torch.int32),
    }
