"""Build and open the knowledge index from settings: the glue between sources, index and retrieval.

Owns which sources a ``kb build`` indexes (docs, reference kernels, the API harvest of the installed
packages), where the index lives (``KBConfig.index_dir``, default the user cache dir) and the
upstream ingestion entry point.
"""

from __future__ import annotations

import importlib.metadata
from functools import partial
from pathlib import Path

from aka.core import ProgressCallback, Settings
from aka.core.errors import SpecError
from aka.kb.chunk import Chunk, content_hash
from aka.kb.embed import CachedEmbedder, Embedder, MiniLMEmbedder
from aka.kb.index import BuildStats, KnowledgeIndex, SourceUnit
from aka.kb.loader import doc_chunks, kernel_chunks, lint_problems, load_docs, load_kernels
from aka.kb.retrieve import HybridRetriever

__all__ = [
    "build_index",
    "embedding_cache_path",
    "index_path",
    "ingest_upstream",
    "knowledge_units",
    "open_index",
    "open_retriever",
]

_BUILT_PREFIXES = ("doc:", "kernel:", "api:")


def index_path(settings: Settings) -> Path:
    """Where the index lives: ``kb.index_dir`` or ``<cache dir>/kb``."""
    return settings.kb.index_dir or settings.paths.cache_dir / "kb"


def embedding_cache_path(settings: Settings) -> Path:
    """The embedding cache: ``kb.embedding_cache`` or ``<cache dir>/kb-embeddings.sqlite``."""
    return settings.kb.embedding_cache or settings.paths.cache_dir / "kb-embeddings.sqlite"


def open_index(settings: Settings, embedder: Embedder | None = None) -> KnowledgeIndex:
    """The index at its configured path (not built yet is fine until it is queried).

    Without ``embedder``, the offline MiniLM model behind the embedding cache.
    """
    if embedder is None:
        embedder = CachedEmbedder(MiniLMEmbedder(), embedding_cache_path(settings))
    return KnowledgeIndex(index_path(settings), embedder)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _api_unit() -> SourceUnit:
    from aka.kb import api_harvest

    harvester = Path(api_harvest.__file__).read_text()
    label = f"triton-{_version('triton')}+torch-{_version('torch')}"

    def make() -> list[Chunk]:
        chunks, _ = api_harvest.harvest_api_chunks()
        return list(chunks)

    return SourceUnit(
        key=f"api:{label}", content_hash=content_hash(label, harvester), make_chunks=make
    )


def knowledge_units(root: Path, *, include_api: bool = True) -> list[SourceUnit]:
    """Every source a build indexes, validated.

    Raises:
        SpecError: Any doc or kernel is invalid; every problem is listed, one per line.
    """
    docs_root, kernels_root = root / "knowledge_base", root / "reference_kernels"
    problems = lint_problems(docs_root, kernels_root)
    if problems:
        raise SpecError(
            f"{len(problems)} problem(s) in the knowledge base:\n" + "\n".join(problems)
        )
    docs, _ = load_docs(docs_root)
    kernels, _ = load_kernels(kernels_root)
    units = [
        SourceUnit(f"doc:{d.path.relative_to(root)}", content_hash(d.text), partial(doc_chunks, d))
        for d in docs
    ]
    units += [
        SourceUnit(
            f"kernel:{k.path.relative_to(root)}", content_hash(k.text), partial(kernel_chunks, k)
        )
        for k in kernels
    ]
    if include_api:
        units.append(_api_unit())
    return units


def build_index(
    settings: Settings,
    *,
    embedder: Embedder | None = None,
    include_api: bool = True,
    progress: ProgressCallback | None = None,
) -> BuildStats:
    """Index docs, kernels and the API harvest; only changed sources are embedded again.

    Raises:
        SpecError: A doc or kernel is invalid (nothing is indexed then).
    """
    units = knowledge_units(settings.paths.root, include_api=include_api)
    index = open_index(settings, embedder)
    return index.sync(units, prune_prefixes=_BUILT_PREFIXES, progress=progress)


def ingest_upstream(
    settings: Settings,
    path: Path,
    name: str,
    *,
    embedder: Embedder | None = None,
    progress: ProgressCallback | None = None,
) -> BuildStats:
    """Index a local checkout of an upstream project into the upstream layer."""
    from aka.kb.upstream import chunk_upstream_checkout

    chunks, digest = chunk_upstream_checkout(path, name)
    index = open_index(settings, embedder)
    unit = SourceUnit(key=f"upstream:{name}", content_hash=digest, make_chunks=lambda: chunks)
    return index.sync([unit], progress=progress)


def open_retriever(settings: Settings, embedder: Embedder | None = None) -> HybridRetriever:
    """A hybrid retriever over the built index.

    Raises:
        IndexNotBuiltError: ``aka kb build`` has not run.
    """
    return HybridRetriever(open_index(settings, embedder))
