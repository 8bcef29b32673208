"""SiLU-and-mul reference: both halves upcast to fp32, the product cast back to the input dtype."""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        xf = x.float()
        return (F.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)


def _make_inputs(tokens: int, d: int, dtype: str = "bf16", device: str = "cuda"):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    x = torch.randn(tokens, 2 * d, device=device, dtype=torch.float32).to(dt)
    return {"x": x}
