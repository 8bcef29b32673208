"""rms_norm via torch.nn.functional.rms_norm (PyTorch's fused RMSNorm kernel on the GPU).

The library baseline: one fused call on the bf16 input and weight instead of the reference's
upcast, square, mean, rsqrt and two products. PyTorch computes the norm in fp32 and returns bf16;
where the weight is applied after the cast to bf16 (its CPU composite) the result differs from
the reference's single rounding by at most a few bf16 ulps, well inside bf16's tolerance.
"""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    """RMSNorm over the last dimension by F.rms_norm (the weight is an input)."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        """x (T, H) bf16, weight (H) bf16 -> (T, H) bf16."""
        return F.rms_norm(x, (x.shape[-1],), weight, self.eps)
