"""Hybrid retrieval: dense + lexical (BM25) fused by reciprocal rank.

Dense vectors live in Chroma, the lexical index is ``bm25s``; metadata filters (arch, dsl,
op_family, kind) and a layer selection apply to both.

Owns the ``Retriever`` protocol (the agent is tested with a fake) and ``Hit``, what a query returns:
one hit per document (its best chunk), with doc id, title, layer, score and the chunk's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from aka.kb.index import KnowledgeIndex, StoredChunk
from aka.kb.schema import Layer

__all__ = ["HybridRetriever", "KBFilter", "Hit", "Retriever", "build_where", "matches_filter"]

_RRF_K = 60
_CANDIDATES = 60
_TOKEN = re.compile(r"[a-z0-9_]+")
_SNIPPET_CHARS = 700


@dataclass(frozen=True)
class KBFilter:
    """Metadata constraints; ``None`` means any. A doc tagged ``any`` matches every arch/dsl."""

    arch: str | None = None
    dsl: str | None = None
    op_family: str | None = None
    kind: str | None = None


class Hit(BaseModel):
    """One retrieved document (its best-matching chunk)."""

    id: str = Field(description="Document, kernel, API or upstream id.")
    chunk_id: str
    title: str
    layer: Layer
    kind: str
    score: float = Field(description="Fused reciprocal-rank score (higher is better).")
    text: str = Field(description="The matching chunk (a snippet of the document).")
    source: str


@runtime_checkable
class Retriever(Protocol):
    """What the agent needs from the knowledge base."""

    def search(
        self,
        query: str,
        *,
        k: int = 8,
        layers: list[Layer] | None = None,
        filters: KBFilter | None = None,
    ) -> list[Hit]:
        """Return up to ``k`` documents for ``query``, best first."""
        ...


def build_where(layers: list[Layer] | None, filters: KBFilter | None) -> dict[str, Any] | None:
    """The Chroma ``where`` clause for a layer selection and filters."""
    clauses: list[dict[str, Any]] = []
    if layers:
        clauses.append({"layer": {"$in": [layer.value for layer in layers]}})
    f = filters or KBFilter()
    if f.arch:
        clauses.append({"$or": [{f"arch_{f.arch}": True}, {"arch_any": True}]})
    if f.dsl:
        clauses.append({"dsl": {"$in": [f.dsl, "any"]}})
    if f.op_family:
        clauses.append({f"op_family_{f.op_family}": True})
    if f.kind:
        clauses.append({"kind": f.kind})
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def matches_filter(
    meta: dict[str, Any], layers: list[Layer] | None, filters: KBFilter | None
) -> bool:
    """The same constraints as ``build_where``, applied to one chunk's metadata in Python."""
    f = filters or KBFilter()
    return (
        (not layers or meta.get("layer") in {layer.value for layer in layers})
        and (not f.arch or bool(meta.get(f"arch_{f.arch}") or meta.get("arch_any")))
        and (not f.dsl or meta.get("dsl") in (f.dsl, "any"))
        and (not f.op_family or bool(meta.get(f"op_family_{f.op_family}")))
        and (not f.kind or meta.get("kind") == f.kind)
    )


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class HybridRetriever:
    """Dense + BM25 retrieval over a built ``KnowledgeIndex``.

    The lexical index is built once from the stored chunks when the retriever is created.
    """

    def __init__(self, index: KnowledgeIndex) -> None:
        import bm25s

        self.index = index
        self._chunks: list[StoredChunk] = index.chunks()
        self._by_id = {c.chunk_id: c for c in self._chunks}
        self._bm25 = bm25s.BM25()
        corpus = [_tokens(c.text) or ["_"] for c in self._chunks]
        if corpus:
            self._bm25.index(corpus, show_progress=False)

    def _lexical(
        self, query: str, layers: list[Layer] | None, filters: KBFilter | None
    ) -> list[str]:
        if not self._chunks:
            return []
        scores = self._bm25.get_scores(_tokens(query))
        ranked = sorted(range(len(self._chunks)), key=lambda i: -float(scores[i]))
        out = []
        for i in ranked:
            if float(scores[i]) <= 0:
                break
            if matches_filter(self._chunks[i].metadata, layers, filters):
                out.append(self._chunks[i].chunk_id)
                if len(out) >= _CANDIDATES:
                    break
        return out

    def search(
        self,
        query: str,
        *,
        k: int = 8,
        layers: list[Layer] | None = None,
        filters: KBFilter | None = None,
    ) -> list[Hit]:
        """Fuse dense and lexical rankings (RRF, k=60) and return the best chunk per document."""
        dense = [
            cid
            for cid, _ in self.index.query_dense(
                query, where=build_where(layers, filters), n=_CANDIDATES
            )
        ]
        lexical = self._lexical(query, layers, filters)
        fused: dict[str, float] = {}
        for ranking in (dense, lexical):
            for rank, cid in enumerate(ranking):
                fused[cid] = fused.get(cid, 0.0) + 1.0 / (_RRF_K + rank + 1)
        best: dict[str, tuple[float, str]] = {}
        for cid, score in fused.items():
            doc = str(self._by_id[cid].metadata["doc_id"]) if cid in self._by_id else cid
            if doc not in best or score > best[doc][0]:
                best[doc] = (score, cid)
        ordered = sorted(best.items(), key=lambda kv: -kv[1][0])[:k]
        return [self._hit(doc, cid, score) for doc, (score, cid) in ordered if cid in self._by_id]

    def _hit(self, doc: str, chunk_id: str, score: float) -> Hit:
        chunk = self._by_id[chunk_id]
        meta = chunk.metadata
        return Hit(
            id=doc,
            chunk_id=chunk_id,
            title=str(meta.get("title", doc)),
            layer=Layer(str(meta["layer"])),
            kind=str(meta.get("kind", "")),
            score=round(score, 6),
            text=chunk.text[:_SNIPPET_CHARS],
            source=str(meta.get("source", "")),
        )
