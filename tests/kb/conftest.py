"""A tiny knowledge base written into tmp_path, for index and retrieval tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

DOC = """---
id: {id}
title: {title}
kind: {kind}
summary: {summary}
vendor: any
arch: [{arch}]
dsl: {dsl}
op_family: [{op_family}]
techniques: []
confidence: provisional
evidence: []
related: []
updated: 2026-12-02
---
{sections}
"""

SECTIONS = {
    "technique": (
        "## When to use\n{a}\n\n## How\n{b}\n\n## Caveats\nNone known.\n\n## Evidence\nReasoning."
    ),
    "pitfall": "## Symptom\n{a}\n\n## Cause\n{b}\n\n## Fix\nFix it.\n\n## Evidence\nReasoning.",
    "hardware": "## Numbers\n{a}\n\n## Notes\n{b}",
}

KERNEL = '''"""
---
id: {id}
title: {title}
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_90]
dtypes: [bf16]
bound: memory
techniques: [row-per-program]
status: reference
launcher: {id}
tuning:
  num_warps: [4, 8]
measured: []
---
{paragraph}
"""
import triton


@triton.jit
def _{id}_kernel(x_ptr):
    pass


def {id}(x, *, num_warps=None):
    return x


def reference(x):
    return x


def make_inputs(shape, dtype, device="cpu"):
    return {{}}
'''


def write_doc(
    root: Path,
    id: str,
    kind: str,
    title: str,
    a: str,
    b: str,
    *,
    arch: str = "any",
    dsl: str = "triton",
    op_family: str = "norm",
    summary: str = "A test document summary.",
) -> Path:
    path = root / "knowledge_base" / kind / "any" / f"{id}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        DOC.format(
            id=id,
            title=title,
            kind=kind,
            summary=summary,
            arch=arch,
            dsl=dsl,
            op_family=op_family,
            sections=SECTIONS[kind].format(a=a, b=b),
        )
    )
    return path


def write_kernel(root: Path, id: str, title: str, paragraph: str) -> Path:
    path = root / "reference_kernels" / "triton" / "norm" / f"{id}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(KERNEL.format(id=id, title=title, paragraph=paragraph))
    return path


@pytest.fixture
def kb_root(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    write_doc(
        root,
        "split-k-gemm",
        "technique",
        "Split-K GEMM for skinny matrices",
        "Small M and N with a huge K reduction dimension.",
        "Partition K over programs and reduce partials.",
        op_family="gemm",
    )
    write_doc(
        root,
        "int32-offset-overflow",
        "pitfall",
        "Index overflow past two billion elements",
        "Illegal memory access on huge logits tensors.",
        "row times stride wraps in int32 arithmetic.",
    )
    write_doc(
        root,
        "h200-ceilings",
        "hardware",
        "H200 bandwidth and peaks",
        "HBM3e bandwidth 4.8 TB/s datasheet.",
        "Ridge point of dense bf16.",
        arch="sm_90",
        dsl="any",
        op_family="gemm",
    )
    write_kernel(
        root, "rms_norm_rowwise", "RMSNorm one program per row", "Row reduction in fp32 registers."
    )
    return root


@pytest.fixture
def write() -> Callable[..., Path]:
    return write_doc
