"""fused_qk_rmsnorm: per-head RMSNorm of the q and k slices of a packed fp16 QKV row, v untouched.

Inputs: ``hidden_states`` (T, (head_num + 2 * kv_head_num) * size_per_head) fp16 N(0,1), packed
as [q heads | k heads | v heads]; ``q_weight`` and ``k_weight`` (size_per_head) fp16 N(0,1).
Semantics: every q head and every k head (size_per_head values each) is normalised on its own,
x * rsqrt(mean(x^2) + 1e-6) in fp32, cast back to fp16, and then multiplied by its weight (q_weight
for q heads, k_weight for k heads) in fp16, as upstream applies the weight after the cast; the v
slice is copied unchanged. Output ``out`` with hidden_states' shape, fp16. Scales: N(0,1) as
upstream; normalised values are O(1) times N(0,1) weights, so a zero or constant output fails.
Phase rule: a single token (num_tokens == 1) -> "decode", more -> "prefill".
"""

import torch

OP_FAMILY = "norm"
SMOKE = [
    {
        "id": "smoke_gqa_tokens",
        "init_kwargs": {"head_num": 5, "kv_head_num": 1, "size_per_head": 96},
        "input_kwargs": {
            "num_tokens": 7,
            "head_num": 5,
            "kv_head_num": 1,
            "size_per_head": 96,
            "dtype": "fp16",
        },
    },
]

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
_EPS = 1e-6


def phase_of(num_tokens=1, **_: object) -> str:
    """A single token -> decode; several -> prefill."""
    return "decode" if int(num_tokens) == 1 else "prefill"


def _rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Normalise the last dim in fp32, cast back, then scale by the weight in x's dtype."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + _EPS)
    return normed.to(x.dtype) * weight


class Model(torch.nn.Module):
    """Per-head q/k RMSNorm (the weights are inputs, not parameters)."""

    def __init__(self, head_num=32, kv_head_num=8, size_per_head=128):
        super().__init__()
        self.head_num = head_num
        self.kv_head_num = kv_head_num
        self.size_per_head = size_per_head

    def forward(self, hidden_states, q_weight, k_weight):
        """Normalise the q and k heads, pass v through."""
        tokens, d = hidden_states.shape[0], self.size_per_head
        q_end = self.head_num * d
        k_end = q_end + self.kv_head_num * d
        q = _rms_norm(hidden_states[:, :q_end].view(tokens, self.head_num, d), q_weight)
        k = _rms_norm(hidden_states[:, q_end:k_end].view(tokens, self.kv_head_num, d), k_weight)
        return torch.cat([q.flatten(1), k.flatten(1), hidden_states[:, k_end:]], dim=1)


def _make_inputs(
    num_tokens=1, head_num=32, kv_head_num=8, size_per_head=128, dtype="fp16", device="cuda"
):
    """N(0,1) packed hidden states and per-head weights in ``dtype`` (fp16 upstream)."""
    dt = _DTYPES[dtype]
    width = (head_num + 2 * kv_head_num) * size_per_head
    return {
        "hidden_states": torch.randn(num_tokens, width, dtype=dt, device=device),
        "q_weight": torch.randn(size_per_head, dtype=dt, device=device),
        "k_weight": torch.randn(size_per_head, dtype=dt, device=device),
    }
