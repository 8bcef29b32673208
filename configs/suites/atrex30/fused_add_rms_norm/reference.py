"""fused_add_rms_norm: add a residual, then RMSNorm the sum; return both (bf16, fp32 math).

Inputs: ``x`` (T, H) bf16 drawn N(0, 1) * 0.02; ``residual`` (T, H) bf16 drawn N(0, 1);
``weight`` (H) bf16 drawn 1 + 0.02 * N(0, 1) (T = ``token_count``, H = ``hidden_size``).
Semantics: residual_out = bf16(x + residual) (the sum of the two bf16 values, rounded once); the
norm reads that rounded sum, upcast to fp32: out = bf16(r * rsqrt(mean(r^2) + eps) * weight) with
the mean over the row, eps from the constructor (1e-6 upstream) and the weight upcast to fp32.
The original operator (vLLM) updates ``x`` and ``residual`` in place; this reference leaves its
inputs alone and returns a dict ``{"out", "residual"}``, both (T, H) bf16, so a candidate must
not write into its inputs either. Both outputs are about N(0, 1) in magnitude (the residual
dominates the sum and the norm removes the scale), so an all-zero or a constant output has a
relative L2 error near 1 and fails. Phase rule: at most 64 tokens in the batch -> "decode" (a
decode step of up to 64 sequences, one new token each), more -> "prefill".
"""

import torch

OP_FAMILY = "norm"
#: A batch of at most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64

SMOKE = [
    {
        "id": "smoke_5x300",
        "init_kwargs": {"eps": 1e-6},
        "input_kwargs": {"token_count": 5, "hidden_size": 300},
    },
    {
        "id": "smoke_2x64",
        "init_kwargs": {"eps": 1e-6},
        "input_kwargs": {"token_count": 2, "hidden_size": 64},
    },
]


def phase_of(token_count: int = 1, **_: object) -> str:
    """At most 64 tokens -> "decode" (one new token per sequence), more -> "prefill"."""
    return "decode" if token_count <= DECODE_MAX_TOKENS else "prefill"


class Model(torch.nn.Module):
    """Residual add followed by RMSNorm (no parameters: the weight is an input)."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, residual, weight):
        """x, residual (T, H) bf16; weight (H) bf16 -> {"out", "residual"} (T, H) bf16."""
        residual_out = (x.float() + residual.float()).to(torch.bfloat16)
        r = residual_out.float()
        inv_rms = torch.rsqrt(r.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        out = (r * inv_rms * weight.float()).to(torch.bfloat16)
        return {"out": out, "residual": residual_out}


def _make_inputs(token_count: int = 1, hidden_size: int = 2048, device: str = "cuda"):
    """x ~ N(0, 1) * 0.02, residual ~ N(0, 1), weight ~ 1 + 0.02 N(0, 1), all bf16."""
    bf16 = torch.bfloat16
    shape = (token_count, hidden_size)
    return {
        "x": (torch.randn(shape, device=device) * 0.02).to(bf16),
        "residual": torch.randn(shape, device=device).to(bf16),
        "weight": (1.0 + 0.02 * torch.randn(hidden_size, device=device)).to(bf16),
    }
