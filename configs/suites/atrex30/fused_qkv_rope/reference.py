"""fused_qkv_rope: split a packed QKV projection into heads and apply neox RoPE to q and k.

Inputs: ``qkv`` (T, (num_heads + 2 * num_kv_heads) * head_dim) N(0,1) in bf16 or fp16 (the
``dtype`` kwarg), packed as [q heads | k heads | v heads]; ``positions`` (T) int32; ``qkv_bias``
an optional bias of qkv's last dimension, None here (no upstream shape has one). Semantics: add
the bias if given, split into q (T, num_heads, head_dim), k and v (T, num_kv_heads, head_dim);
rotate the first ``rope_dim`` dims of every q and k head neox-style (halves [x1 | x2] ->
[x1 cos - x2 sin | x2 cos + x1 sin]) with angle position * 10000^(-2i / rope_dim), all in fp32;
v is copied unchanged. Outputs: the tuple (q, k, v) in qkv's dtype. One decision departs from
upstream: upstream positions are arange(T), and every upstream shape has T == 1, so the only
position is 0, where RoPE is the identity and a kernel that skips the rotation would pass. Here
positions are start + arange(T) with start drawn uniformly from [0, 1024) (a decode step at a
realistic context length; angles stay below ~1100 rad, where fp32 angle rounding is ~1e-4 and
well inside the fp16/bf16 tolerances). N(0,1) inputs: a zero or constant output fails. Phase
rule: a single token (total_tokens == 1) -> "decode", more -> "prefill".
"""

import torch

OP_FAMILY = "rope"
SMOKE = [
    {
        "id": "smoke_gqa_bf16",
        "init_kwargs": {"num_heads": 6, "num_kv_heads": 2, "head_dim": 64, "rope_dim": 64},
        "input_kwargs": {
            "total_tokens": 5,
            "num_heads": 6,
            "num_kv_heads": 2,
            "head_dim": 64,
            "dtype": "bf16",
        },
    },
    {
        "id": "smoke_partial_rope_fp16",
        "init_kwargs": {"num_heads": 3, "num_kv_heads": 1, "head_dim": 128, "rope_dim": 96},
        "input_kwargs": {
            "total_tokens": 3,
            "num_heads": 3,
            "num_kv_heads": 1,
            "head_dim": 128,
            "dtype": "fp16",
        },
    },
]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
_ROPE_BASE = 10000.0


def phase_of(total_tokens=1, **_: object) -> str:
    """A single token -> decode; several -> prefill."""
    return "decode" if int(total_tokens) == 1 else "prefill"


def _neox_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first 2 * cos.shape[-1] dims of fp32 x (T, H, D); cos/sin are (T, 1, half)."""
    half = cos.shape[-1]
    x1, x2, rest = x[..., :half], x[..., half : 2 * half], x[..., 2 * half :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


class Model(torch.nn.Module):
    """QKV split + neox rotary embedding (no parameters)."""

    def __init__(self, num_heads=32, num_kv_heads=4, head_dim=128, rope_dim=128):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.rope_dim = rope_dim

    def forward(self, qkv, positions, qkv_bias):
        """Return (q, k, v) with q and k rotated by their token's position."""
        x = qkv.float()
        if qkv_bias is not None:
            x = x + qkv_bias.float()
        tokens, d = qkv.shape[0], self.head_dim
        q_end = self.num_heads * d
        k_end = q_end + self.num_kv_heads * d
        q = x[:, :q_end].view(tokens, self.num_heads, d)
        k = x[:, q_end:k_end].view(tokens, self.num_kv_heads, d)
        v = x[:, k_end:].view(tokens, self.num_kv_heads, d)
        exponent = torch.arange(0, self.rope_dim, 2, device=qkv.device, dtype=torch.float32)
        inv_freq = 1.0 / (_ROPE_BASE ** (exponent / self.rope_dim))
        angles = positions.float().unsqueeze(-1) * inv_freq  # (T, rope_dim / 2)
        cos, sin = angles.cos().unsqueeze(1), angles.sin().unsqueeze(1)
        return (
            _neox_rope(q, cos, sin).to(qkv.dtype),
            _neox_rope(k, cos, sin).to(qkv.dtype),
            v.to(qkv.dtype).contiguous(),
        )


def _make_inputs(
    total_tokens=1, num_heads=32, num_kv_heads=4, head_dim=128, dtype="bf16", device: str = "cuda"
):
    """N(0,1) packed qkv; consecutive positions from a random start; no bias."""
    width = (num_heads + 2 * num_kv_heads) * head_dim
    start = int(torch.randint(0, 1024, ()))
    return {
        "qkv": torch.randn(total_tokens, width, dtype=_DTYPES[dtype], device=device),
        "positions": torch.arange(start, start + total_tokens, dtype=torch.int32, device=device),
        "qkv_bias": None,
    }
