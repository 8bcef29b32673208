"""Neox-style RoPE reference: gather cos/sin by position, rotate halves in fp32, cast back.

cos_sin_cache row p holds cos(p * inv_freq) in its first half and sin(p * inv_freq) in its second;
rot_dim = cos_sin_cache.shape[-1] may be smaller than head_dim (partial rotary).
"""

import torch


class Model(torch.nn.Module):
    def __init__(self, head_dim: int = 128):
        super().__init__()
        self.head_dim = head_dim

    def forward(
        self,
        positions: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        cos_sin_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = cos_sin_cache.float().index_select(0, positions).chunk(2, dim=-1)
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        xf = x.float().reshape(x.shape[0], -1, self.head_dim)  # (tokens, heads, head_dim)
        rot_dim = 2 * cos.shape[-1]
        x1, x2 = xf[..., :rot_dim].chunk(2, dim=-1)
        c, s = cos[:, None, :], sin[:, None, :]  # broadcast over heads
        out = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s, xf[..., rot_dim:]), dim=-1)
        return out.reshape(x.shape).to(x.dtype)


def _make_inputs(
    tokens: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    rot_dim: int | None = None,
    max_position: int = 8192,
    base: float = 10000.0,
    dtype: str = "bf16",
    device: str = "cuda",
):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    rot = rot_dim or head_dim
    inv_freq = 1.0 / base ** (torch.arange(0, rot, 2, device=device, dtype=torch.float32) / rot)
    freqs = torch.outer(torch.arange(max_position, device=device, dtype=torch.float32), inv_freq)
    cos_sin_cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)  # (max_position, rot)
    positions = torch.randint(0, max_position, (tokens,), device=device, dtype=torch.int64)
    q = torch.randn(tokens, num_heads * head_dim, device=device, dtype=torch.float32).to(dt)
    k = torch.randn(tokens, num_kv_heads * head_dim, device=device, dtype=torch.float32).to(dt)
    return {"positions": positions, "q": q, "k": k, "cos_sin_cache": cos_sin_cache}
