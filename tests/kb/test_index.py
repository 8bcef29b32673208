"""The Chroma index with a fake embedder: layers, filters, incremental rebuilds, hybrid ranking."""

from __future__ import annotations

from pathlib import Path

import pytest

from aka.core import IndexNotBuiltError, SpecError
from aka.kb import HybridRetriever, KBFilter, KnowledgeIndex, Layer, knowledge_units
from tests.fakes.embedder import FakeEmbedder
from tests.kb.conftest import write_doc

pytestmark = pytest.mark.integration


def _index(tmp_path: Path, embedder: FakeEmbedder) -> KnowledgeIndex:
    return KnowledgeIndex(tmp_path / "index", embedder)


def test_build_indexes_every_source_and_second_build_embeds_nothing(
    kb_root: Path, tmp_path: Path
) -> None:
    embedder = FakeEmbedder()
    index = _index(tmp_path, embedder)
    first = index.sync(
        knowledge_units(kb_root, include_api=False), prune_prefixes=("doc:", "kernel:")
    )
    assert len(first.updated_sources) == 4 and first.embedded_chunks > 4
    stats = index.stats()
    assert stats["documents_per_layer"] == {
        "hardware": 1,
        "kernels": 1,
        "pitfalls": 1,
        "techniques": 1,
    }
    texts_before = embedder.texts_embedded
    again = KnowledgeIndex(tmp_path / "index", embedder).sync(
        knowledge_units(kb_root, include_api=False), prune_prefixes=("doc:", "kernel:")
    )
    assert again.embedded_chunks == 0 and again.unchanged_sources == 4
    assert embedder.texts_embedded == texts_before


def test_changed_and_deleted_sources_are_updated(kb_root: Path, tmp_path: Path) -> None:
    embedder = FakeEmbedder()
    index = _index(tmp_path, embedder)
    index.sync(knowledge_units(kb_root, include_api=False), prune_prefixes=("doc:", "kernel:"))
    write_doc(
        kb_root,
        "split-k-gemm",
        "technique",
        "Split-K GEMM for skinny matrices",
        "Now with stream-K as well.",
        "Partition K.",
        op_family="gemm",
    )
    (kb_root / "knowledge_base" / "pitfall" / "any" / "int32-offset-overflow.md").unlink()
    stats = index.sync(
        knowledge_units(kb_root, include_api=False), prune_prefixes=("doc:", "kernel:")
    )
    assert stats.updated_sources == ["doc:knowledge_base/technique/any/split-k-gemm.md"]
    assert stats.removed_sources == ["doc:knowledge_base/pitfall/any/int32-offset-overflow.md"]
    ids = {c.metadata["doc_id"] for c in index.chunks()}
    assert "int32-offset-overflow" not in ids
    assert any("stream-K" in c.text for c in index.chunks())


def test_a_new_embedder_reembeds_everything(kb_root: Path, tmp_path: Path) -> None:
    units = knowledge_units(kb_root, include_api=False)
    _index(tmp_path, FakeEmbedder()).sync(units)
    other = FakeEmbedder(name="another-model")
    stats = KnowledgeIndex(tmp_path / "index", other).sync(units)
    assert len(stats.updated_sources) == 4 and other.texts_embedded > 0


def test_invalid_files_are_all_reported_and_nothing_is_indexed(kb_root: Path) -> None:
    bad = kb_root / "knowledge_base" / "technique" / "any" / "broken.md"
    bad.write_text("---\nid: broken\ntitle: x\n---\n")
    kernel = kb_root / "reference_kernels" / "triton" / "norm" / "rms_norm_rowwise.py"
    kernel.write_text(kernel.read_text().replace("launcher: rms_norm_rowwise", "launcher: nope"))
    with pytest.raises(SpecError) as err:
        knowledge_units(kb_root, include_api=False)
    message = str(err.value)
    assert "broken.md" in message and "'kind'" in message and "summary" in message
    assert "rms_norm_rowwise.py" in message and "'launcher'" in message


def test_query_before_build_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(IndexNotBuiltError, match="aka kb build"):
        HybridRetriever(_index(tmp_path, FakeEmbedder()))


def test_hybrid_search_filters_layers_and_metadata(kb_root: Path, tmp_path: Path) -> None:
    index = _index(tmp_path, FakeEmbedder())
    index.sync(knowledge_units(kb_root, include_api=False))
    retriever = HybridRetriever(index)
    hits = retriever.search("illegal memory access huge logits int32 stride", k=3)
    assert hits[0].id == "int32-offset-overflow"
    assert hits[0].layer is Layer.PITFALLS and hits[0].kind == "pitfall" and hits[0].score > 0
    assert len({h.id for h in hits}) == len(hits)  # one hit per document
    only_kernels = retriever.search("row reduction fp32", layers=[Layer.KERNELS])
    assert [h.id for h in only_kernels] == ["rms_norm_rowwise"]
    sm80 = retriever.search("bandwidth ridge point", filters=KBFilter(arch="sm_80"), k=10)
    assert "h200-ceilings" not in {h.id for h in sm80}  # tagged sm_90 only
    assert "split-k-gemm" in {h.id for h in sm80}  # tagged any
    gemm = retriever.search("reduction", filters=KBFilter(op_family="gemm", kind="technique"))
    assert [h.id for h in gemm] == ["split-k-gemm"]
