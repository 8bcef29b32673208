"""topk_filter: keep each row's top-k logits and set every other entry to -inf (fp32).

Inputs: ``logits`` (seq_len, hidden_size) fp32 N(0,1) (hidden_size is the vocabulary, up to
152064; seq_len the number of rows). Semantics: per row, find the k-th largest value (k =
``top_k``, 50 for every upstream shape: the shapes either pass it or pass no init kwargs and get
the default) and keep every entry >= it (ties with the k-th value are all kept), replacing the
rest with -inf; a row with at most k entries is kept whole. Output ``out`` with logits' shape,
fp32: kept entries are bit-identical copies and the -inf positions must match exactly (the scorer
requires +-inf to coincide), so a zero or constant output fails. The operator's phase is
"decode" (sampling after the last layer).
"""

import torch

OP_FAMILY = "sampling"
SMOKE = [
    {
        "id": "smoke_rows_odd_vocab",
        "init_kwargs": {"top_k": 50},
        "input_kwargs": {"seq_len": 3, "hidden_size": 1001},
    },
    {
        "id": "smoke_default_k",
        "init_kwargs": {},
        "input_kwargs": {"seq_len": 5, "hidden_size": 257},
    },
]


class Model(torch.nn.Module):
    """Top-k logit mask (no parameters)."""

    def __init__(self, top_k=50):
        super().__init__()
        self.top_k = top_k

    def forward(self, logits):
        """Mask everything below each row's k-th largest logit with -inf."""
        if self.top_k >= logits.shape[-1]:
            return logits.clone()
        kth = torch.topk(logits, self.top_k, dim=-1).values[..., -1:]
        return logits.masked_fill(logits < kth, float("-inf"))


def _make_inputs(seq_len=1, hidden_size=151936, device: str = "cuda"):
    """N(0,1) fp32 logits."""
    return {"logits": torch.randn(seq_len, hidden_size, dtype=torch.float32, device=device)}
