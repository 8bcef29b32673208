"""The upstream layer: the manifest of upstream projects and the chunker for their local checkouts.

Owns ``UpstreamRef`` (one entry of ``upstream_refs/manifest.yaml``), ``load_manifest``, and
``chunk_upstream_checkout``, which walks a checkout on disk and cuts it into symbol-sized chunks:
Python by top-level function and class (``ast``), C/C++/CUDA by top-level definition (a brace
scanner over comment- and string-free text, falling back to fixed windows), Markdown and
reStructuredText by heading. Upstream code is read, never copied into the repository
(``upstream_refs/`` is read-only, STYLE R6), and nothing here clones or fetches: the checkout is
given. Must not import chromadb or sentence-transformers.

Size: about 650 lines, past STYLE S1's 500, because the three chunkers share one segment model
(gaps, windows, unique symbols); the manifest model is the piece to move out if it grows.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import re
import subprocess
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from aka.core import SpecError
from aka.core.pyparse import parse_module
from aka.kb.chunk import Chunk, MetaValue, content_hash
from aka.kb.schema import Layer

__all__ = ["Lang", "UpstreamRef", "chunk_upstream_checkout", "load_manifest"]

logger = logging.getLogger(__name__)

Lang = Literal["python", "cuda", "cpp", "markdown", "rst"]

MAX_FILE_BYTES = 1_000_000
WINDOW_LINES = 80
# A symbol longer than this is cut into WINDOW_LINES windows (a 600-line CUTLASS struct is not
# one retrievable idea).
MAX_SEGMENT_LINES = 2 * WINDOW_LINES
_SKIP_DIRS = frozenset(
    {"build", "dist", "node_modules", "__pycache__", "site-packages", "_build", "venv", "htmlcov"}
)
_EXT_LANG: dict[str, Lang] = {".py": "python", ".md": "markdown", ".rst": "rst"}
_EXT_LANG |= dict.fromkeys((".cu", ".cuh"), "cuda")
_EXT_LANG |= dict.fromkeys((".h", ".hpp", ".cc", ".cpp", ".cxx"), "cpp")
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


# ---------------------------------------------------------------------------------------- manifest


class UpstreamRef(BaseModel):
    """One upstream project in ``upstream_refs/manifest.yaml``: where it lives and what to read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="kebab-case id; chunk ids read `upstream:<name>:...`.")
    url: str = Field(pattern=r"^https://\S+$", description="Repository or documentation URL.")
    fetch: Literal["git", "web"] = Field(
        default="git",
        description="`git`: clone the url; `web`: documentation pages, saved by hand.",
    )
    commit: str | None = Field(
        default=None, description="Pinned 40-hex commit sha or tag; null means pin at ingestion."
    )
    pin_note: str | None = Field(
        default=None, description="Why or how to pin, when commit is null."
    )
    license: str = Field(min_length=2, description="SPDX id or a short licence statement.")
    good_for: str = Field(min_length=10, max_length=200, description="One line: what to look up.")
    ingest_hints: str = Field(min_length=10, description="Which folders hold kernels and docs.")
    include: list[str] = Field(
        default_factory=list,
        description="Checkout-relative folders or files to ingest; empty means the whole checkout.",
    )

    @field_validator("name")
    @classmethod
    def _kebab(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"{value!r} is not kebab-case (a-z, 0-9, single '-')")
        return value

    @field_validator("commit")
    @classmethod
    def _pinned(cls, value: str | None) -> str | None:
        if value is not None and not (_SHA.match(value) or re.match(r"^v?\d[\w.\-]*$", value)):
            raise ValueError(f"{value!r} is neither a full commit sha nor a version tag")
        return value

    @field_validator("good_for")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value.strip():
            raise ValueError("must be one line")
        return value.strip()

    @field_validator("include")
    @classmethod
    def _relative(cls, value: list[str]) -> list[str]:
        for item in value:
            if item.startswith("/") or ".." in Path(item).parts:
                raise ValueError(f"{item!r} must be relative to the checkout, without '..'")
        return value

    @model_validator(mode="after")
    def _pin_explained(self) -> UpstreamRef:
        if self.commit is None and not self.pin_note:
            raise ValueError("commit is null: add `pin_note` saying how to pin it")
        return self


def load_manifest(path: Path) -> list[UpstreamRef]:
    """Load and validate the upstream manifest (a YAML list of ``UpstreamRef`` entries).

    Raises:
        SpecError: The file is unreadable or not YAML, is not a list, an entry has an unknown or
            invalid field (named as ``[<index>].<field>``), or two entries share a name.
    """
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise SpecError(f"cannot read the upstream manifest ({err}).", file=str(path)) from err
    except yaml.YAMLError as err:
        raise SpecError(f"not valid YAML: {err}. Fix the syntax.", file=str(path)) from err
    if not isinstance(raw, list):
        raise SpecError(
            "the manifest must be a YAML list of entries (`- name: ...`), "
            f"got a {type(raw).__name__}.",
            file=str(path),
        )
    refs: list[UpstreamRef] = []
    for index, entry in enumerate(raw):
        try:
            refs.append(UpstreamRef.model_validate(entry))
        except ValidationError as err:
            raise _entry_error(path, index, entry, err) from err
    names = [ref.name for ref in refs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SpecError(
            f"upstream names must be unique; repeated: {duplicates}. Rename or merge the entries.",
            file=str(path),
            field="name",
        )
    return refs


def _entry_error(path: Path, index: int, entry: Any, err: ValidationError) -> SpecError:
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first["loc"])
    label = entry.get("name", f"#{index}") if isinstance(entry, dict) else f"#{index}"
    field = f"[{index}].{loc}" if loc else f"[{index}]"
    if first["type"] == "extra_forbidden":
        allowed = ", ".join(UpstreamRef.model_fields)
        message = f"unknown key {loc!r} in upstream {label!r}. Allowed keys: {allowed}."
    else:
        message = f"{first['msg']} (upstream {label!r}). Fix the value in the manifest."
    more = len(err.errors()) - 1
    return SpecError(
        message + (f" ({more} more problem(s))" if more else ""), file=str(path), field=field
    )


# ---------------------------------------------------------------------------------------- checkout


@dataclass(frozen=True)
class _Segment:
    """Lines ``start..end`` (1-based, inclusive) of a file, named by the symbol they hold."""

    symbol: str
    start: int
    end: int


def chunk_upstream_checkout(
    path: Path, name: str, *, include: Sequence[str] = ()
) -> tuple[list[Chunk], str]:
    """Chunk a local checkout of an upstream project, symbol by symbol.

    Skips hidden folders (``.git``), build and cache folders, symlinks, files over 1 MB and
    binary or non-UTF-8 files.

    Args:
        path: Root of the checkout (its ``.git`` supplies the recorded commit, if present).
        name: The manifest name (kebab-case), used in chunk ids.
        include: Folders or files under ``path`` to read (``UpstreamRef.include``); empty reads
            everything. Missing ones are skipped with a warning.

    Returns:
        The chunks, in path then line order, and a content hash of the whole set (equal for an
        unchanged checkout, so re-ingesting can be skipped).

    Raises:
        SpecError: ``path`` is not a directory, ``name`` is not kebab-case, an ``include``
            entry leaves the checkout, or nothing under ``path`` can be chunked.
    """
    if not _NAME.match(name):
        raise SpecError(f"upstream name {name!r} is not kebab-case; use the manifest name.")
    if not path.is_dir():
        raise SpecError(
            f"upstream checkout of {name!r} not found. Clone it there (upstream_refs/README.md) "
            "or pass the right path.",
            file=str(path),
        )
    commit = _git_head(path)
    chunks: list[Chunk] = []
    for file in _iter_files(path, include):
        relpath = file.relative_to(path).as_posix()
        text = _read_text(file)
        if text is not None:
            chunks.extend(_file_chunks(name, relpath, text, commit))
    if not chunks:
        raise SpecError(
            f"nothing to ingest for {name!r}: no readable {'/'.join(sorted(_EXT_LANG))} files"
            + (f" under include={list(include)}" if include else "")
            + ". Check the path and the manifest's include list.",
            file=str(path),
        )
    logger.info("upstream %s: %d chunks at commit %s", name, len(chunks), commit[:12] or "none")
    return chunks, _set_hash(chunks)


def _set_hash(chunks: list[Chunk]) -> str:
    return content_hash(
        *(
            json.dumps(
                [c.chunk_id, c.doc_id, c.title, c.text, c.source, c.metadata], sort_keys=True
            )
            for c in chunks
        )
    )


def _git_head(root: Path) -> str:
    """``git rev-parse HEAD`` when ``root`` is itself a checkout (not a folder inside one)."""
    if not (root / ".git").exists():
        return ""
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        logger.warning("cannot read the commit of %s: %s", root, err)
        return ""
    sha = proc.stdout.strip()
    if proc.returncode != 0 or not _SHA.match(sha):
        logger.warning("cannot read the commit of %s: %s", root, proc.stderr.strip()[-200:])
        return ""
    return sha


def _iter_files(root: Path, include: Sequence[str]) -> Iterator[Path]:
    """Files with a known extension, in sorted relative-path order, each once."""
    found: set[Path] = set()
    for item in include:
        if Path(item).is_absolute() or ".." in Path(item).parts:
            raise SpecError(
                f"include entry {item!r} must be relative to the checkout, without '..'.",
                field="include",
            )
    for base in [root / item for item in include] or [root]:
        if base.is_file():
            found.add(base)
            continue
        if not base.is_dir():
            logger.warning("include %s does not exist in %s; skipped", base, root)
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not _is_skipped_dir(d)]
            found.update(Path(dirpath) / f for f in filenames)
    for file in sorted(found, key=lambda f: f.relative_to(root).as_posix()):
        if file.suffix in _EXT_LANG and not file.is_symlink():
            yield file


def _is_skipped_dir(name: str) -> bool:
    return name.startswith(".") or name in _SKIP_DIRS or name.endswith(".egg-info")


def _read_text(file: Path) -> str | None:
    try:
        if not 0 < file.stat().st_size <= MAX_FILE_BYTES:
            return None
        data = file.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8").replace("\r\n", "\n")
    except UnicodeDecodeError:
        return None


def _file_chunks(name: str, relpath: str, text: str, commit: str) -> list[Chunk]:
    lang = _EXT_LANG[Path(relpath).suffix]
    if lang == "cpp" and Path(relpath).suffix in {".h", ".hpp"} and _CUDA_HINT.search(text):
        lang = "cuda"
    lines = text.split("\n")
    segments = _segments(lang, text, lines)
    chunks = []
    for seg in _finalize(segments, lines):
        body = "\n".join(lines[seg.start - 1 : seg.end]).strip("\n")
        metadata: dict[str, MetaValue] = {
            "upstream": name,
            "path": relpath,
            "commit": commit,
            "lang": lang,
            "line_start": seg.start,
            "line_end": seg.end,
        }
        title = f"{name}/{relpath} :: {seg.symbol}"
        chunks.append(
            Chunk(
                chunk_id=f"upstream:{name}:{relpath}::{seg.symbol}",
                doc_id=f"upstream:{name}:{relpath}",
                title=title if len(title) <= 120 else "..." + title[-117:],
                layer=Layer.UPSTREAM,
                kind="upstream",
                text=f"{name}: {relpath} :: {seg.symbol}\n\n{body}",
                source=f"{name}/{relpath}",
                metadata=metadata,
            )
        )
    return chunks


def _segments(lang: Lang, text: str, lines: list[str]) -> list[_Segment]:
    if lang == "python":
        return _python_segments(text, lines)
    if lang in ("cuda", "cpp"):
        return _cpp_segments(_strip_cpp_noise(text), lines)
    sections = _markdown_sections(lines) if lang == "markdown" else _rst_sections(lines)
    return _with_gaps(sections, lines, "<preamble>", min_filled=1, keep_first=True)


def _with_gaps(
    defs: list[_Segment], lines: list[str], gap_name: str, *, min_filled: int, keep_first: bool
) -> list[_Segment]:
    """Add segments for the lines no definition covers (imports, module code, preambles).

    A gap with fewer than ``min_filled`` non-blank lines (a closing namespace brace) is dropped,
    except the first one when ``keep_first`` (a one-line module docstring).
    """
    out: list[_Segment] = []
    cursor = 1
    for seg in [*sorted(defs, key=lambda s: s.start), _Segment("", len(lines) + 1, len(lines))]:
        if seg.start > cursor:
            filled = sum(1 for line in lines[cursor - 1 : seg.start - 1] if line.strip())
            if filled >= min_filled or (filled and keep_first and cursor == 1):
                out.append(_Segment(gap_name, cursor, seg.start - 1))
        if seg.symbol:
            out.append(seg)
            cursor = max(cursor, seg.end + 1)
    return out


def _finalize(segments: list[_Segment], lines: list[str]) -> list[_Segment]:
    """Cut long segments into windows, drop blank ones, and make every symbol unique."""
    out: list[_Segment] = []
    seen: set[str] = set()
    for seg in sorted(segments, key=lambda s: s.start):
        if not any(line.strip() for line in lines[seg.start - 1 : seg.end]):
            continue
        pieces = [seg]
        if seg.end - seg.start + 1 > MAX_SEGMENT_LINES:
            pieces = [
                _Segment(f"{seg.symbol}@L{start}", start, min(start + WINDOW_LINES - 1, seg.end))
                for start in range(seg.start, seg.end + 1, WINDOW_LINES)
            ]
        for piece in pieces:
            symbol = piece.symbol if piece.symbol not in seen else f"{piece.symbol}@L{piece.start}"
            while symbol in seen:  # only if a symbol literally ends in "@L<n>" already
                symbol += "'"
            seen.add(symbol)
            out.append(_Segment(symbol, piece.start, piece.end))
    return out


def _attach_comments(lines: list[str], start: int, floor: int, prefixes: tuple[str, ...]) -> int:
    """Move ``start`` up over the comment block directly above it (no blank line between)."""
    while start - 1 > floor and lines[start - 2].strip().startswith(prefixes):
        start -= 1
    return start


# ------------------------------------------------------------------------------------------ python


def _python_segments(source: str, lines: list[str]) -> list[_Segment]:
    """Top-level functions and classes; module-level code and the docstring become ``<module>``."""
    try:
        with warnings.catch_warnings():  # upstream "\d" escapes: SyntaxWarning noise, not ours
            warnings.simplefilter("ignore")
            tree = parse_module(source)
    except (SyntaxError, ValueError):
        return [_Segment("<module>", 1, len(lines))]
    defs: list[_Segment] = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        floor = defs[-1].end if defs else 0
        start = _attach_comments(lines, _node_start(node), floor, ("#",))
        end = node.end_lineno or node.lineno
        if isinstance(node, ast.ClassDef) and end - start + 1 > MAX_SEGMENT_LINES:
            defs.extend(_class_segments(node, start, end))
        else:
            defs.append(_Segment(node.name, start, end))
    return _with_gaps(defs, lines, "<module>", min_filled=3, keep_first=True)


def _node_start(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> int:
    return min([node.lineno, *(dec.lineno for dec in node.decorator_list)])


def _class_segments(node: ast.ClassDef, start: int, end: int) -> list[_Segment]:
    """A long class as its header (docstring, attributes) plus one segment per method."""
    methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if not methods:
        return [_Segment(node.name, start, end)]
    starts = [_node_start(m) for m in methods]
    segments = [_Segment(node.name, start, starts[0] - 1)] if starts[0] > start else []
    bounds = [*starts[1:], end + 1]
    for method, first, following in zip(methods, starts, bounds, strict=True):
        segments.append(_Segment(f"{node.name}.{method.name}", first, following - 1))
    return segments


# ------------------------------------------------------------------------------------ c, c++, cuda

_CUDA_HINT = re.compile(r"__global__|__device__")
# Comments, string and char literals: blanked (newlines kept) so braces inside them do not count.
_CPP_NOISE = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])'", re.DOTALL)
_DIRECTIVE = re.compile(r"^\s*#\s*(\w*)")
_NAMESPACE = re.compile(r"^\s*(?:(?:inline\s+)?namespace\b[^()]*|extern)\s*$")
_TEMPLATE = re.compile(r"\btemplate\s*<")
_ANGLE = re.compile(r"<")
# `C10_DIAGNOSTIC_PUSH(...)` or `PYBIND11_NAMESPACE_END(detail)` before a definition, no semicolon.
_LEADING_MACROS = re.compile(r"^\s*(?:[A-Z][A-Z0-9_]*\s*\([^()]*\)\s*)+(?=\S)")
_OPERATOR = re.compile(r"\boperator\b\s*(\(\)|\[\]|[^\w\s(]+|\s[\w:]+)\s*\(")
_CALLEE = re.compile(r"(~?[A-Za-z_]\w*(?:\s*::\s*~?[A-Za-z_]\w*)*)\s*(?:<[^<>()]*>)?\s*\(")
_TYPE_DEF = re.compile(r"^\s*(?:typedef\s+)?(?:struct|class|union|enum)\b")
_IDENT = re.compile(r"[A-Za-z_]\w*(?:::\w+)*")
_NOT_NAMES = frozenset(
    {"__launch_bounds__", "__attribute__", "__align__", "__declspec", "__cluster_dims__"}
    | {"alignas", "decltype", "noexcept", "requires", "sizeof", "static_assert"}
    | {"if", "for", "while", "switch", "return"}
)
_TYPE_WORDS = frozenset({"struct", "class", "union", "enum", "typedef", "final", "public"})


def _strip_cpp_noise(source: str) -> list[str]:
    """Source lines as the brace scanner should see them.

    Comments and literals are blanked, and so are preprocessor lines (with their continuations)
    and every ``#else``/``#elif`` branch: only the first branch of a conditional is read, because
    branches that each open a brace (``typedef enum : int32_t {`` / ``typedef enum {``) would
    unbalance the count.
    """
    code = _CPP_NOISE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), source).split("\n")
    branches: list[bool] = []  # per open #if: True once past its first branch
    continued = False
    for index, line in enumerate(code):
        directive = _DIRECTIVE.match(line)
        if directive and not continued:
            keyword = directive.group(1)
            if keyword.startswith("if"):
                branches.append(False)
            elif keyword.startswith("el") and branches:
                branches[-1] = True
            elif keyword == "endif" and branches:
                branches.pop()
        if continued or directive or any(branches):
            continued = (continued or bool(directive)) and line.rstrip().endswith("\\")
            code[index] = ""
    return code


def _cpp_segments(code: list[str], lines: list[str]) -> list[_Segment]:
    """Top-level definitions (functions, kernels, structs), found by brace depth.

    Unbalanced braces (``#if`` branches that each open one) make the whole file fall back to
    windows.
    """
    scanner = _BraceScanner()
    for lineno, line in enumerate(code, 1):
        scanner.feed(lineno, line)
    if not scanner.balanced or scanner.stack:
        return [_Segment("<module>", 1, len(lines))]
    defs: list[_Segment] = []
    for header, start, end in scanner.closed:
        floor = defs[-1].end if defs else 0
        # A definition opening on the line where the previous one closes starts after it.
        first = _attach_comments(lines, max(start, floor + 1), floor, ("//", "/*", "*"))
        if first <= end:
            trailer = code[end - 1].rsplit("}", 1)[-1]  # `} Name;` names a typedef'd struct
            defs.append(_Segment(_cpp_symbol(header, start, trailer), first, end))
    return _with_gaps(defs, lines, "<module>", min_filled=3, keep_first=False)


class _BraceScanner:
    """Reads comment-free C/C++ lines and records where each top-level definition opens and closes.

    Namespace and ``extern "C"`` blocks are transparent: what they hold counts as top level. A
    definition runs from the first line of its statement to the line of its closing brace. Braces
    inside an open parenthesis (``TensorOptions options={}``) are header text, not a body.
    """

    def __init__(self) -> None:
        self.stack: list[bool] = []  # per open brace: True for a transparent namespace block
        self.header: list[str] = []  # top-level text of the statement being read
        self.stmt_start: int | None = None
        self.opened: tuple[str, int] = ("", 0)  # header and first line of the open definition
        self.closed: list[tuple[str, int, int]] = []  # (header, first line, last line)
        self.balanced = True

    def feed(self, lineno: int, line: str) -> None:
        pos = 0
        for match in re.finditer(r"[{};]", line):
            if all(self.stack):
                self._read(lineno, line[pos : match.start()])
            pos = match.end()
            self._event(match.group(), lineno)
        if all(self.stack):
            self._read(lineno, line[pos:])

    def _read(self, lineno: int, text: str) -> None:
        if self.stmt_start is None and text.strip():
            self.stmt_start = lineno
        self.header.append(text)

    def _event(self, char: str, lineno: int) -> None:
        at_top = all(self.stack)
        text = " ".join(self.header)
        if at_top and text.count("(") > text.count(")"):
            self.header.append(char)
            return
        if char == "{":
            is_namespace = at_top and bool(_NAMESPACE.match(_LEADING_MACROS.sub("", text)))
            if at_top and not is_namespace:
                self.opened = (text, self.stmt_start or lineno)
            self.stack.append(is_namespace)
        elif char == "}":
            if not self.stack:
                self.balanced = False
                return
            if not self.stack.pop() and all(self.stack):
                self.closed.append((*self.opened, lineno))
        if char != "{" or at_top:
            self.header, self.stmt_start = [], None


def _cpp_symbol(header: str, start: int, trailer: str = "") -> str:
    """Name a definition from the text before its brace.

    A type is named after itself (not its template arguments or export macros), or after the
    name that follows its closing brace (``typedef struct {...} Name;``); an operator as
    ``operator==``; a function after the first name called at parenthesis depth 0 that is not
    an attribute (``__launch_bounds__``), preferably not an all-caps macro; anything else (an
    initialiser) after the last name before ``=``.
    """
    text = _LEADING_MACROS.sub("", " ".join(_drop_balanced(header, _TEMPLATE).split()))
    if _TYPE_DEF.match(text):
        before_bases = _drop_balanced(str(re.split(r"(?<!:):(?!:)", text)[0]), _ANGLE)
        names: list[str] = [
            n
            for n in _IDENT.findall(before_bases)
            if n not in _TYPE_WORDS and n not in _NOT_NAMES and not n.startswith("__")
        ]
        names = names or _IDENT.findall(trailer)[:1]
        if names:
            return next((n for n in reversed(names) if not n.isupper()), names[-1])
    operator = next((m for m in _OPERATOR.finditer(text) if _is_depth_zero(text, m.start())), None)
    if operator:
        symbol = operator.group(1).strip()
        return f"operator {symbol}" if symbol[0].isalpha() else f"operator{symbol}"
    callees = [
        m.group(1).replace(" ", "")
        for m in _CALLEE.finditer(text)
        if m.group(1) not in _NOT_NAMES and _is_depth_zero(text, m.start())
    ]
    if callees:
        return next((c for c in callees if not c.split("::")[-1].isupper()), callees[0])
    names = [str(n) for n in _IDENT.findall(text.split("=")[0]) if n not in _TYPE_WORDS]
    return names[-1] if names else f"L{start}"


def _is_depth_zero(text: str, index: int) -> bool:
    return text[:index].count("(") == text[:index].count(")")


def _drop_balanced(text: str, opener: re.Pattern[str]) -> str:
    """Drop each ``opener`` match through its balancing ``>`` (template lists, template args)."""
    out, index = [], 0
    while match := opener.search(text, index):
        out.append(text[index : match.start()])
        depth, index = 1, match.end()
        while index < len(text) and depth:
            depth += {"<": 1, ">": -1}.get(text[index], 0)
            index += 1
    out.append(text[index:])
    return "".join(out)


# -------------------------------------------------------------------------------------------- docs

_MD_HEADING = re.compile(r"^(#{1,2})\s+(.+?)\s*#*\s*$")
_RST_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+.:_])\1{2,}\s*$")


def _markdown_sections(lines: list[str]) -> list[_Segment]:
    """One section per H1/H2 heading (deeper headings stay in theirs); fenced code is skipped."""
    heads: list[tuple[int, str]] = []
    fence: str | None = None
    for lineno, line in enumerate(lines, 1):
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3] if fence is None else (None if stripped[:3] == fence else fence)
        elif fence is None and (match := _MD_HEADING.match(line)):
            heads.append((lineno, match.group(2)))
    return _sections(heads, len(lines))


def _rst_sections(lines: list[str]) -> list[_Segment]:
    """One section per title of the first two adornment styles met (reST has no fixed levels)."""
    styles: list[tuple[str, bool]] = []
    heads: list[tuple[int, str]] = []
    for index in range(len(lines) - 1):
        title, under = lines[index], lines[index + 1]
        adornment = _RST_ADORNMENT.match(under)
        if (
            not title.strip()
            or title[0].isspace()
            or _RST_ADORNMENT.match(title)
            or not adornment
            or len(under.rstrip()) < len(title.rstrip())
        ):
            continue
        overlined = index > 0 and lines[index - 1].rstrip() == under.rstrip()
        style = (adornment.group(1), overlined)
        if style not in styles:
            styles.append(style)
        if styles.index(style) < 2:
            heads.append((index if overlined else index + 1, title.strip()))
    return _sections(heads, len(lines))


def _sections(heads: list[tuple[int, str]], n_lines: int) -> list[_Segment]:
    bounds = [start for start, _ in heads[1:]] + [n_lines + 1]
    return [
        _Segment(_slug(title) or f"L{start}", start, following - 1)
        for (start, title), following in zip(heads, bounds, strict=True)
    ]


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60].rstrip("-")
