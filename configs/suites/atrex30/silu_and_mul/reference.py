"""silu_and_mul: SiLU of the first half of the last dimension times the second half (bf16).

Inputs: ``x`` bf16 of the ``shape`` kwarg (..., 2d), drawn N(0, 1); its first d columns are the
gate, the last d the "up" projection (vLLM's layout). Semantics: s = bf16(SiLU(fp32(gate))), the
activation rounded to bf16 before the product, then out = bf16(s * up) (a bf16 product, i.e. the
exact product of two bf16 values rounded once): the double rounding is upstream's and is kept.
A last dimension below 2 has no halves: then out = bf16(SiLU(fp32(x))), upstream's fallback. An
odd last dimension of 3 or more is rejected (ValueError). Output: ``out`` (..., d) bf16, a plain
tensor. The output is O(0.5) with a random sign, so an all-zero or a constant output has a
relative L2 error near 1 and fails. Phase rule: rows are the product of all dimensions but the
last; at most 64 rows -> "decode" (a decode step of up to 64 sequences, one new token each),
more -> "prefill".
"""

import math

import torch
import torch.nn.functional as F

OP_FAMILY = "activation"
#: A batch of at most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64

SMOKE = [
    {"id": "smoke_7x298", "init_kwargs": None, "input_kwargs": {"shape": [7, 298]}},
    {"id": "smoke_2x3x96", "init_kwargs": None, "input_kwargs": {"shape": [2, 3, 96]}},
]


def phase_of(shape=(1, 2), **_: object) -> str:
    """At most 64 rows (all dimensions but the last) -> "decode", more -> "prefill"."""
    rows = math.prod(int(n) for n in shape[:-1])
    return "decode" if rows <= DECODE_MAX_TOKENS else "prefill"


class Model(torch.nn.Module):
    """Gated SiLU (no parameters)."""

    def forward(self, x):
        """x (..., 2d) bf16 -> (..., d) bf16."""
        width = x.shape[-1]
        if width < 2:
            return F.silu(x.float()).to(torch.bfloat16)
        if width % 2:
            raise ValueError(f"x's last dimension {width} is odd; it must hold two equal halves")
        gate, up = x.split(width // 2, dim=-1)
        activated = F.silu(gate.float()).to(torch.bfloat16)
        return (activated.float() * up.float()).to(torch.bfloat16)


def _make_inputs(shape=(1, 2048), device: str = "cuda"):
    """x ~ N(0, 1) bf16 of ``shape``."""
    return {"x": torch.randn(*(int(n) for n in shape), device=device).to(torch.bfloat16)}
