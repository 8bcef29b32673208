"""``Chunk``: the unit the knowledge base indexes, whatever its source (doc, kernel, API, upstream).

Every loader turns its sources into chunks; the index stores them; retrieval returns them. Must
not import chromadb or sentence-transformers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from aka.kb.schema import Layer

__all__ = ["Chunk", "MetaValue", "flag_metadata", "content_hash"]

MetaValue = str | int | float | bool


@dataclass(frozen=True)
class Chunk:
    """One indexed piece of knowledge.

    Attributes:
        chunk_id: Unique across the KB (``<doc id>#<section>``, ``<kernel id>::<function>``,
            ``api:<qualified name>``, ``upstream:<name>:<path>::<symbol>``).
        doc_id: The document (or kernel, API symbol, upstream file) the chunk belongs to.
        title: The document's title.
        layer: The layer it is indexed in.
        kind: Document kind (``technique``...), ``kernel``, ``api`` or ``upstream``.
        text: What is embedded and matched lexically.
        source: The file or package it came from.
        metadata: Scalar metadata for filters; list-valued fields become ``<field>_<value>`` flags.
    """

    chunk_id: str
    doc_id: str
    title: str
    layer: Layer
    kind: str
    text: str
    source: str
    metadata: dict[str, MetaValue] = field(default_factory=dict)


def flag_metadata(name: str, values: Iterable[str]) -> dict[str, MetaValue]:
    """Encode a list field as boolean flags Chroma can filter on (``arch_sm_90: True``)."""
    return {f"{name}_{v}": True for v in values}


def content_hash(*parts: str) -> str:
    """A stable sha256 of the given texts (the unit of incremental rebuilds)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()
