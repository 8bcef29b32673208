"""l2_norm: scale each row of a bf16 matrix to unit L2 norm (fp32 math, bf16 out).

Inputs: ``x`` (T, H) bf16 drawn N(0, 1) (T = ``num_tokens``, H = ``hidden_size``, 2048
upstream). Semantics: per row, upcast to fp32, out = x * rsqrt(sum(x^2) + eps) with the sum over
all H elements of the row (this operator normalises whole 2048-wide rows, as the upstream data
describes it, not 128-wide head slices) and eps 1e-6; rounded to bf16 once. Output: ``out``
(T, H) bf16, a plain tensor. The result does not depend on the input's scale, and its elements
are about H^-1/2 (0.022 for H = 2048): bf16's elementwise atol (1e-2) is loose at that size, so
the scorer's whole-output relative L2 bound (1e-2) carries the judgement; an all-zero or a
constant output has a relative L2 error near 1 there and fails. ``hidden_size`` is also an init
argument upstream; the model records it and checks the input's width against it. Phase rule: at
most 64 tokens -> "decode" (a decode step of up to 64 sequences, one new token each), more ->
"prefill".
"""

import torch

OP_FAMILY = "norm"
#: A batch of at most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64

SMOKE = [
    {
        "id": "smoke_9x200",
        "init_kwargs": {"hidden_size": 200},
        "input_kwargs": {"num_tokens": 9, "hidden_size": 200},
    },
    {
        "id": "smoke_1x64",
        "init_kwargs": {"hidden_size": 64},
        "input_kwargs": {"num_tokens": 1, "hidden_size": 64},
    },
]


def phase_of(num_tokens: int = 1, **_: object) -> str:
    """At most 64 tokens -> "decode" (one new token per sequence), more -> "prefill"."""
    return "decode" if num_tokens <= DECODE_MAX_TOKENS else "prefill"


class Model(torch.nn.Module):
    """Row-wise L2 normalisation (no parameters)."""

    def __init__(self, hidden_size: int = 2048, eps: float = 1e-6):
        super().__init__()
        self.hidden_size = hidden_size
        self.eps = eps

    def forward(self, x):
        """x (T, H) bf16 -> (T, H) bf16 with unit-norm rows."""
        if x.shape[-1] != self.hidden_size:
            raise ValueError(
                f"x has width {x.shape[-1]}, the model was built for hidden_size "
                f"{self.hidden_size}; build it with the input's width"
            )
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).sum(dim=-1, keepdim=True) + self.eps)).to(x.dtype)


def _make_inputs(num_tokens: int = 1, hidden_size: int = 2048, device: str = "cuda"):
    """x ~ N(0, 1) bf16."""
    return {"x": torch.randn(num_tokens, hidden_size, device=device).to(torch.bfloat16)}
