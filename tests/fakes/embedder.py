"""``FakeEmbedder``: deterministic hashed bag-of-words vectors, no model, same protocol."""

from __future__ import annotations

import hashlib
import math
import re

_TOKEN = re.compile(r"[a-z0-9_]+")


class FakeEmbedder:
    """Texts sharing words get similar vectors; counts every call so tests can see re-embedding."""

    def __init__(self, dim: int = 64, name: str = "fake-hash-64") -> None:
        self.dim = dim
        self._name = name
        self.calls = 0
        self.texts_embedded = 0

    @property
    def name(self) -> str:
        return self._name

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.texts_embedded += len(texts)
        return [self._vector(t) for t in texts]

    def _vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for token in _TOKEN.findall(text.lower()):
            h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "big")
            vec[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]
