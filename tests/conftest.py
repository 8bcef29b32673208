"""Shared test setup: settings isolated from the developer's environment, gpu tests auto-skipped."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def session_embedding_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One embedding cache for the whole test session (``kb.embedding_cache``).

    Building the real knowledge index embeds about 3000 chunks (minutes on CI's two cores); the
    first test that builds it (the README's fresh-machine run) pays for that, and the later ones
    (retrieval quality) read the same vectors back. Every index is still built.
    """
    return tmp_path_factory.mktemp("aka-embeddings") / "kb-embeddings.sqlite"


@pytest.fixture(autouse=True)
def _isolated_settings_env(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
    session_embedding_cache: Path,
) -> None:
    """Drop every AKA_* variable and point caches and runs at throwaway folders.

    They are not under ``tmp_path``, so a test listing its ``tmp_path`` sees only its own files.
    Only the embedding cache is shared by the session (see ``session_embedding_cache``).
    """
    for name in list(os.environ):
        if name.startswith("AKA_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AKA_PATHS__CACHE_DIR", str(tmp_path_factory.mktemp("aka-cache")))
    monkeypatch.setenv("AKA_PATHS__RUNS_DIR", str(tmp_path_factory.mktemp("aka-runs")))
    monkeypatch.setenv("AKA_KB__EMBEDDING_CACHE", str(session_embedding_cache))


@pytest.fixture(autouse=True)
def _restored_root_logger() -> Iterator[None]:
    """Undo a CLI entry point's ``setup_logging`` after each test.

    ``aka.cli.main`` replaces the root logger's handlers with one writing to stderr; left in place,
    it would print later tests' warnings into their captured output, so results would depend on
    test order.
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def repo_root() -> Path:
    """The source checkout (tests read configs/ and other project files by path)."""
    return REPO_ROOT


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu`` tests without CUDA (STYLE X2).

    Runs after ``-m`` deselection, so torch is imported only when a gpu test is still selected.
    """
    # Reference kernels run in Triton's interpreter in this process, which works only if
    # triton.language is first imported with TRITON_INTERPRET=1 (its own @jit helpers, tl.sum and
    # friends, are decorated at import). Run them before any test that imports triton normally.
    items.sort(key=lambda item: 0 if "reference_kernels" in item.path.parts else 1)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)
