"""layer_norm via torch.nn.functional.layer_norm (PyTorch's fused LayerNorm kernel).

The library baseline: one F.layer_norm call on the bf16 input with the first H entries of the
model's bf16 weight and bias. PyTorch computes mean, biased variance, normalisation and the affine
transform in fp32 and rounds to bf16 once, as the reference does. The parameters are declared and
drawn exactly as the reference's (weight first, then bias, N(0, 1) rounded to bf16, with
``max_hidden_size`` entries), so the scorer loads the reference's weights into this model.
"""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    """F.layer_norm whose affine weight and bias are seeded bf16 parameters."""

    def __init__(self, eps: float = 1e-5, max_hidden_size: int = 8192):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(
            torch.randn(max_hidden_size).to(torch.bfloat16), requires_grad=False
        )
        self.bias = torch.nn.Parameter(
            torch.randn(max_hidden_size).to(torch.bfloat16), requires_grad=False
        )

    def forward(self, x):
        """x (..., H) bf16 -> (..., H) bf16."""
        hidden = x.shape[-1]
        if hidden > self.weight.numel():
            raise ValueError(
                f"x has last dimension {hidden} but the model holds {self.weight.numel()} "
                f"weights; build it with max_hidden_size >= {hidden}"
            )
        return F.layer_norm(x, (hidden,), self.weight[:hidden], self.bias[:hidden], self.eps)
