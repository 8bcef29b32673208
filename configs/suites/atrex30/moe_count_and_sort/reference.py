"""moe_count_and_sort: count the (token, slot) pairs routed to each expert and sort them by expert.

Input: ``topk_ids`` (T, k) int32, each entry uniform in [0, num_experts) (k = 8 and 128 experts
upstream; a token may pick an expert twice). Flat index f = t * k + j names slot j of token t.
Semantics: ``sorted_token_ids`` (T * k,) holds, for each expert in ascending order, the ascending
flat indices that chose it (no padding); ``expert_token_counts`` (num_experts,) how many pairs
each expert got; ``cumsum`` (num_experts + 1,) their exclusive prefix sum, starting at 0, so
expert e's pairs are sorted_token_ids[cumsum[e]:cumsum[e + 1]]. Outputs: a tuple in
metadata.json's order, all int32, compared exactly. ``block_size`` is accepted for upstream's
signature and does not change the result (no padding here). No fp8, no scales. An all-zero or
all-one output cannot match: the sorted ids are a permutation of 0..T*k-1 and the prefix sum
grows to T*k. Phase rule: at most 64 tokens -> "decode" (one new token per sequence), more ->
"prefill".
"""

import torch

OP_FAMILY = "moe"
#: At most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64

SMOKE = [
    {
        "id": "smoke_13tok_top4_10exp",
        "init_kwargs": {"num_experts": 10, "block_size": 16},
        "input_kwargs": {"token_count": 13, "top_k": 4, "num_experts": 10},
    },
    {
        "id": "smoke_1tok_top8_128exp",
        "init_kwargs": None,
        "input_kwargs": {"token_count": 1, "top_k": 8, "num_experts": 128},
    },
]


def phase_of(token_count: int = 1, **_: object) -> str:
    """At most 64 tokens -> "decode" (one new token per sequence), more -> "prefill"."""
    return "decode" if token_count <= DECODE_MAX_TOKENS else "prefill"


class Model(torch.nn.Module):
    """Per-expert counts, their prefix sum, and the flat indices sorted by expert."""

    def __init__(self, num_experts: int = 128, block_size: int = 128):
        super().__init__()
        self.num_experts = num_experts
        self.block_size = block_size  # upstream's argument; unused (no padding)

    def forward(self, topk_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        flat = topk_ids.reshape(-1).long()
        # A stable sort keeps the flat indices ascending within each expert.
        sorted_ids = torch.argsort(flat, stable=True).to(torch.int32)
        counts = torch.bincount(flat, minlength=self.num_experts)
        cumsum = torch.zeros(self.num_experts + 1, dtype=torch.int32, device=flat.device)
        cumsum[1:] = torch.cumsum(counts, 0)
        return sorted_ids, counts.to(torch.int32), cumsum


def _make_inputs(
    token_count: int, top_k: int = 8, num_experts: int = 128, device: str = "cuda"
) -> dict[str, torch.Tensor]:
    """Draw expert ids uniformly in [0, num_experts), independently per (token, slot)."""
    ids = torch.randint(0, num_experts, (token_count, top_k), dtype=torch.int32, device=device)
    return {"topk_ids": ids}
