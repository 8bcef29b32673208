"""linear_sigmoid_mul: a linear layer's sigmoid gating another tensor, out = sigmoid(x W^T + b) * m.

Inputs: ``hidden_states`` (T, H) bf16, ``weight`` (N, H) bf16 drawn N(0, 1) * H^-0.5, ``bias`` (N,)
bf16 drawn N(0, 1) * 0.02, ``post_mul_mat`` (T, N) bf16 (N = out_features). Upstream draws
``hidden_states`` and ``post_mul_mat`` N(0, 1) * 0.02; here both are drawn N(0, 1). With
upstream's scale the logits are about 0.02, the sigmoid is 0.5 to within 1%, and a candidate that
skipped the matmul (sigmoid = 0.5) would pass bf16's tolerance; the products would also be about
0.01, the size of bf16's atol. With N(0, 1) inputs the logits are O(1) and the outputs O(0.5).
Semantics: logits = x W^T + b in fp32 (the bf16 operands upcast), out = sigmoid(logits) *
post_mul_mat in fp32, rounded once to bf16. Output: ``out`` (T, N) bf16. An all-zero or constant
output misses the relative-L2 check by far. Phase rule: at most 64 tokens -> "decode" (one new
token per sequence), more -> "prefill".
"""

import torch

OP_FAMILY = "gemm"
#: At most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64

SMOKE = [
    {
        "id": "smoke_7tok_h96_n200",
        "init_kwargs": None,
        "input_kwargs": {"token_count": 7, "hidden_size": 96, "out_features": 200},
    },
    {
        "id": "smoke_1tok_h160_n72",
        "init_kwargs": None,
        "input_kwargs": {"token_count": 1, "hidden_size": 160, "out_features": 72},
    },
]


def phase_of(token_count: int = 1, **_: object) -> str:
    """At most 64 tokens -> "decode" (one new token per sequence), more -> "prefill"."""
    return "decode" if token_count <= DECODE_MAX_TOKENS else "prefill"


class Model(torch.nn.Module):
    """fp32 linear + bias, sigmoid, times post_mul_mat, rounded to bf16."""

    def forward(
        self,
        hidden_states: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        post_mul_mat: torch.Tensor,
    ) -> torch.Tensor:
        logits = hidden_states.float() @ weight.float().t() + bias.float()
        return (torch.sigmoid(logits) * post_mul_mat.float()).to(torch.bfloat16)


def _make_inputs(
    token_count: int, hidden_size: int, out_features: int = 4096, device: str = "cuda"
) -> dict[str, torch.Tensor]:
    """Draw the operands (N(0, 1) activations and gated tensor, see the module doc)."""
    t, h, n = token_count, hidden_size, out_features
    bf16 = torch.bfloat16
    return {
        "hidden_states": torch.randn(t, h, device=device).to(bf16),
        "weight": (torch.randn(n, h, device=device) * h**-0.5).to(bf16),
        "bias": (torch.randn(n, device=device) * 0.02).to(bf16),
        "post_mul_mat": torch.randn(t, n, device=device).to(bf16),
    }
