"""moe_sum_reduce: sum each token's top-k expert outputs and scale by the routed scaling factor.

Input: ``expert_outputs`` (T, k, H) bf16 (k = 8, H = 2048 upstream). Upstream draws it
N(0, 1) * 0.02; here it is drawn N(0, 1): the sums would otherwise be about 0.06, barely above
bf16's atol of 1e-2, so the elementwise check would accept almost anything and only the relative
L2 check would hold (the operation is linear, so the scale changes nothing else). Semantics:
out[t] = routed_scaling_factor * sum_j expert_outputs[t, j], accumulated in fp32, then rounded
once to bf16. Output: ``out`` (T, H) bf16. With N(0, 1) inputs the sums have standard deviation
sqrt(k), so an all-zero or constant output fails both checks. Phase rule: at most 64 tokens ->
"decode" (one new token per sequence), more -> "prefill"; every upstream shape (T >= 4195) is
prefill.
"""

import torch

OP_FAMILY = "moe"
#: At most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64

SMOKE = [
    {
        "id": "smoke_7tok_top3_h200",
        "init_kwargs": {"routed_scaling_factor": 1.0},
        "input_kwargs": {"token_count": 7, "top_k": 3, "hidden_size": 200},
    },
    {
        "id": "smoke_5tok_top8_h96_scaled",
        "init_kwargs": {"routed_scaling_factor": 2.5},
        "input_kwargs": {"token_count": 5, "top_k": 8, "hidden_size": 96},
    },
]


def phase_of(token_count: int = 1, **_: object) -> str:
    """At most 64 tokens -> "decode" (one new token per sequence), more -> "prefill"."""
    return "decode" if token_count <= DECODE_MAX_TOKENS else "prefill"


class Model(torch.nn.Module):
    """fp32 sum over the top-k axis, times the routed scaling factor, rounded to bf16."""

    def __init__(self, routed_scaling_factor: float = 1.0):
        super().__init__()
        self.routed_scaling_factor = routed_scaling_factor

    def forward(self, expert_outputs: torch.Tensor) -> torch.Tensor:
        summed = expert_outputs.float().sum(dim=1)
        return (summed * self.routed_scaling_factor).to(torch.bfloat16)


def _make_inputs(
    token_count: int, top_k: int = 8, hidden_size: int = 2048, device: str = "cuda"
) -> dict[str, torch.Tensor]:
    """Draw N(0, 1) expert outputs in bf16 (upstream: N(0, 1) * 0.02, see the module doc)."""
    x = torch.randn(token_count, top_k, hidden_size, device=device).to(torch.bfloat16)
    return {"expert_outputs": x}
