"""reshape_and_cache: scatter new key/value rows into paged bf16 KV caches (in place).

Inputs: ``key``, ``value`` (T, H, D) bf16 N(0,1) where (T, H, D) is the ``shape`` kwarg;
``key_cache``, ``value_cache`` (ceil(T / block_size), block_size, H, D) bf16 zeros;
``slot_mapping`` (T) int64 = arange(T), the identity map used upstream (slot = block *
block_size + offset). Semantics (vLLM's "flash" layout): for each token t with slot_mapping[t]
>= 0, write key[t] to key_cache.view(-1, H, D)[slot] and likewise for value; a negative slot (a
padding token) is skipped. The caches are **updated in place**, as the original operator does, and
the reference returns them as a dict ``{"key_cache", "value_cache"}`` (bf16, cache shapes): the
scorer compares both the returned tensors and the updated inputs (``in_place``). Copying is exact,
so the outputs must match bit for bit; zeros (the untouched cache) or a constant fail since the
written rows are N(0,1). Phase rule: a single new token (T == 1) -> "decode", more -> "prefill".
"""

import math

import torch

OP_FAMILY = "cache"
SMOKE = [
    {
        "id": "smoke_tail_block",
        "init_kwargs": {},
        "input_kwargs": {"shape": [37, 3, 64], "block_size": 16},
    },
    {
        "id": "smoke_one_token",
        "init_kwargs": {},
        "input_kwargs": {"shape": [1, 4, 128], "block_size": 16},
    },
]


def phase_of(shape=(1, 1, 1), **_: object) -> str:
    """One new token (T == 1) -> decode; several -> prefill."""
    return "decode" if int(shape[0]) == 1 else "prefill"


class Model(torch.nn.Module):
    """KV-cache write (no parameters)."""

    def forward(self, key, value, key_cache, value_cache, slot_mapping):
        """Write each token's key/value at its slot; negative slots are skipped."""
        keep = slot_mapping >= 0
        slots = slot_mapping[keep]
        heads, dim = key.shape[1], key.shape[2]
        key_cache.view(-1, heads, dim)[slots] = key[keep]
        value_cache.view(-1, heads, dim)[slots] = value[keep]
        return {"key_cache": key_cache, "value_cache": value_cache}


def _make_inputs(shape=(1, 4, 128), block_size=16, device: str = "cuda"):
    """N(0,1) bf16 keys/values, zeroed caches just large enough, identity slots."""
    tokens, heads, dim = (int(n) for n in shape)
    num_blocks = math.ceil(tokens / block_size)
    bf16 = torch.bfloat16
    return {
        "key": torch.randn(tokens, heads, dim, dtype=bf16, device=device),
        "value": torch.randn(tokens, heads, dim, dtype=bf16, device=device),
        "key_cache": torch.zeros(num_blocks, block_size, heads, dim, dtype=bf16, device=device),
        "value_cache": torch.zeros(num_blocks, block_size, heads, dim, dtype=bf16, device=device),
        "slot_mapping": torch.arange(tokens, dtype=torch.int64, device=device),
    }
