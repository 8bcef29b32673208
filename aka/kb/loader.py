"""Load, lint and chunk the knowledge base's own files.

Covers ``knowledge_base/**.md`` docs and ``reference_kernels/**.py`` kernels; docs are cut at H2
headings, kernels by function.

Every file is validated; all problems are reported at once, each with file, field and fix. Kernel
files are read as text (``ast``), never imported.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from aka.core.errors import SpecError
from aka.core.pyparse import parse_module
from aka.kb.chunk import Chunk, MetaValue, flag_metadata
from aka.kb.schema import DocKind, DocMeta, Layer
from aka.spec import KernelMeta, kernel_header, read_source_facts, split_front_matter

__all__ = [
    "LoadedDoc",
    "LoadedKernel",
    "doc_chunks",
    "kernel_chunks",
    "lint_problems",
    "load_docs",
    "load_kernels",
]

_H2 = re.compile(r"^##\s+(.+?)\s*$", re.MULTILINE)
#: H2 sections each kind must have (STYLE Q3); other kinds choose their own.
_REQUIRED_SECTIONS: dict[DocKind, tuple[str, ...]] = {
    DocKind.TECHNIQUE: ("When to use", "How", "Caveats", "Evidence"),
    DocKind.PITFALL: ("Symptom", "Cause", "Fix", "Evidence"),
    DocKind.SYMPTOM: ("Signals", "Likely causes", "Techniques"),
}
_MAX_DOC_LINES = 300
_MAX_KERNEL_LINES = 400


@dataclass(frozen=True)
class LoadedDoc:
    """A validated knowledge document."""

    meta: DocMeta
    body: str
    path: Path
    text: str


@dataclass(frozen=True)
class LoadedKernel:
    """A validated reference kernel file (read as text)."""

    meta: KernelMeta
    paragraph: str
    path: Path
    text: str


def _pydantic_errors(err: ValidationError, source: str) -> list[str]:
    out = []
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "<front matter>"
        fix = "remove it" if e["type"] == "extra_forbidden" else "fix the value"
        out.append(f"{source}: field '{field}': {e['msg']}; {fix}")
    return out


def load_docs(root: Path) -> tuple[list[LoadedDoc], list[str]]:
    """Load every ``*.md`` under ``root`` (README files excepted); return docs and problems."""
    docs: list[LoadedDoc] = []
    problems: list[str] = []
    for path in sorted(root.rglob("*.md")) if root.is_dir() else []:
        if path.name.lower() == "readme.md":
            continue
        source = str(path)
        text = path.read_text(encoding="utf-8")
        try:
            raw, body = split_front_matter(text, source=source)
            meta = DocMeta.model_validate(raw)
        except SpecError as err:
            problems.append(err.message)
            continue
        except ValidationError as err:
            problems += _pydantic_errors(err, source)
            continue
        problems += _doc_problems(meta, body, path, root)
        docs.append(LoadedDoc(meta=meta, body=body, path=path, text=text))
    return docs, problems


def _doc_problems(meta: DocMeta, body: str, path: Path, root: Path) -> list[str]:
    source = str(path)
    problems = []
    if meta.id != path.stem:
        problems.append(f"{source}: field 'id': '{meta.id}' must equal the file stem '{path.stem}'")
    rel = path.relative_to(root).parts
    if len(rel) != 3 or rel[0] != meta.kind.value or rel[1] != meta.vendor:
        problems.append(
            f"{source}: path must be knowledge_base/{meta.kind.value}/{meta.vendor}/{meta.id}.md "
            "(kind/vendor folders); move the file"
        )
    headings = [h.strip() for h in _H2.findall(body)]
    missing = [
        s
        for s in _REQUIRED_SECTIONS.get(meta.kind, ())
        if not any(h == s or h.startswith(f"{s} ") for h in headings)
    ]
    if missing:
        problems.append(f"{source}: a {meta.kind.value} needs H2 sections {missing}; add them")
    if not headings:
        problems.append(f"{source}: no '## ' sections; the indexer chunks at H2 headings")
    if body.count("\n") + 1 > _MAX_DOC_LINES:
        problems.append(f"{source}: over {_MAX_DOC_LINES} lines; split the topic")
    return problems


def load_kernels(root: Path) -> tuple[list[LoadedKernel], list[str]]:
    """Load every kernel ``*.py`` under ``root``; return kernels and problems."""
    kernels: list[LoadedKernel] = []
    problems: list[str] = []
    for path in sorted(root.rglob("*.py")) if root.is_dir() else []:
        if path.name == "__init__.py":
            continue
        source = str(path)
        text = path.read_text(encoding="utf-8")
        try:
            raw, paragraph = kernel_header(text, source=source)
            meta = KernelMeta.model_validate(raw)
        except SpecError as err:
            problems.append(err.message)
            continue
        except ValidationError as err:
            problems += _pydantic_errors(err, source)
            continue
        problems += _kernel_problems(meta, text, path, root)
        kernels.append(LoadedKernel(meta=meta, paragraph=paragraph, path=path, text=text))
    return kernels, problems


def _kernel_problems(meta: KernelMeta, text: str, path: Path, root: Path) -> list[str]:
    source = str(path)
    problems = []
    if meta.id != path.stem and path.stem != "kernel":
        problems.append(f"{source}: field 'id': '{meta.id}' must equal the file stem '{path.stem}'")
    rel = path.relative_to(root).parts
    if len(rel) != 3 or rel[0] != meta.dsl.value or rel[1] != meta.op_family.value:
        problems.append(
            f"{source}: path must be reference_kernels/{meta.dsl.value}/{meta.op_family.value}/"
            f"{path.name}; move the file"
        )
    facts = read_source_facts(text, filename=source)
    launcher = facts.functions.get(meta.launcher)
    if launcher is None:
        problems.append(f"{source}: field 'launcher': no function '{meta.launcher}' in the file")
    else:
        absent = [k for k in meta.tuning if not launcher.accepts(k)]
        if absent:
            problems.append(
                f"{source}: field 'tuning': {absent} are not parameters of {meta.launcher}(); "
                "add them as keyword-only parameters"
            )
        if meta.returns and _returns_a_mapping(text, meta.launcher):
            problems.append(
                f"{source}: {meta.launcher}() returns a dict; the scorer's adapter takes its "
                "outputs by position, in the order of 'returns': return a tuple"
            )
    for needed in ("reference", "make_inputs"):
        if needed not in facts.functions:
            problems.append(f"{source}: defines no {needed}() (STYLE R3); add it")
    # the scorer appends one header line per measured shape: those are data, not the kernel's size
    lines = text.count("\n") + 1 - len(meta.measured)
    if lines > _MAX_KERNEL_LINES:
        problems.append(f"{source}: over {_MAX_KERNEL_LINES} lines; move variants to sibling files")
    return problems


def _returns_a_mapping(text: str, launcher: str) -> bool:
    """Whether a ``return`` of the top-level function ``launcher`` gives a dict literal or call."""
    for node in parse_module(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == launcher:
            stack: list[ast.AST] = list(node.body)
            while stack:
                item = stack.pop()
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                    continue  # a nested function's returns are not the launcher's
                if isinstance(item, ast.Return) and (
                    isinstance(item.value, ast.Dict | ast.DictComp)
                    or (
                        isinstance(item.value, ast.Call)
                        and isinstance(item.value.func, ast.Name)
                        and item.value.func.id == "dict"
                    )
                ):
                    return True
                stack.extend(ast.iter_child_nodes(item))
    return False


def _own_problem_problems(meta: KernelMeta, text: str, path: Path) -> list[str]:
    """The ``problem:`` field builds a loadable own-reference problem (aka.kb.kernel_problem)."""
    from aka.kb.kernel_problem import kernel_problem

    reference = read_source_facts(text, filename=str(path)).functions["reference"]
    in_place = meta.problem.in_place if meta.problem else []
    unknown = [n for n in in_place if n not in reference.params]
    if unknown:
        return [
            f"{path}: field 'problem.in_place': {unknown} are not parameters of reference() "
            f"{list(reference.params)}; name reference() parameters"
        ]
    try:
        kernel_problem(path, meta, text)
    except SpecError as err:
        return [f"{path}: field 'problem': {err.message}"]
    return []


def lint_problems(docs_root: Path, kernels_root: Path) -> list[str]:
    """Every problem in the knowledge base's own files, including cross-file ones."""
    docs, problems = load_docs(docs_root)
    kernels, kernel_problems = load_kernels(kernels_root)
    problems += kernel_problems
    for kernel in kernels:  # the own-reference problem builds (not in load_kernels: ~30 ms each)
        if kernel.meta.problem is not None:
            problems += _own_problem_problems(kernel.meta, kernel.text, kernel.path)
    seen: dict[str, Path] = {}
    items: list[LoadedDoc | LoadedKernel] = [*docs, *kernels]
    for item in items:
        if item.meta.id in seen:
            problems.append(f"{item.path}: id '{item.meta.id}' also used by {seen[item.meta.id]}")
        seen[item.meta.id] = item.path
    doc_ids = {d.meta.id for d in docs}
    for doc in docs:
        unknown = [r for r in doc.meta.related if r not in doc_ids]
        if unknown:
            problems.append(f"{doc.path}: field 'related': unknown ids {unknown}; use existing ids")
    return problems


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _doc_metadata(meta: DocMeta, path: Path) -> dict[str, MetaValue]:
    md: dict[str, MetaValue] = {
        "doc_id": meta.id,
        "title": meta.title,
        "kind": meta.kind.value,
        "layer": meta.layer.value,
        "dsl": meta.dsl.value,
        "vendor": meta.vendor,
        "confidence": meta.confidence,
        "path": str(path),
    }
    md |= flag_metadata("arch", [a.value for a in meta.arch])
    md |= flag_metadata("op_family", [f.value for f in meta.op_family])
    return md


def doc_chunks(doc: LoadedDoc) -> list[Chunk]:
    """Cut a document at its H2 headings; each chunk restates the title and heading."""
    meta, body = doc.meta, doc.body
    metadata = _doc_metadata(meta, doc.path)
    parts = _H2.split(body)
    preamble, sections = parts[0].strip(), list(zip(parts[1::2], parts[2::2], strict=True))
    header = f"{meta.title}. {meta.summary}"
    tags = " ".join([*meta.techniques, *meta.symptoms, *(f.value for f in meta.op_family)])
    chunks = [
        Chunk(
            chunk_id=f"{meta.id}#overview",
            doc_id=meta.id,
            title=meta.title,
            layer=meta.layer,
            kind=meta.kind.value,
            text=f"{header}\n{tags}\n{preamble}".strip(),
            source=str(doc.path),
            metadata=metadata,
        )
    ]
    for heading, text in sections:
        chunks.append(
            Chunk(
                chunk_id=f"{meta.id}#{_slug(heading)}",
                doc_id=meta.id,
                title=meta.title,
                layer=meta.layer,
                kind=meta.kind.value,
                text=f"{meta.title} - {heading.strip()}\n{text.strip()}",
                source=str(doc.path),
                metadata=metadata,
            )
        )
    return chunks


def kernel_chunks(kernel: LoadedKernel) -> list[Chunk]:
    """A header chunk (what the kernel is) plus one chunk per top-level function."""
    meta = kernel.meta
    metadata: dict[str, MetaValue] = {
        "doc_id": meta.id,
        "title": meta.title,
        "kind": "kernel",
        "layer": Layer.KERNELS.value,
        "dsl": meta.dsl.value,
        "vendor": meta.vendor.value,
        "bound": meta.bound,
        "status": meta.status,
        "path": str(kernel.path),
    }
    metadata |= flag_metadata("arch", [a.value for a in meta.arch])
    metadata |= flag_metadata("op_family", [meta.op_family.value])
    tuning = ", ".join(f"{k} in {v}" for k, v in meta.tuning.items())
    header = (
        f"{meta.title}. {meta.op_family.value} kernel in {meta.dsl.value}, {meta.bound}-bound; "
        f"techniques: {', '.join(meta.techniques)}; "
        f"dtypes: {', '.join(d.value for d in meta.dtypes)}; "
        f"tuning: {tuning or 'none'}.\n{kernel.paragraph}"
    )

    def make(name: str, text: str) -> Chunk:
        return Chunk(
            chunk_id=f"{meta.id}::{name}",
            doc_id=meta.id,
            title=meta.title,
            layer=Layer.KERNELS,
            kind="kernel",
            text=text,
            source=str(kernel.path),
            metadata=metadata,
        )

    chunks = [make("header", header)]
    for node in parse_module(kernel.text).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            segment = ast.get_source_segment(kernel.text, node) or ""
            chunks.append(make(node.name, f"{meta.title} - {node.name}\n{segment}"))
    return chunks
