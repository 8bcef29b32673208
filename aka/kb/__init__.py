"""aka.kb: the layered knowledge base (schemas, loaders, Chroma index, hybrid retrieval).

Never imports ``aka.bench``; chromadb, sentence-transformers and bm25s load only when used.
"""

from aka.kb.acceptance import AcceptanceCounts, latest_acceptance
from aka.kb.build import (
    build_index,
    embedding_cache_path,
    index_path,
    ingest_upstream,
    knowledge_units,
    open_index,
    open_retriever,
)
from aka.kb.chunk import Chunk, content_hash, flag_metadata
from aka.kb.embed import CachedEmbedder, Embedder, MiniLMEmbedder
from aka.kb.index import BuildStats, KnowledgeIndex, SourceUnit, StoredChunk
from aka.kb.kernel_problem import KERNEL_PROBLEM_PREFIX, kernel_problem, kernel_problem_yaml
from aka.kb.loader import (
    LoadedDoc,
    LoadedKernel,
    doc_chunks,
    kernel_chunks,
    lint_problems,
    load_docs,
    load_kernels,
)
from aka.kb.retrieve import Hit, HybridRetriever, KBFilter, Retriever, build_where, matches_filter
from aka.kb.schema import KIND_TO_LAYER, DocKind, DocMeta, Evidence, Layer

__all__ = [
    "AcceptanceCounts",
    "KERNEL_PROBLEM_PREFIX",
    "KIND_TO_LAYER",
    "BuildStats",
    "CachedEmbedder",
    "Chunk",
    "DocKind",
    "DocMeta",
    "Embedder",
    "Evidence",
    "Hit",
    "HybridRetriever",
    "KBFilter",
    "KnowledgeIndex",
    "Layer",
    "LoadedDoc",
    "LoadedKernel",
    "MiniLMEmbedder",
    "Retriever",
    "SourceUnit",
    "StoredChunk",
    "build_index",
    "build_where",
    "content_hash",
    "doc_chunks",
    "embedding_cache_path",
    "flag_metadata",
    "index_path",
    "ingest_upstream",
    "kernel_chunks",
    "kernel_problem",
    "kernel_problem_yaml",
    "latest_acceptance",
    "knowledge_units",
    "lint_problems",
    "load_docs",
    "load_kernels",
    "matches_filter",
    "open_index",
    "open_retriever",
]
