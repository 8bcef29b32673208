"""gated_delta_rule_update: token-by-token gated delta-rule recurrence with sigmoid/softplus gates.

Inputs (B = ``batch_size`` sequences of T = ``token_count`` tokens each, HQ query/key heads, HV
value heads, HV a multiple of HQ, K = ``key_dim``, V = ``value_dim``, S = ``state_count``):
``A_log`` (HV) fp32, ``a`` (B, T, HV) bf16, ``dt_bias`` (HV) bf16, ``q``, ``k`` (B, T, HQ, K) bf16,
``b`` (B, T, HV) bf16, all drawn N(0, 1) * 0.02 as upstream; ``v`` (B, T, HV, V) bf16 drawn N(0, 1)
* 0.02 * 2^10 and ``initial_state`` (S, HV, K, V) fp32 drawn N(0, 1) * 0.02 * 2^6;
``initial_state_indices`` (B) int32 = arange(B) % S (sequence -> state slot). Semantics, all in
fp32: gate = -exp(A_log) * softplus(a + dt_bias) (softplus with the constructor's beta and
threshold), decay = exp(gate), beta = sigmoid(b); q and k are L2-normalised over K (x *
rsqrt(sum(x^2) + 1e-6)) when ``use_qk_l2norm``; value head h reads query/key head h // (HV/HQ). Each
sequence starts from state = initial_state[slot] (K, V) per head and, for each token in order: state
*= decay; v_new = (v - state^T k) * beta; state += k v_new^T; out = state^T q * K^-1/2 (read after
the update). Outputs: a dict ``{"out": (B, T, HV, V) bf16, "final_state": (S, HV, K, V) fp32}``;
final_state is the whole pool, a copy of initial_state whose active slots hold their sequence's last
state (the other slots keep their initial states; the semantics leave pool-or-batch open, and the
pool is what the original in-place kernel leaves behind). The inputs are not modified. Every
upstream shape has B <= S, so the slots are distinct; were two sequences to share one, both would
start from the input pool and the later one's state would land there. Scales: with upstream's draws
the decay is about exp(-0.69) = 0.5 per token, so the output is about 2e-3 (a decode step, from the
initial state) or 1e-4 (long prefills, from v), below bf16's atol of 1e-2. The recurrence is linear
in (v, initial_state) for fixed gates, so both are scaled by powers of two (exact in bf16 and fp32),
each so that the output is about 0.1 in both regimes (final_state is then about 1); an all-zero or a
constant output has a relative L2 error near 1 and fails. Everything stays fp32 inside, so
final_state's fp32 tolerance is safe at this size: the same algorithm in fp64 (T = 1033, 32 value
heads) stays within 0.01 of the allowed error. The metadata's phase is "decode".
"""

import torch
import torch.nn.functional as F

OP_FAMILY = "scan"
#: Power-of-two factors on upstream's N(0, 1) * 0.02 draws of v and of the initial state (exact in
#: bf16/fp32), so the outputs are not tiny next to bf16's atol; see the module doc.
V_SCALE = 2.0**10
STATE_SCALE = 2.0**6

SMOKE = [
    {
        "id": "smoke_b2_t5_gqa",
        "init_kwargs": {"softplus_beta": 1.0, "softplus_threshold": 20.0, "use_qk_l2norm": True},
        "input_kwargs": {
            "batch_size": 2,
            "token_count": 5,
            "num_q_heads": 2,
            "num_v_heads": 4,
            "key_dim": 64,
            "value_dim": 48,
            "state_count": 3,
        },
    },
    {
        "id": "smoke_b1_t1_decode",
        "init_kwargs": {"softplus_beta": 1.0, "softplus_threshold": 20.0, "use_qk_l2norm": True},
        "input_kwargs": {
            "batch_size": 1,
            "token_count": 1,
            "num_q_heads": 1,
            "num_v_heads": 2,
            "key_dim": 32,
            "value_dim": 32,
            "state_count": 2,
        },
    },
]


def _l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps)


class Model(torch.nn.Module):
    """Gated delta-rule recurrence over a pool of fp32 states (no parameters)."""

    def __init__(
        self,
        softplus_beta: float = 1.0,
        softplus_threshold: float = 20.0,
        use_qk_l2norm: bool = True,
    ):
        super().__init__()
        self.softplus_beta = softplus_beta
        self.softplus_threshold = softplus_threshold
        self.use_qk_l2norm = use_qk_l2norm

    def forward(self, A_log, a, dt_bias, q, k, v, b, initial_state, initial_state_indices):  # noqa: N803
        """Run every sequence's tokens in order; return {"out" bf16, "final_state" fp32 pool}.

        Shapes: A_log (HV) fp32; a, b (B, T, HV) bf16; dt_bias (HV) bf16; q, k (B, T, HQ, K) bf16;
        v (B, T, HV, V) bf16; initial_state (S, HV, K, V) fp32; initial_state_indices (B) int32.
        """
        batch, tokens, q_heads, key_dim = q.shape
        v_heads = v.shape[2]
        qf, kf, vf = q.float(), k.float(), v.float()
        if self.use_qk_l2norm:
            qf, kf = _l2_normalize(qf), _l2_normalize(kf)
        # GQA: value head h reads query/key head h // (HV / HQ).
        qf = qf.repeat_interleave(v_heads // q_heads, dim=2)
        kf = kf.repeat_interleave(v_heads // q_heads, dim=2)
        softplus = F.softplus(
            a.float() + dt_bias.float(), beta=self.softplus_beta, threshold=self.softplus_threshold
        )
        decay = torch.exp(-torch.exp(A_log.float()) * softplus)  # (B, T, HV)
        beta = torch.sigmoid(b.float())  # (B, T, HV)
        slots = initial_state_indices.long()
        state = initial_state[slots].clone()  # (B, HV, K, V), fp32 throughout
        out = torch.empty(batch, tokens, v_heads, v.shape[3], dtype=torch.float32, device=v.device)
        scale = key_dim**-0.5
        for t in range(tokens):
            state = state * decay[:, t, :, None, None]
            k_t = kf[:, t]
            predicted = torch.einsum("bhkv,bhk->bhv", state, k_t)
            v_new = (vf[:, t] - predicted) * beta[:, t, :, None]
            state = state + k_t[..., None] * v_new[..., None, :]
            out[:, t] = torch.einsum("bhkv,bhk->bhv", state, qf[:, t]) * scale
        final_state = initial_state.clone()
        for i in range(batch):  # in order (the later of two sharing a slot wins); no host sync
            final_state.index_copy_(0, slots[i : i + 1], state[i : i + 1])
        return {"out": out.to(torch.bfloat16), "final_state": final_state}


def _make_inputs(
    batch_size: int = 1,
    token_count: int = 1,
    num_q_heads: int = 16,
    num_v_heads: int = 32,
    key_dim: int = 128,
    value_dim: int = 128,
    state_count: int = 2,
    device: str = "cuda",
):
    """Upstream's N(0, 1) * 0.02 draws, v and the state scaled by V_SCALE and STATE_SCALE."""
    bf16 = torch.bfloat16
    B, T, HQ, HV = batch_size, token_count, num_q_heads, num_v_heads  # noqa: N806

    def small(*shape, dtype=bf16):
        return (torch.randn(*shape, device=device) * 0.02).to(dtype)

    return {
        "A_log": small(HV, dtype=torch.float32),
        "a": small(B, T, HV),
        "dt_bias": small(HV),
        "q": small(B, T, HQ, key_dim),
        "k": small(B, T, HQ, key_dim),
        "v": small(B, T, HV, value_dim) * V_SCALE,
        "b": small(B, T, HV),
        "initial_state": small(state_count, HV, key_dim, value_dim, dtype=torch.float32)
        * STATE_SCALE,
        "initial_state_indices": (torch.arange(B, device=device) % state_count).to(torch.int32),
    }
