"""Upstream manifest and checkout chunking, on a small git repository built in tmp_path."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from aka.core import SpecError
from aka.kb.chunk import Chunk
from aka.kb.schema import Layer
from aka.kb.upstream import UpstreamRef, chunk_upstream_checkout, load_manifest

PY_SOURCE = '''"""Demo kernels module."""

import math

# Scales a value; the comment right above belongs to the function.
def scale(x, factor=2.0):
    return x * factor


@staticmethod
def shift(x):
    return x + 1


class Runner:
    """Runs things."""

    def run(self):
        return scale(shift(1))
'''

CU_SOURCE = """#include <cuda_runtime.h>

namespace demo {

// Adds two vectors; a brace in a comment { does not count.
__global__ void add_kernel(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = x[i] + y[i];
  }
}

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) scale_kernel(float* x, float s, int n) {
  const char* msg = "}";  // a brace in a string does not count either
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) x[i] *= s;
}

}  // namespace demo
"""

README = """# Demo

Intro text before any section.

## Installation

pip install demo

## Usage

```python
# not a heading: inside a fence
print("hi")
```

## Benchmarks

Fast.
"""


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return proc.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "demo"
    (repo / "kernels").mkdir(parents=True)
    (repo / "kernels" / "ops.py").write_text(PY_SOURCE)
    (repo / "kernels" / "add.cu").write_text(CU_SOURCE)
    (repo / "README.md").write_text(README)
    (repo / "build").mkdir()
    (repo / "build" / "generated.py").write_text("def skipped():\n    pass\n")
    (repo / "kernels" / "blob.cu").write_bytes(b"\x00\x01binary")
    (repo / "kernels" / "notes.txt").write_text("not a known extension")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    return repo


def _by_id(chunks: list[Chunk]) -> dict[str, Chunk]:
    return {chunk.chunk_id: chunk for chunk in chunks}


def test_chunk_upstream_checkout_symbol_level_ids(checkout: Path) -> None:
    chunks, _ = chunk_upstream_checkout(checkout, "demo")

    assert [c.chunk_id for c in chunks] == [
        "upstream:demo:README.md::demo",
        "upstream:demo:README.md::installation",
        "upstream:demo:README.md::usage",
        "upstream:demo:README.md::benchmarks",
        "upstream:demo:kernels/add.cu::add_kernel",
        "upstream:demo:kernels/add.cu::scale_kernel",
        "upstream:demo:kernels/ops.py::<module>",
        "upstream:demo:kernels/ops.py::scale",
        "upstream:demo:kernels/ops.py::shift",
        "upstream:demo:kernels/ops.py::Runner",
    ]


def test_chunk_upstream_checkout_cuts_at_definitions(checkout: Path) -> None:
    by_id = _by_id(chunk_upstream_checkout(checkout, "demo")[0])

    add = by_id["upstream:demo:kernels/add.cu::add_kernel"]
    assert "// Adds two vectors" in add.text  # the comment block above is attached
    assert add.text.rstrip().endswith("}")
    assert "scale_kernel" not in add.text
    scale_kernel = by_id["upstream:demo:kernels/add.cu::scale_kernel"].text
    assert "template <int BLOCK>" in scale_kernel
    assert "namespace demo" not in scale_kernel
    scale = by_id["upstream:demo:kernels/ops.py::scale"].text
    assert "# Scales a value" in scale
    assert "def shift" not in scale
    assert "@staticmethod" in by_id["upstream:demo:kernels/ops.py::shift"].text
    assert '"""Demo kernels module."""' in by_id["upstream:demo:kernels/ops.py::<module>"].text
    usage = by_id["upstream:demo:README.md::usage"].text
    assert "# not a heading" in usage and "Benchmarks" not in usage


def test_chunk_upstream_checkout_fields_and_metadata(checkout: Path) -> None:
    sha = _git(checkout, "rev-parse", "HEAD")

    chunks, _ = chunk_upstream_checkout(checkout, "demo")

    langs = {c.metadata["path"]: c.metadata["lang"] for c in chunks}
    assert langs == {"README.md": "markdown", "kernels/add.cu": "cuda", "kernels/ops.py": "python"}
    assert {c.metadata["commit"] for c in chunks} == {sha}
    assert all(c.metadata["upstream"] == "demo" for c in chunks)
    kernel = _by_id(chunks)["upstream:demo:kernels/add.cu::add_kernel"]
    assert (kernel.doc_id, kernel.layer, kernel.kind) == (
        "upstream:demo:kernels/add.cu",
        Layer.UPSTREAM,
        "upstream",
    )
    assert kernel.source == "demo/kernels/add.cu"
    assert (kernel.metadata["line_start"], kernel.metadata["line_end"]) == (5, 11)


def test_chunk_upstream_checkout_skips_build_binary_and_unknown_files(checkout: Path) -> None:
    paths = {c.metadata["path"] for c in chunk_upstream_checkout(checkout, "demo")[0]}

    assert "build/generated.py" not in paths
    assert "kernels/blob.cu" not in paths
    assert "kernels/notes.txt" not in paths
    assert not any(p.startswith(".git") for p in paths)


def test_chunk_upstream_checkout_include_limits_the_walk(checkout: Path) -> None:
    chunks, _ = chunk_upstream_checkout(checkout, "demo", include=["kernels/ops.py", "missing"])

    assert {c.metadata["path"] for c in chunks} == {"kernels/ops.py"}


def test_chunk_upstream_checkout_hash_is_stable_and_tracks_edits(checkout: Path) -> None:
    first, digest = chunk_upstream_checkout(checkout, "demo")
    again, same = chunk_upstream_checkout(checkout, "demo")
    assert (again, same) == (first, digest)

    ops = checkout / "kernels" / "ops.py"
    ops.write_text(ops.read_text().replace("x * factor", "x * factor * 1.0"))
    _, edited = chunk_upstream_checkout(checkout, "demo")

    assert edited != digest


def test_chunk_upstream_checkout_without_git_records_no_commit(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def f():\n    return 1\n")

    chunks, _ = chunk_upstream_checkout(tmp_path, "plain")

    assert [c.chunk_id for c in chunks] == ["upstream:plain:a.py::f"]
    assert chunks[0].metadata["commit"] == ""


def test_chunk_upstream_checkout_long_symbols_become_windows(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(300))
    (tmp_path / "big.py").write_text(f"def big():\n{body}\n    return 0\n")

    ids = [c.chunk_id for c in chunk_upstream_checkout(tmp_path, "big")[0]]

    assert ids == [
        "upstream:big:big.py::big@L1",
        "upstream:big:big.py::big@L81",
        "upstream:big:big.py::big@L161",
        "upstream:big:big.py::big@L241",
    ]


def test_chunk_upstream_checkout_unbalanced_cuda_falls_back_to_windows(tmp_path: Path) -> None:
    (tmp_path / "odd.cu").write_text("__global__ void k() {\n  int x = 0;\n")

    chunks, _ = chunk_upstream_checkout(tmp_path, "odd")

    assert [c.chunk_id for c in chunks] == ["upstream:odd:odd.cu::<module>"]


def test_chunk_upstream_checkout_reads_only_the_first_preprocessor_branch(tmp_path: Path) -> None:
    source = (
        "#if __cplusplus >= 201103L\ntypedef enum : int {\n#else\ntypedef enum {\n#endif\n"
        "  kA = 1,\n} Kind;\n\nint twice(int v) {\n  return 2 * v;\n}\n"
    )
    (tmp_path / "k.h").write_text(source)

    ids = [c.chunk_id for c in chunk_upstream_checkout(tmp_path, "pp")[0]]

    assert ids == ["upstream:pp:k.h::Kind", "upstream:pp:k.h::twice"]


def test_chunk_upstream_checkout_rst_sections(tmp_path: Path) -> None:
    (tmp_path / "guide.rst").write_text(
        "=====\nGuide\n=====\n\nIntro.\n\nFirst part\n----------\n\nText.\n\n"
        "Detail\n~~~~~~\n\nDeeper.\n\nSecond part\n-----------\n\nMore.\n"
    )

    chunks, _ = chunk_upstream_checkout(tmp_path, "docs")

    assert [c.chunk_id.split("::")[1] for c in chunks] == ["guide", "first-part", "second-part"]
    assert "Deeper." in chunks[1].text
    assert chunks[0].metadata["lang"] == "rst"


def test_chunk_upstream_checkout_tolerates_upstream_syntax_warnings(tmp_path: Path) -> None:
    # "\\d" in a plain string is a SyntaxWarning (an error under filterwarnings=error).
    (tmp_path / "re_use.py").write_text('PATTERN = "\\d+"\n\n\ndef f():\n    return PATTERN\n')

    ids = [c.chunk_id for c in chunk_upstream_checkout(tmp_path, "warn")[0]]

    assert ids == ["upstream:warn:re_use.py::<module>", "upstream:warn:re_use.py::f"]


def test_chunk_upstream_checkout_include_must_stay_inside(checkout: Path) -> None:
    with pytest.raises(SpecError, match="relative to the checkout") as info:
        chunk_upstream_checkout(checkout, "demo", include=["../elsewhere"])

    assert info.value.field == "include"


def test_chunk_upstream_checkout_missing_path_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found") as info:
        chunk_upstream_checkout(tmp_path / "nope", "demo")

    assert info.value.file == str(tmp_path / "nope")


def test_chunk_upstream_checkout_nothing_to_ingest_is_a_spec_error(tmp_path: Path) -> None:
    (tmp_path / "data.bin").write_bytes(b"\x00\x01")

    with pytest.raises(SpecError, match="nothing to ingest"):
        chunk_upstream_checkout(tmp_path, "empty")


def test_chunk_upstream_checkout_rejects_a_bad_name(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="kebab-case"):
        chunk_upstream_checkout(tmp_path, "Bad Name")


def test_load_manifest_reads_the_committed_manifest(repo_root: Path) -> None:
    refs = load_manifest(repo_root / "upstream_refs" / "manifest.yaml")

    names = [ref.name for ref in refs]
    assert names == [
        "triton",
        "cutlass",
        "flash-attention",
        "flashinfer",
        "liger-kernel",
        "vllm",
        "sglang",
        "thunderkittens",
        "ptx-isa",
    ]
    assert all(isinstance(ref, UpstreamRef) for ref in refs)
    assert all(ref.commit is not None or ref.pin_note for ref in refs)
    ptx = refs[-1]
    assert (ptx.fetch, ptx.commit) == ("web", None)


def _write_manifest(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text(
        "- name: demo\n  url: https://example.com/demo\n  commit: v1.0\n  license: MIT\n"
        "  good_for: Demo kernels for tests.\n  ingest_hints: kernels/ holds them.\n" + extra
    )
    return path


def test_load_manifest_unknown_key_names_the_field(tmp_path: Path) -> None:
    path = _write_manifest(tmp_path, "  colour: blue\n")

    with pytest.raises(SpecError, match="unknown key 'colour'") as info:
        load_manifest(path)

    assert info.value.field == "[0].colour"
    assert info.value.file == str(path)
    assert "Allowed keys" in str(info.value)


def test_load_manifest_null_commit_needs_a_pin_note(tmp_path: Path) -> None:
    path = _write_manifest(tmp_path)
    path.write_text(path.read_text().replace("commit: v1.0", "commit: null"))

    with pytest.raises(SpecError, match="pin_note"):
        load_manifest(path)


def test_load_manifest_rejects_duplicates_and_non_lists(tmp_path: Path) -> None:
    path = _write_manifest(tmp_path)
    path.write_text(path.read_text() * 2)
    with pytest.raises(SpecError, match="repeated: \\['demo'\\]"):
        load_manifest(path)

    path.write_text("name: demo\n")
    with pytest.raises(SpecError, match="YAML list"):
        load_manifest(path)
