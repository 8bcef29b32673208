"""l2_norm via torch.nn.functional.normalize (a norm reduction and one division, in bf16).

The library baseline: F.normalize(x, p=2, dim=-1) on the bf16 input, x / max(||x||, eps'),
with eps' = sqrt(eps) so that a row's norm is clamped where the reference's
rsqrt(sum(x^2) + eps) stops following it (for any row with norm above 1e-3 the two agree to
~eps / norm^2). PyTorch accumulates the norm in fp32 and rounds it and the quotient to bf16:
two roundings instead of one, a few bf16 ulps at most, well inside bf16's tolerance.
"""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    """Row-wise L2 normalisation by F.normalize (no parameters)."""

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
        return F.normalize(x, p=2.0, dim=-1, eps=self.eps**0.5)
