"""RMSNorm reference: fp32 math on bf16 tokens (weight applied in fp32), one cast at the end."""

import torch


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        inv = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * inv * weight.float()).to(x.dtype)


def _make_inputs(tokens: int, hidden: int, dtype: str = "bf16", device: str = "cuda"):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    x = torch.randn(tokens, hidden, device=device, dtype=torch.float32).to(dt)
    weight = (1.0 + 0.1 * torch.randn(hidden, device=device)).to(dt)
    return {"x": x, "weight": weight}
