"""mrope: multimodal (t, h, w) rotary embedding of q and k from precomputed cos/sin tables.

Inputs: ``q`` (T, num_query_heads * head_size) and ``k`` (T, num_kv_heads * head_size) bf16;
``cos``, ``sin`` (3, T, rotary_dim / 2) fp32, the cosine and sine of angles drawn N(0, 0.1^2), one
row per position channel (temporal, height, width). Semantics: frequency slot j of the
rotary_dim / 2 slots takes its angle from channel 0 for the first mrope_section[0] slots, channel
1 for the next mrope_section[1], channel 2 for the last mrope_section[2] (non-interleaved); every
head is then rotated neox-style over its first ``rotary_dim`` dims (halves [x1 | x2] ->
[x1 cos - x2 sin | x2 cos + x1 sin]) in fp32, the remaining dims copied, and cast to bf16.
Outputs: dict {"q", "k"} with the input shapes, bf16. Decisions: the sections are the
``mrope_section`` init kwarg, [16, 24, 24] in every upstream shape (the input_semantics
paraphrase mentions [24, 20, 20]; the value the shapes pass to the constructor wins here); only
the upstream configuration (neox style, non-interleaved) is implemented, others raise. Scale:
upstream draws q and k as 0.02 * N(0,1), which puts every output below the bf16 atol (1e-2) so
that only the relative L2 check would bind; rotation is linear, so q and k are drawn N(0,1) here
and the elementwise check means something too (a kernel that skips the ~0.1 rad rotation fails
both). Phase rule: a single token (token_count == 1) -> "decode", more -> "prefill".
"""

import torch

OP_FAMILY = "rope"
SMOKE = [
    {
        "id": "smoke_gqa_tokens",
        "init_kwargs": {
            "head_size": 64,
            "rotary_dim": 64,
            "mrope_section": [8, 12, 12],
            "mrope_interleaved": False,
            "is_neox_style": True,
        },
        "input_kwargs": {
            "token_count": 7,
            "num_query_heads": 4,
            "num_kv_heads": 1,
            "head_size": 64,
            "rotary_dim": 64,
        },
    },
    {
        "id": "smoke_partial_rotary",
        "init_kwargs": {
            "head_size": 80,
            "rotary_dim": 64,
            "mrope_section": [16, 8, 8],
            "mrope_interleaved": False,
            "is_neox_style": True,
        },
        "input_kwargs": {
            "token_count": 5,
            "num_query_heads": 3,
            "num_kv_heads": 3,
            "head_size": 80,
            "rotary_dim": 64,
        },
    },
]


def phase_of(token_count=1, **_: object) -> str:
    """A single token -> decode; several -> prefill."""
    return "decode" if int(token_count) == 1 else "prefill"


class Model(torch.nn.Module):
    """Sectioned (t, h, w) neox rotary embedding (no parameters)."""

    def __init__(
        self,
        head_size=128,
        rotary_dim=128,
        mrope_section=(16, 24, 24),
        mrope_interleaved=False,
        is_neox_style=True,
    ):
        super().__init__()
        if mrope_interleaved or not is_neox_style:
            raise NotImplementedError(
                "mrope reference: only mrope_interleaved=False, is_neox_style=True "
                f"(got {mrope_interleaved}, {is_neox_style})"
            )
        if sum(mrope_section) * 2 != rotary_dim:
            raise ValueError(f"mrope_section {mrope_section} must sum to rotary_dim / 2")
        self.head_size = head_size
        self.rotary_dim = rotary_dim
        self.mrope_section = [int(s) for s in mrope_section]

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        tokens = x.shape[0]
        h = x.float().view(tokens, -1, self.head_size)
        half = self.rotary_dim // 2
        x1, x2, rest = h[..., :half], h[..., half : self.rotary_dim], h[..., self.rotary_dim :]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)
        return out.view(tokens, -1).to(x.dtype)

    def forward(self, q, k, cos, sin):
        """Rotate q and k with the sectioned cos/sin."""
        cos_t = torch.cat(
            [c[i] for i, c in enumerate(cos.float().split(self.mrope_section, dim=-1))], dim=-1
        ).unsqueeze(1)  # (T, 1, rotary_dim / 2)
        sin_t = torch.cat(
            [s[i] for i, s in enumerate(sin.float().split(self.mrope_section, dim=-1))], dim=-1
        ).unsqueeze(1)
        return {"q": self._rotate(q, cos_t, sin_t), "k": self._rotate(k, cos_t, sin_t)}


def _make_inputs(
    token_count=1,
    num_query_heads=16,
    num_kv_heads=1,
    head_size=128,
    rotary_dim=128,
    device: str = "cuda",
):
    """N(0,1) bf16 q/k (see the scale note); cos/sin of N(0, 0.1^2) angles per channel."""
    bf16 = torch.bfloat16
    angles = 0.1 * torch.randn(3, token_count, rotary_dim // 2, device=device)
    return {
        "q": torch.randn(token_count, num_query_heads * head_size, dtype=bf16, device=device),
        "k": torch.randn(token_count, num_kv_heads * head_size, dtype=bf16, device=device),
        "cos": angles.cos(),
        "sin": angles.sin(),
    }
