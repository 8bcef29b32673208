"""causal_conv1d: depthwise causal conv over time with a carried-in state, plus bias, then SiLU.

Inputs: ``x`` (dim, T) bf16; ``weight`` (dim, width) bf16 (width = 4 upstream); ``bias`` (dim)
bf16; ``initial_state`` (1, dim, width - 1) bf16, the last width - 1 inputs of the previous chunk
of this one sequence. Semantics: prepend the state to x along time, then for every channel d and
step t, out[d, t] = act(bias[d] + sum_j weight[d, j] * xp[d, t + j]) with xp the padded input,
accumulated in fp32 and cast to bf16; act is SiLU (``activation`` = "silu"/"swish") or the
identity (None). Output ``out`` (dim, T) bf16. Scale decision: upstream draws all four inputs as
0.02 * N(0,1), which makes every output ~1e-2 (at the bf16 atol) and lets the bias dominate the
convolution, so that only the relative L2 check would bind; here all four are N(0,1) (the
pre-activation is ~N(0, width + 1)), the op's structure unchanged. A zero or constant output
fails. The operator's phase is "prefill".
"""

import torch

OP_FAMILY = "conv"
SMOKE = [
    {
        "id": "smoke_odd_dim",
        "init_kwargs": {"activation": "silu"},
        "input_kwargs": {"token_count": 37, "dim": 100, "width": 4},
    },
    {
        "id": "smoke_one_token",
        "init_kwargs": {"activation": "silu"},
        "input_kwargs": {"token_count": 1, "dim": 64, "width": 4},
    },
]


class Model(torch.nn.Module):
    """Depthwise causal conv1d + SiLU (weights are inputs, not parameters)."""

    def __init__(self, activation="silu"):
        super().__init__()
        if activation not in (None, "silu", "swish"):
            raise ValueError(f"activation must be None, 'silu' or 'swish', got {activation!r}")
        self.activation = activation

    def forward(self, x, weight, bias, initial_state):
        """Convolve each channel over time with its own taps, starting from the given state."""
        tokens, width = x.shape[-1], weight.shape[-1]
        xp = torch.cat([initial_state[0].float(), x.float()], dim=-1)  # (dim, width - 1 + T)
        w = weight.float()
        acc = bias.float().unsqueeze(-1).expand(-1, tokens)
        for j in range(width):
            acc = acc + w[:, j : j + 1] * xp[:, j : j + tokens]
        if self.activation is not None:
            acc = torch.nn.functional.silu(acc)
        return acc.to(x.dtype)


def _make_inputs(token_count=1, dim=4096, width=4, device: str = "cuda"):
    """N(0,1) bf16 input, taps, bias and initial state (see the scale decision above)."""
    bf16 = torch.bfloat16
    return {
        "x": torch.randn(dim, token_count, dtype=bf16, device=device),
        "weight": torch.randn(dim, width, dtype=bf16, device=device),
        "bias": torch.randn(dim, dtype=bf16, device=device),
        "initial_state": torch.randn(1, dim, width - 1, dtype=bf16, device=device),
    }
