"""YAML front matter: the ``---``-fenced block that opens knowledge docs and kernel headers.

Owns splitting a text into (front matter mapping, body). Reads text only; never imports code.
"""

from __future__ import annotations

import ast
from typing import Any

import yaml

from aka.core.errors import SpecError
from aka.core.pyparse import parse_module

__all__ = ["kernel_header", "split_front_matter"]

_FENCE = "---"


def split_front_matter(text: str, *, source: str) -> tuple[dict[str, Any], str]:
    """Split ``text`` into its front matter and the body after it.

    Args:
        text: A Markdown document or a kernel header, starting with a ``---`` line.
        source: The file name, for error messages.

    Returns:
        The parsed mapping and the remaining text.

    Raises:
        SpecError: No front matter, an unclosed fence, invalid YAML or a non-mapping.
    """
    lines = text.lstrip("\ufeff").lstrip("\n").splitlines()
    if not lines or lines[0].strip() != _FENCE:
        raise SpecError("must open with YAML front matter between '---' lines; add it", file=source)
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == _FENCE)
    except StopIteration:
        raise SpecError("front matter has no closing '---' line; add one", file=source) from None
    try:
        data = yaml.safe_load("\n".join(lines[1:end])) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        raise SpecError(
            f"front matter is not valid YAML{where}; fix the syntax", file=source
        ) from err
    if not isinstance(data, dict):
        raise SpecError("front matter must be a YAML mapping of fields", file=source)
    return data, "\n".join(lines[end + 1 :]).strip("\n")


def kernel_header(source_text: str, *, source: str) -> tuple[dict[str, Any], str]:
    """Return a kernel file's header (front matter of its module docstring) and the paragraph.

    Raises:
        SpecError: The file does not parse, or has no docstring with front matter.
    """
    try:
        tree = parse_module(source_text, filename=source)
    except SyntaxError as err:
        raise SpecError(
            f"Python syntax error at line {err.lineno}: {err.msg}", file=source
        ) from err
    doc = ast.get_docstring(tree, clean=False)
    if doc is None:
        raise SpecError(
            "kernel files open with a docstring holding YAML front matter (STYLE R2)", file=source
        )
    return split_front_matter(doc, source=source)
