"""moe_align_block_size: group routed (token, slot) pairs by expert, each group padded to a block.

Input: ``topk_ids`` (T, k) int32, each entry uniform in [0, num_experts) (k = 8 and 128 experts
upstream; a token may pick an expert twice). Flat index f = t * k + j names slot j of token t.
Semantics: for each expert in ascending order, the ascending flat indices that chose it, followed
by the sentinel T * k up to the next multiple of ``block_size``; an expert nobody chose takes no
block at all. Outputs, a tuple in metadata.json's order, all int32 and compared exactly:
``sorted_token_ids`` (num_tokens_post_pad,), ``expert_ids`` (num_tokens_post_pad / block_size,),
the expert of each block, and ``num_tokens_post_pad`` (1,), the padded total. The lengths depend
on the data (upstream allocates a worst-case buffer; here the outputs are exactly as long as the
padded total, which the paraphrase calls variable-length outputs); the one-element shape of
``num_tokens_post_pad`` is a choice made here. No fp8, no scales. All-zero or all-one outputs
cannot match: the sentinel and the padded total are at least k and block_size, and the smoke
cases route to several experts. Phase rule: at most 64 tokens -> "decode" (one new token per
sequence), more -> "prefill".
"""

import torch

OP_FAMILY = "moe"
#: At most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64

SMOKE = [
    {
        "id": "smoke_11tok_top4_9exp_block8",
        "init_kwargs": {"block_size": 8, "num_experts": 9},
        "input_kwargs": {"token_count": 11, "num_experts": 9, "top_k": 4},
    },
    {
        "id": "smoke_1tok_top8_128exp_block128",
        "init_kwargs": {"block_size": 128, "num_experts": 128},
        "input_kwargs": {"token_count": 1, "num_experts": 128, "top_k": 8},
    },
]


def phase_of(token_count: int = 1, **_: object) -> str:
    """At most 64 tokens -> "decode" (one new token per sequence), more -> "prefill"."""
    return "decode" if token_count <= DECODE_MAX_TOKENS else "prefill"


class Model(torch.nn.Module):
    """Sort (token, slot) pairs by expert and pad each expert's run to a multiple of a block."""

    def __init__(self, block_size: int = 128, num_experts: int = 128):
        super().__init__()
        self.block_size = block_size
        self.num_experts = num_experts

    def forward(self, topk_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        device = topk_ids.device
        flat = topk_ids.reshape(-1).long()
        sentinel = flat.numel()
        counts = torch.bincount(flat, minlength=self.num_experts)
        padded = (counts + self.block_size - 1) // self.block_size * self.block_size
        padded_start = torch.cumsum(padded, 0) - padded
        count_start = torch.cumsum(counts, 0) - counts
        # A stable sort keeps the flat indices ascending within each expert.
        order = torch.argsort(flat, stable=True)
        expert_of = flat[order]
        rank = torch.arange(sentinel, device=device) - count_start[expert_of]
        total = int(padded.sum())
        sorted_ids = torch.full((total,), sentinel, dtype=torch.int32, device=device)
        sorted_ids[padded_start[expert_of] + rank] = order.to(torch.int32)
        experts = torch.arange(self.num_experts, device=device, dtype=torch.int32)
        expert_ids = experts.repeat_interleave(padded // self.block_size)
        num_post_pad = torch.tensor([total], dtype=torch.int32, device=device)
        return sorted_ids, expert_ids, num_post_pad


def _make_inputs(
    token_count: int, num_experts: int = 128, top_k: int = 8, device: str = "cuda"
) -> dict[str, torch.Tensor]:
    """Draw expert ids uniformly in [0, num_experts), independently per (token, slot)."""
    ids = torch.randint(0, num_experts, (token_count, top_k), dtype=torch.int32, device=device)
    return {"topk_ids": ids}
