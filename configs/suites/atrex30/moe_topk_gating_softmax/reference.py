"""moe_topk_gating_softmax: softmax the router logits over the experts and keep the top-k.

Input: ``gating_output`` (T, E) fp32 router logits drawn N(0, 1) (E = 128 or 256 upstream).
Semantics: probabilities = softmax over the E experts in fp32; the k largest per token (k = 8
upstream), in descending order of probability, are returned as they are (not renormalised over the
k; upstream's grouped-expert selection is off in every shape, so it is not implemented). With
continuous N(0, 1) logits ties have probability zero, so the ids are well defined. Outputs: a tuple
in metadata.json's order, ``topk_weights`` (T, k) fp32 (held to fp32's tolerance) and
``topk_ids`` (T, k) int32 (compared exactly, order included). An all-zero or constant output
fails: the weights differ across slots by far more than 1e-4, and the ids are not all 0 or 1.
Phase rule: at most 64 tokens -> "decode" (one new token per sequence), more -> "prefill".
"""

import torch

OP_FAMILY = "moe"
#: At most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64

SMOKE = [
    {
        "id": "smoke_7tok_24exp_top5",
        "init_kwargs": {"top_k": 5},
        "input_kwargs": {"token_count": 7, "num_experts": 24},
    },
    {
        "id": "smoke_3tok_128exp_top8",
        "init_kwargs": {"top_k": 8},
        "input_kwargs": {"token_count": 3, "num_experts": 128},
    },
]


def phase_of(token_count: int = 1, **_: object) -> str:
    """At most 64 tokens -> "decode" (one new token per sequence), more -> "prefill"."""
    return "decode" if token_count <= DECODE_MAX_TOKENS else "prefill"


class Model(torch.nn.Module):
    """fp32 softmax over experts, then the top-k probabilities and their expert ids."""

    def __init__(self, top_k: int = 8):
        super().__init__()
        self.top_k = top_k

    def forward(self, gating_output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax(gating_output.float(), dim=-1)
        weights, ids = probs.topk(self.top_k, dim=-1, largest=True, sorted=True)
        return weights, ids.to(torch.int32)


def _make_inputs(
    token_count: int, num_experts: int = 128, device: str = "cuda"
) -> dict[str, torch.Tensor]:
    """Draw N(0, 1) fp32 router logits."""
    return {"gating_output": torch.randn(token_count, num_experts, device=device)}
