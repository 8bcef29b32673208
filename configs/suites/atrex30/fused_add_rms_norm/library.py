"""fused_add_rms_norm via a bf16 add and torch.nn.functional.rms_norm (fused RMSNorm on the GPU).

The library baseline: the residual sum is one bf16 add (PyTorch adds in fp32 and rounds once,
exactly the reference's bf16(x + residual)), then one fused F.rms_norm call on that sum with the
bf16 weight, instead of the reference's chain of fp32 elementwise kernels. The norm is computed
in fp32; its bf16 output may round the weight product differently from the reference by a few
bf16 ulps, well inside bf16's tolerance. Returns fresh tensors; the inputs are not modified.
"""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    """Residual add, then F.rms_norm (the weight is an input)."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, residual, weight):
        """x, residual (T, H) bf16; weight (H) bf16 -> {"out", "residual"} (T, H) bf16."""
        residual_out = x + residual
        out = F.rms_norm(residual_out, (x.shape[-1],), weight, self.eps)
        return {"out": out, "residual": residual_out}
