"""causal_conv1d via torch.nn.functional.conv1d (depthwise, groups=dim) and F.silu, in bf16.

The library baseline: the carried-in state is prepended along time, then one depthwise F.conv1d
call with the bias (PyTorch's depthwise convolution kernel, fp32 accumulation) and one F.silu,
instead of the reference's width-many fp32 multiply-adds. The pre-activation and the activation
are each rounded to bf16 (two roundings against the reference's one), inside bf16's tolerance.
"""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    """Depthwise causal conv1d + SiLU by F.conv1d (weights are inputs, not parameters)."""

    def __init__(self, activation="silu"):
        super().__init__()
        if activation not in (None, "silu", "swish"):
            raise ValueError(f"activation must be None, 'silu' or 'swish', got {activation!r}")
        self.activation = activation

    def forward(self, x, weight, bias, initial_state):
        """Convolve each channel over time with its own taps, starting from the given state."""
        dim, width = weight.shape
        xp = torch.cat([initial_state[0], x], dim=-1).unsqueeze(0)  # (1, dim, width - 1 + T)
        out = F.conv1d(xp, weight.unsqueeze(1), bias, groups=dim)[0]
        return F.silu(out) if self.activation is not None else out
