"""gated_rms_norm via torch.nn.functional.rms_norm and F.silu / torch.sigmoid, in bf16.

The library baseline: one fused F.rms_norm call (fp32 math inside) and one gate activation on
the bf16 inputs, multiplied in bf16: three kernels where the reference runs a dozen fp32 ones.
Each step rounds to bf16 (up to four roundings against the reference's one, under 0.8% relative
in the worst case), inside bf16's 1% tolerance. Without ``norm_before_gate`` the gated input
x * act(z) is formed in bf16 first and then normalised, as in the reference's order.
"""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    """Gated RMSNorm by F.rms_norm (the weight is an input)."""

    def __init__(self, eps: float = 1e-6, norm_before_gate: bool = True, activation: str = "silu"):
        super().__init__()
        if activation not in ("silu", "swish", "sigmoid"):
            raise ValueError(
                f"activation {activation!r} is not supported; use 'silu', 'swish' or 'sigmoid'"
            )
        self.eps = eps
        self.norm_before_gate = norm_before_gate
        self.activation = activation

    def forward(self, x, weight, z):
        """x, z (rows, H) bf16; weight (H) bf16 -> (rows, H) bf16."""
        gate = torch.sigmoid(z) if self.activation == "sigmoid" else F.silu(z)
        if self.norm_before_gate:
            return F.rms_norm(x, (x.shape[-1],), weight, self.eps) * gate
        return F.rms_norm(x * gate, (x.shape[-1],), weight, self.eps)
