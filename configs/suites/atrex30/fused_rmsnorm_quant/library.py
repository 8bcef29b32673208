"""fused_rmsnorm_quant via a bf16 add, torch.nn.functional.rms_norm in fp32 and an fp8 cast.

The library baseline: the residual sum is one bf16 add (fp32 inside, rounded once, exactly the
reference's residual_out); the norm is one fused F.rms_norm call on its fp32 upcast with the fp32
weight (the normed values stay fp32, as the reference keeps them: a bf16 norm would move the
per-token scales beyond fp32's tolerance); the row absmax is one torch.linalg.vector_norm
(ord=inf) reduction; then divide, clamp and cast to float8_e4m3fn as the reference does.
"""

import torch
import torch.nn.functional as F

FP8_MAX = 448.0


class Model(torch.nn.Module):
    """Residual add + F.rms_norm + per-token fp8 (e4m3fn) quantisation (no parameters)."""

    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x, residual, weight):
        """x, residual (T, H) bf16; weight (H) bf16 -> (fp8 (T, H), fp32 (T, 1), bf16 (T, H))."""
        residual_out = x + residual
        normed = F.rms_norm(residual_out.float(), (x.shape[-1],), weight.float(), self.eps)
        amax = torch.linalg.vector_norm(normed, float("inf"), dim=-1, keepdim=True)
        scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
        quantized = (normed / scale).clamp_(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return quantized, scale, residual_out
