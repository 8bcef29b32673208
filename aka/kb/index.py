"""The persistent knowledge index (Chroma) and its manifest of content hashes.

One collection holds every layer; each record carries a ``layer`` field and every query names its
layers. The manifest of content hashes makes rebuilds incremental.

Owns where the index lives, what is stored per chunk and which sources need re-embedding. A
source (a doc file, a kernel file, the API harvest, an upstream checkout) is re-embedded only
when its content hash or the embedder changes; a second build with nothing changed embeds nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aka.core import ProgressCallback, ProgressEvent, emit
from aka.core.errors import IndexNotBuiltError, KBError
from aka.kb.chunk import Chunk, MetaValue
from aka.kb.embed import Embedder
from aka.kb.schema import Layer

__all__ = ["BuildStats", "KnowledgeIndex", "SourceUnit", "StoredChunk"]

logger = logging.getLogger(__name__)

_COLLECTION = "aka_kb"
_MANIFEST = "aka_manifest.json"
_BATCH = 256


@dataclass(frozen=True)
class SourceUnit:
    """One source whose chunks are replaced together when its hash changes."""

    key: str
    content_hash: str
    make_chunks: Callable[[], list[Chunk]]


@dataclass
class BuildStats:
    """What a build did."""

    embedded_chunks: int = 0
    unchanged_sources: int = 0
    updated_sources: list[str] = field(default_factory=list)
    removed_sources: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StoredChunk:
    """A chunk as read back from the index."""

    chunk_id: str
    text: str
    metadata: dict[str, MetaValue]


class KnowledgeIndex:
    """A Chroma ``PersistentClient`` at ``path`` holding every layer's chunks.

    Args:
        path: Directory of the index (created on first build).
        embedder: Embeds chunk texts and queries.
    """

    def __init__(self, path: Path, embedder: Embedder) -> None:
        self.path = path
        self.embedder = embedder
        self._client: Any = None
        self._col: Any = None

    def _collection(self, create: bool) -> Any:
        if self._col is not None:
            return self._col
        if not create and not (self.path / _MANIFEST).exists():
            raise IndexNotBuiltError(f"no knowledge index at {self.path}; run `aka kb build` first")
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        self.path.mkdir(parents=True, exist_ok=True)
        self._client = chromadb.PersistentClient(
            path=str(self.path), settings=ChromaSettings(anonymized_telemetry=False)
        )
        self._col = self._client.get_or_create_collection(
            _COLLECTION, embedding_function=None, metadata={"hnsw:space": "cosine"}
        )
        return self._col

    def _manifest(self) -> dict[str, Any]:
        try:
            data = json.loads((self.path / _MANIFEST).read_text())
        except (OSError, json.JSONDecodeError):
            return {"embedder": self.embedder.name, "sources": {}}
        if data.get("embedder") != self.embedder.name:
            logger.info("embedder changed (%s): re-embedding everything", data.get("embedder"))
            return {"embedder": self.embedder.name, "sources": {}, "stale": data.get("sources", {})}
        return dict(data)

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        manifest.pop("stale", None)
        tmp = self.path / f".{_MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
        tmp.replace(self.path / _MANIFEST)

    def sync(
        self,
        units: Sequence[SourceUnit],
        *,
        prune_prefixes: Iterable[str] = (),
        progress: ProgressCallback | None = None,
    ) -> BuildStats:
        """Bring the index in line with ``units``.

        Args:
            units: Sources that should be indexed.
            prune_prefixes: Indexed sources whose key starts with one of these and that are not in
                ``units`` are removed (a deleted doc disappears from the index).
            progress: Receives one event per updated source.
        """
        col = self._collection(create=True)
        manifest = self._manifest()
        sources: dict[str, Any] = manifest["sources"]
        stale: dict[str, Any] = manifest.get("stale", {})
        stats = BuildStats()
        wanted = {u.key for u in units}
        prefixes = tuple(prune_prefixes)
        for key in [k for k in {**stale, **sources} if k not in wanted and k.startswith(prefixes)]:
            self._delete((stale.get(key) or sources.get(key) or {}).get("chunk_ids", []))
            sources.pop(key, None)
            stats.removed_sources.append(key)
        todo = [u for u in units if sources.get(u.key, {}).get("hash") != u.content_hash]
        stats.unchanged_sources = len(units) - len(todo)
        for i, unit in enumerate(todo):
            emit(progress, ProgressEvent("kb", "embed", unit.key, i, len(todo)))
            old = (sources.get(unit.key) or stale.get(unit.key) or {}).get("chunk_ids", [])
            self._delete(old)
            chunks = unit.make_chunks()
            self._add(col, chunks)
            sources[unit.key] = {
                "hash": unit.content_hash,
                "chunk_ids": [c.chunk_id for c in chunks],
            }
            stats.embedded_chunks += len(chunks)
            stats.updated_sources.append(unit.key)
            self._write_manifest(manifest)  # a killed build keeps what it finished
        self._write_manifest(manifest)
        return stats

    def _delete(self, ids: list[str]) -> None:
        if ids:
            col = self._collection(create=True)
            for start in range(0, len(ids), _BATCH):
                col.delete(ids=ids[start : start + _BATCH])

    def _add(self, col: Any, chunks: list[Chunk]) -> None:
        ids = [c.chunk_id for c in chunks]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise KBError(f"duplicate chunk ids {dupes[:5]}; make section names unique")
        for start in range(0, len(chunks), _BATCH):
            batch = chunks[start : start + _BATCH]
            vectors = self.embedder.embed([c.text for c in batch])
            col.upsert(
                ids=[c.chunk_id for c in batch],
                embeddings=vectors,
                documents=[c.text for c in batch],
                metadatas=[
                    {
                        **c.metadata,
                        "doc_id": c.doc_id,
                        "title": c.title,
                        "layer": c.layer.value,
                        "kind": c.kind,
                        "source": c.source,
                    }
                    for c in batch
                ],
            )

    def chunks(self) -> list[StoredChunk]:
        """Every stored chunk (for the lexical index)."""
        got = self._collection(create=False).get(include=["documents", "metadatas"])
        return [
            StoredChunk(chunk_id=i, text=d or "", metadata=dict(m or {}))
            for i, d, m in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
        ]

    def query_dense(
        self, text: str, *, where: dict[str, Any] | None, n: int
    ) -> list[tuple[str, float]]:
        """Nearest chunks to ``text``: (chunk id, cosine distance), best first."""
        col = self._collection(create=False)
        total = col.count()
        if total == 0:
            return []
        vector = self.embedder.embed([text])[0]
        got = col.query(
            query_embeddings=[vector], n_results=min(n, total), where=where, include=["distances"]
        )
        return list(zip(got["ids"][0], got["distances"][0], strict=True))

    def stats(self) -> dict[str, dict[str, int]]:
        """Counts of documents (distinct doc ids) and chunks per layer and per kind."""
        by_layer: dict[str, set[str]] = {}
        by_kind: dict[str, set[str]] = {}
        chunks_per_layer: dict[str, int] = {}
        for chunk in self.chunks():
            layer, kind = str(chunk.metadata["layer"]), str(chunk.metadata["kind"])
            doc = str(chunk.metadata["doc_id"])
            by_layer.setdefault(layer, set()).add(doc)
            by_kind.setdefault(kind, set()).add(doc)
            chunks_per_layer[layer] = chunks_per_layer.get(layer, 0) + 1
        return {
            "documents_per_layer": {k: len(v) for k, v in sorted(by_layer.items())},
            "documents_per_kind": {k: len(v) for k, v in sorted(by_kind.items())},
            "chunks_per_layer": dict(sorted(chunks_per_layer.items())),
        }

    @staticmethod
    def all_layers() -> list[Layer]:
        """Every layer, from the metal up."""
        return list(Layer)
