"""layer_norm: LayerNorm over the last dimension with an affine weight and bias (fp32 math).

Inputs: ``x`` bf16 of the ``shape`` kwarg (e.g. (T, 1, 1152) or (T, H)), drawn N(0, 1).
Upstream also draws a ``weight`` and a ``bias`` of the last dimension, bf16 N(0, 1), but its
metadata lists ``x`` as the only input, and forward's parameters are the metadata's: so here
they are parameters of the model instead, drawn N(0, 1) (bf16) at construction, where the scorer
has seeded torch, with ``max_hidden_size`` entries (8192, above every upstream last dimension,
since the model is built without the shape: upstream's init_kwargs are empty); forward uses their
first H entries. A candidate that declares the same two parameters gets these values loaded; one
that draws them itself must draw them the same way (weight first, then bias). Semantics: upcast
x, weight and bias to fp32; out = (x - mean) * rsqrt(var + eps) * weight + bias with the biased
variance over the last dimension and eps 1e-5 (PyTorch's default); round to bf16 once. Output:
``out`` bf16 of x's shape, a plain tensor. The output is O(1) with a random sign (normalised
N(0, 1) data times N(0, 1) weights plus N(0, 1) biases), so an all-zero or a constant output has
a relative L2 error near 1 and fails. Phase rule: rows are the product of all dimensions but the
last; at most 64 rows -> "decode" (a decode step of up to 64 sequences, one new token each),
more -> "prefill".
"""

import math

import torch

OP_FAMILY = "norm"
#: A batch of at most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64

SMOKE = [
    {"id": "smoke_13x1x200", "init_kwargs": None, "input_kwargs": {"shape": [13, 1, 200]}},
    {"id": "smoke_1x64", "init_kwargs": None, "input_kwargs": {"shape": [1, 64]}},
]


def phase_of(shape=(1, 1), **_: object) -> str:
    """At most 64 rows (all dimensions but the last) -> "decode", more -> "prefill"."""
    rows = math.prod(int(n) for n in shape[:-1])
    return "decode" if rows <= DECODE_MAX_TOKENS else "prefill"


class Model(torch.nn.Module):
    """LayerNorm whose affine weight and bias are seeded bf16 parameters (see the module doc)."""

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
        xf = x.float()
        mean = xf.mean(dim=-1, keepdim=True)
        var = (xf - mean).pow(2).mean(dim=-1, keepdim=True)
        normed = (xf - mean) * torch.rsqrt(var + self.eps)
        out = normed * self.weight[:hidden].float() + self.bias[:hidden].float()
        return out.to(torch.bfloat16)


def _make_inputs(shape=(1, 2048), device: str = "cuda"):
    """x ~ N(0, 1) bf16 of ``shape``."""
    return {"x": torch.randn(*(int(n) for n in shape), device=device).to(torch.bfloat16)}
