"""gated_rms_norm: RMSNorm of each row times a SiLU (or sigmoid) gate, in fp32 (bf16 out).

Inputs: ``x`` (rows, H) bf16 drawn N(0, 1) * 0.02 (H = ``hidden_size``, 128 upstream: one value
head of a gated-delta-net layer per row); ``weight`` (H) bf16 drawn 1 + 0.02 * N(0, 1); ``z``
(rows, H) bf16 drawn N(0, 1), the gate. Semantics, all in fp32 from the upcast inputs: with
``norm_before_gate`` (upstream's setting) out = rmsnorm(x) * weight * act(z); without it
out = rmsnorm(x * act(z)) * weight; rmsnorm(y) = y * rsqrt(mean(y^2) + eps) over the row, eps
from the constructor (1e-6 upstream); act is SiLU for "silu"/"swish" (upstream) or the sigmoid
for "sigmoid". The result is rounded to bf16 once. Output: ``out`` (rows, H) bf16, a plain tensor.
The norm removes the 0.02 scale of ``x``, and SiLU of an N(0, 1) gate is O(0.5), so the output
is O(0.5) and varies in sign: an all-zero or a constant output has a relative L2 error near 1 and
fails. Phase rule: rows are tokens times value heads; at most 64 * 32 = 2048 rows (a decode step
of up to 64 sequences with up to 32 value heads each) -> "decode", more -> "prefill" (every
upstream shape has over 10^5 rows, so all are prefill).
"""

import torch
import torch.nn.functional as F

OP_FAMILY = "norm"
#: At most 64 tokens (one per sequence) times 32 value heads of one row each is a decode step.
DECODE_MAX_ROWS = 64 * 32

SMOKE = [
    {
        "id": "smoke_37x128",
        "init_kwargs": {"eps": 1e-6, "norm_before_gate": True, "activation": "silu"},
        "input_kwargs": {"rows": 37, "hidden_size": 128},
    },
    {
        "id": "smoke_5x96_gate_first_sigmoid",
        "init_kwargs": {"eps": 1e-6, "norm_before_gate": False, "activation": "sigmoid"},
        "input_kwargs": {"rows": 5, "hidden_size": 96},
    },
]


def phase_of(rows: int = 1, **_: object) -> str:
    """At most 2048 rows (64 tokens x 32 value heads) -> "decode", more -> "prefill"."""
    return "decode" if rows <= DECODE_MAX_ROWS else "prefill"


class Model(torch.nn.Module):
    """Gated RMSNorm (no parameters: the weight is an input)."""

    def __init__(self, eps: float = 1e-6, norm_before_gate: bool = True, activation: str = "silu"):
        super().__init__()
        if activation not in ("silu", "swish", "sigmoid"):
            raise ValueError(
                f"activation {activation!r} is not supported; use 'silu', 'swish' or 'sigmoid'"
            )
        self.eps = eps
        self.norm_before_gate = norm_before_gate
        self.activation = activation

    def _gate(self, z):
        return torch.sigmoid(z) if self.activation == "sigmoid" else F.silu(z)

    def forward(self, x, weight, z):
        """x, z (rows, H) bf16; weight (H) bf16 -> (rows, H) bf16."""
        xf, gate = x.float(), self._gate(z.float())
        if not self.norm_before_gate:
            xf = xf * gate
        normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        out = normed * weight.float()
        if self.norm_before_gate:
            out = out * gate
        return out.to(torch.bfloat16)


def _make_inputs(rows: int = 1, hidden_size: int = 128, device: str = "cuda"):
    """x ~ N(0, 1) * 0.02, weight ~ 1 + 0.02 N(0, 1), gate z ~ N(0, 1), all bf16."""
    bf16 = torch.bfloat16
    return {
        "x": (torch.randn(rows, hidden_size, device=device) * 0.02).to(bf16),
        "weight": (1.0 + 0.02 * torch.randn(hidden_size, device=device)).to(bf16),
        "z": torch.randn(rows, hidden_size, device=device).to(bf16),
    }
