"""``aka kb`` end to end in a subprocess: real embedder (offline), real Chroma, a tiny project."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kb.conftest import write_doc

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _aka(root: Path, index: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AKA_")}
    env |= {"AKA_PATHS__ROOT": str(root), "AKA_KB__INDEX_DIR": str(index), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "aka", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_build_query_stats_lint_offline(kb_root: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    built = _aka(kb_root, index, "kb", "build", "--no-api")
    assert built.returncode == 0, built.stderr
    assert "4 source(s) embedded" in built.stdout
    again = _aka(kb_root, index, "kb", "build", "--no-api")
    assert "0 source(s) embedded (0 chunks), 4 unchanged" in again.stdout

    query = _aka(
        kb_root,
        index,
        "kb",
        "query",
        "illegal memory access on a huge logits tensor",
        "-k",
        "2",
        "--json",
    )
    assert query.returncode == 0, query.stderr
    hits = json.loads(query.stdout)
    assert hits[0]["id"] == "int32-offset-overflow"
    assert {"id", "title", "kind", "score", "text"} <= set(hits[0])

    filtered = json.loads(
        _aka(kb_root, index, "kb", "query", "bandwidth", "--kind", "hardware", "--json").stdout
    )
    assert [h["id"] for h in filtered] == ["h200-ceilings"]

    stats = json.loads(_aka(kb_root, index, "kb", "stats", "--json").stdout)
    assert stats["reference_kernels"] == 1 and stats["documents"] == 3
    assert stats["kernels_accepted"] == {}  # the tiny project has no committed results
    assert stats["on_disk"] == {"reference_kernels": 1, "documents": 3}
    assert stats["index_stale"] is False
    # a document added after the build: the counts say so, and how to fix it
    added = write_doc(
        kb_root, "stream-k-gemm", "technique", "Stream-K GEMM", "Tail waves.", "Split the tiles."
    )
    stale = _aka(kb_root, index, "kb", "stats", "--json")
    assert json.loads(stale.stdout)["on_disk"]["documents"] == 4
    assert json.loads(stale.stdout)["index_stale"] is True
    assert "run `aka kb build`" in stale.stderr
    added.unlink()

    lint = _aka(kb_root, index, "kb", "lint")
    assert lint.returncode == 0 and "3 documents, 1 kernels, 0 problem(s)" in lint.stdout


def test_lint_reports_problems_with_exit_1(kb_root: Path, tmp_path: Path) -> None:
    doc = kb_root / "knowledge_base" / "technique" / "any" / "split-k-gemm.md"
    doc.write_text(doc.read_text().replace("related: []", "related: [no-such-doc]"))
    lint = _aka(kb_root, tmp_path / "index", "kb", "lint")
    assert lint.returncode == 1
    assert "unknown ids ['no-such-doc']" in lint.stdout


def test_query_before_build_exits_3(kb_root: Path, tmp_path: Path) -> None:
    result = _aka(kb_root, tmp_path / "never-built", "kb", "query", "anything")
    assert result.returncode == 3
    assert "aka kb build" in result.stderr
