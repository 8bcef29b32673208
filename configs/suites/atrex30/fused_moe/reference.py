"""fused_moe: a top-k routed mixture of SiLU-gated expert FFNs, summed with the routing weights.

Inputs: ``hidden_states`` (T, H) bf16 drawn N(0, 1) * 0.1; ``w1`` (E, 2I, H) bf16 N(0, 1) * H^-0.5,
whose first I rows per expert are the gate projection and the last I rows the up projection;
``w2`` (E, H, I) bf16 N(0, 1) * I^-0.5 (the down projection); ``topk_weights`` (T, k) fp32, a
softmax of N(0, 1) logits per token; ``topk_ids`` (T, k) int32 uniform in [0, E) drawn
independently, so one token may pick the same expert twice: both picks are computed and their
weighted contributions add up (the same as summing their weights). Semantics: for each token t,
out[t] = sum_j topk_weights[t, j] * (SiLU(x_t w1g^T) * (x_t w1u^T)) w2^T with the expert
topk_ids[t, j], everything computed in fp32 (the bf16 inputs are upcast, the intermediate
activation stays fp32). Output: ``out`` (T, H) fp32, as metadata.json says. Because the output
is fp32, the scorer holds it to fp32's tolerance (1e-4 elementwise and in relative L2): a
candidate that rounds the intermediate activation to bf16 will not pass; it must keep fp32
intermediates. The input scales are upstream's: outputs are about 4e-3 in magnitude, well above
fp32's atol, and an all-zero or constant output has a relative L2 error near 1, so neither passes.
Phase rule: at most 64 tokens in the batch -> "decode" (a decode step of up to 64 sequences, one
new token each), more -> "prefill".
"""

import torch
import torch.nn.functional as F

OP_FAMILY = "moe"
#: A batch of at most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64

SMOKE = [
    {
        "id": "smoke_13tok_6exp_top2",
        "init_kwargs": {"num_experts": 6, "intermediate_size": 40, "top_k": 2},
        "input_kwargs": {
            "token_count": 13,
            "hidden_size": 96,
            "intermediate_size": 40,
            "num_experts": 6,
            "top_k": 2,
        },
    },
    {
        "id": "smoke_7tok_5exp_top3",
        "init_kwargs": {"num_experts": 5, "intermediate_size": 24, "top_k": 3},
        "input_kwargs": {
            "token_count": 7,
            "hidden_size": 72,
            "intermediate_size": 24,
            "num_experts": 5,
            "top_k": 3,
        },
    },
]


def phase_of(token_count: int = 1, **_: object) -> str:
    """At most 64 tokens -> "decode" (one new token per sequence), more -> "prefill"."""
    return "decode" if token_count <= DECODE_MAX_TOKENS else "prefill"


class Model(torch.nn.Module):
    """Routed SiLU-gated expert FFNs; sizes come from the tensors, init keeps upstream names."""

    def __init__(self, num_experts: int = 8, intermediate_size: int = 2048, top_k: int = 2):
        super().__init__()
        self.num_experts = num_experts
        self.intermediate_size = intermediate_size
        self.top_k = top_k

    def forward(
        self,
        hidden_states: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
    ) -> torch.Tensor:
        tokens, top_k = topk_ids.shape
        inter = w2.shape[2]
        x = hidden_states.float()
        out = torch.zeros(tokens, x.shape[1], dtype=torch.float32, device=x.device)
        # Group the (token, slot) pairs by expert; stable, so tokens keep their order.
        flat_ids = topk_ids.reshape(-1).long()
        flat_weights = topk_weights.reshape(-1).float()
        token_of = torch.arange(tokens, device=x.device).repeat_interleave(top_k)
        order = torch.argsort(flat_ids, stable=True)
        counts = torch.bincount(flat_ids, minlength=w1.shape[0]).tolist()
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            pairs = order[start : start + count]
            start += count
            rows = token_of[pairs]
            gate_up = x[rows] @ w1[expert].float().t()  # (count, 2I), fp32
            act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
            down = act @ w2[expert].float().t()  # (count, H), fp32
            out.index_add_(0, rows, down * flat_weights[pairs, None])
        return out


def _make_inputs(
    token_count: int,
    hidden_size: int,
    intermediate_size: int,
    num_experts: int,
    top_k: int,
    device: str = "cuda",
) -> dict[str, torch.Tensor]:
    """Draw the activations, the expert weights and a random routing (see the module doc)."""
    t, h, i, e = token_count, hidden_size, intermediate_size, num_experts
    hidden = (torch.randn(t, h, device=device) * 0.1).to(torch.bfloat16)
    w1 = (torch.randn(e, 2 * i, h, device=device) * h**-0.5).to(torch.bfloat16)
    w2 = (torch.randn(e, h, i, device=device) * i**-0.5).to(torch.bfloat16)
    topk_weights = torch.softmax(torch.randn(t, top_k, device=device), dim=-1)
    topk_ids = torch.randint(0, e, (t, top_k), device=device, dtype=torch.int32)
    return {
        "hidden_states": hidden,
        "w1": w1,
        "w2": w2,
        "topk_weights": topk_weights,
        "topk_ids": topk_ids,
    }
