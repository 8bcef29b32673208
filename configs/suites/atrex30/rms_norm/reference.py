"""rms_norm: row-wise RMSNorm of bf16 activations with a bf16 weight, computed in fp32.

Inputs: ``x`` (T, H) bf16 drawn N(0, 1) * 0.02 (T = ``token_count``, H = ``hidden_size``);
``weight`` (H) bf16 drawn 1 + 0.02 * N(0, 1). Semantics: every row is upcast to fp32 and
out = x * rsqrt(mean(x^2) + eps) * weight, with the mean over the H elements of the row, eps from
the constructor (1e-6 upstream) and the weight upcast to fp32 too; the result is rounded to bf16
once, at the end. Output: ``out`` (T, H) bf16, a plain tensor. The normalisation removes the 0.02
input scale, so the output is about N(0, 1) (times a weight near 1): far above bf16's atol, and an
all-zero or a constant output has a relative L2 error near 1, so neither passes. Phase rule: at
most 64 tokens in the batch -> "decode" (a decode step of up to 64 sequences, one new token
each), more -> "prefill"; the suite's other token-count operators use the same threshold.
"""

import torch

OP_FAMILY = "norm"
#: A batch of at most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64

SMOKE = [
    {
        "id": "smoke_7x300",
        "init_kwargs": {"eps": 1e-6},
        "input_kwargs": {"token_count": 7, "hidden_size": 300},
    },
    {
        "id": "smoke_1x64",
        "init_kwargs": {"eps": 1e-6},
        "input_kwargs": {"token_count": 1, "hidden_size": 64},
    },
]


def phase_of(token_count: int = 1, **_: object) -> str:
    """At most 64 tokens -> "decode" (one new token per sequence), more -> "prefill"."""
    return "decode" if token_count <= DECODE_MAX_TOKENS else "prefill"


class Model(torch.nn.Module):
    """RMSNorm over the last dimension (no parameters: the weight is an input)."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        """Normalise each row of ``x`` (T, H) bf16 and scale by ``weight`` (H) bf16 -> bf16."""
        xf = x.float()
        inv_rms = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * inv_rms * weight.float()).to(torch.bfloat16)


def _make_inputs(token_count: int = 1, hidden_size: int = 1024, device: str = "cuda"):
    """x ~ N(0, 1) * 0.02 and weight ~ 1 + 0.02 N(0, 1), both bf16."""
    bf16 = torch.bfloat16
    x = (torch.randn(token_count, hidden_size, device=device) * 0.02).to(bf16)
    weight = (1.0 + 0.02 * torch.randn(hidden_size, device=device)).to(bf16)
    return {"x": x, "weight": weight}
