"""Fused residual add + RMSNorm reference: the sum and the norm in fp32, both outputs cast back.

The residual output is the rounded sum; the norm uses the unrounded fp32 sum, as vLLM's native path.
"""

import torch


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        s = x.float() + residual.float()
        inv = torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        y = (s * inv * weight.float()).to(x.dtype)
        return y, s.to(residual.dtype)


def _make_inputs(tokens: int, hidden: int, dtype: str = "bf16", device: str = "cuda"):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    x = torch.randn(tokens, hidden, device=device, dtype=torch.float32).to(dt)
    residual = torch.randn(tokens, hidden, device=device, dtype=torch.float32).to(dt)
    weight = (1.0 + 0.1 * torch.randn(hidden, device=device)).to(dt)
    return {"x": x, "residual": residual, "weight": weight}
