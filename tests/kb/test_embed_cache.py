"""``CachedEmbedder``: a second index embeds nothing it has seen; vectors are unchanged."""

from __future__ import annotations

import sqlite3
from array import array
from pathlib import Path

import pytest

from aka.core import KBConfig, PathsConfig, Settings
from aka.kb import CachedEmbedder, KnowledgeIndex, embedding_cache_path, knowledge_units
from tests.fakes.embedder import FakeEmbedder


def _f32(vec: list[float]) -> list[float]:
    return array("f", vec).tolist()


def test_cached_vectors_equal_fresh_ones_and_only_new_texts_are_embedded(tmp_path: Path) -> None:
    inner = FakeEmbedder()
    cache = CachedEmbedder(inner, tmp_path / "c" / "emb.sqlite")
    texts = ["rms norm row", "softmax online max", "rms norm row"]
    first = cache.embed(texts)
    assert first == [_f32(v) for v in FakeEmbedder().embed(texts)]
    assert inner.texts_embedded == 3  # the duplicate is embedded in the same call, not cached yet
    # A new process (a new object) on the same file: only the unseen text reaches the model.
    inner2 = FakeEmbedder()
    again = CachedEmbedder(inner2, tmp_path / "c" / "emb.sqlite")
    out = again.embed(["softmax online max", "a brand new text", "rms norm row"])
    assert inner2.texts_embedded == 1
    assert (again.hits, again.misses) == (2, 1)
    assert out[0] == first[1] and out[2] == first[0]
    assert out[1] == _f32(FakeEmbedder().embed(["a brand new text"])[0])


def test_the_model_name_is_part_of_the_key(tmp_path: Path) -> None:
    path = tmp_path / "emb.sqlite"
    CachedEmbedder(FakeEmbedder(dim=64, name="model-a"), path).embed(["same text"])
    other = FakeEmbedder(dim=32, name="model-b")
    vec = CachedEmbedder(other, path).embed(["same text"])[0]
    assert other.texts_embedded == 1 and len(vec) == 32


def test_a_second_index_reuses_the_first_ones_embeddings(kb_root: Path, tmp_path: Path) -> None:
    units = knowledge_units(kb_root, include_api=False)
    inner = FakeEmbedder()
    shared = tmp_path / "emb.sqlite"
    a = KnowledgeIndex(tmp_path / "a", CachedEmbedder(inner, shared))
    built = a.sync(units, prune_prefixes=("doc:", "kernel:"))
    embedded = inner.texts_embedded
    assert built.embedded_chunks == embedded > 4
    b = KnowledgeIndex(tmp_path / "b", CachedEmbedder(inner, shared))
    again = b.sync(knowledge_units(kb_root, include_api=False), prune_prefixes=("doc:", "kernel:"))
    assert again.embedded_chunks == built.embedded_chunks  # the index itself is new
    assert inner.texts_embedded == embedded  # but the model saw nothing
    assert b.stats() == a.stats()
    hits_a = a.query_dense("rms norm row", where=None, n=3)
    assert hits_a and b.query_dense("rms norm row", where=None, n=3) == hits_a


def test_an_unusable_cache_file_falls_back_to_the_model(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    inner = FakeEmbedder()
    cache = CachedEmbedder(inner, blocker / "emb.sqlite")
    assert cache.embed(["x y"]) == FakeEmbedder().embed(["x y"])
    assert inner.texts_embedded == 1 and "embedding cache" in caplog.text
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"this is not a database" * 100)
    assert CachedEmbedder(FakeEmbedder(), corrupt).embed(["x y"]) == FakeEmbedder().embed(["x y"])


def test_the_default_cache_sits_in_the_cache_dir_outside_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AKA_KB__EMBEDDING_CACHE")  # the test session's shared one
    settings = Settings(paths=PathsConfig(root=tmp_path, cache_dir=tmp_path / "cache"))
    assert embedding_cache_path(settings) == tmp_path / "cache" / "kb-embeddings.sqlite"
    custom = Settings(
        paths=PathsConfig(root=tmp_path, cache_dir=tmp_path / "cache"),
        kb=KBConfig(embedding_cache=tmp_path / "elsewhere.sqlite"),
    )
    assert embedding_cache_path(custom) == tmp_path / "elsewhere.sqlite"
    with sqlite3.connect(tmp_path / "probe.sqlite") as db:  # the stdlib has sqlite (no extra dep)
        assert db.execute("select 1").fetchone() == (1,)
