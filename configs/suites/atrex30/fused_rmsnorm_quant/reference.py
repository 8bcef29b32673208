"""fused_rmsnorm_quant: residual add, RMSNorm, then dynamic per-token fp8 quantisation.

Inputs: ``x``, ``residual`` (T, H) bf16 drawn N(0, 1); ``weight`` (H) bf16 drawn N(0, 1)
(T = ``token_count``, H = ``hidden_size``). Semantics: residual_out = bf16(x + residual);
normed = r * rsqrt(mean(r^2) + eps) * weight computed in fp32 from r = residual_out upcast
(eps 1e-5, the constructor's default; upstream calls F.rms_norm with it), with no bf16 rounding
of ``normed``; per row, scale = max|normed| / FP8_MAX (a row whose max is 0 gets scale 1) and
quantized = fp8(normed / scale). fp8 here is NVIDIA's ``float8_e4m3fn`` (largest finite value
448), where the original benchmark used AMD's ``float8_e4m3fnuz`` (largest 240): the scales are
therefore max/448 instead of max/240, and the quantised values use the full +-448 range. The
division puts every value in [-448, 448] up to fp32 rounding; upstream does not clamp, and the
clamp here only guards that rounding (e4m3fn has no infinity, an overflowing cast would give
NaN). Output: a tuple (``quantized`` (T, H) float8_e4m3fn, ``scale`` (T, 1) fp32,
``residual_out`` (T, H) bf16), as metadata.json orders them; the scorer compares ``quantized``
after multiplying by its ``scale`` (FP8_SCALES). Inputs are N(0, 1), so every row's max is far
from 0, the scales vary from row to row and the outputs are O(1): an all-zero or a constant
output has a large relative error and fails. Phase rule: at most 64 tokens in the batch ->
"decode" (a decode step of up to 64 sequences, one new token each), more -> "prefill".
"""

import torch

OP_FAMILY = "quantization"
#: A batch of at most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64
#: Largest finite float8_e4m3fn value (NVIDIA's e4m3; AMD's e4m3fnuz upstream stops at 240).
FP8_MAX = 448.0

SMOKE = [
    {
        "id": "smoke_5x300",
        "init_kwargs": None,
        "input_kwargs": {"token_count": 5, "hidden_size": 300},
    },
    {
        "id": "smoke_3x128",
        "init_kwargs": None,
        "input_kwargs": {"token_count": 3, "hidden_size": 128},
    },
]
FP8_SCALES = {"0": "1"}


def phase_of(token_count: int = 1, **_: object) -> str:
    """At most 64 tokens -> "decode" (one new token per sequence), more -> "prefill"."""
    return "decode" if token_count <= DECODE_MAX_TOKENS else "prefill"


class Model(torch.nn.Module):
    """Residual add + RMSNorm + per-token fp8 (e4m3fn) quantisation (no parameters)."""

    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x, residual, weight):
        """x, residual (T, H) bf16; weight (H) bf16 -> (fp8 (T, H), fp32 (T, 1), bf16 (T, H))."""
        residual_out = (x.float() + residual.float()).to(torch.bfloat16)
        r = residual_out.float()
        inv_rms = torch.rsqrt(r.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        normed = r * inv_rms * weight.float()
        amax = normed.abs().amax(dim=-1, keepdim=True)
        scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
        quantized = (normed / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return quantized, scale, residual_out


def _make_inputs(token_count: int = 1, hidden_size: int = 2048, device: str = "cuda"):
    """x, residual and weight all N(0, 1) bf16."""
    bf16 = torch.bfloat16
    shape = (token_count, hidden_size)
    return {
        "x": torch.randn(shape, device=device).to(bf16),
        "residual": torch.randn(shape, device=device).to(bf16),
        "weight": torch.randn(hidden_size, device=device).to(bf16),
    }
