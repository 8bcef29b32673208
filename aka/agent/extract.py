"""Turn an LLM's reply into a ``Proposal``: the candidate file, its technique family, a rationale.

The reply format the prompts ask for is a ``Family: <name>`` line, an optional ``Knowledge: <ids>``
line, a few sentences of rationale and exactly one fenced code block holding the whole candidate
file. Models drift from formats, so parsing is lenient where the intent is clear and strict where it
is not:

- Fences: ```` ```python ````, ```` ```py ````, a bare ```` ``` ````, ```` ```cuda-in-python ````
  or any other info string (and ``~~~``). A final fence left open (a reply cut off by the token
  limit) still yields its text. With several blocks, the one defining ``class ModelNew`` wins
  (Python-tagged first, then the longest); without any, the longest block is reported.
- No block, or no block defining ``ModelNew``: ``Proposal(source=None, error=...)``, recorded as a
  failed proposal, never raised.
- A block that defines ``ModelNew`` but does not parse is passed through unchanged: the scorer
  rejects it as ``compile_error`` with the exact syntax error, like any other candidate.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from aka.agent.records import Proposal
from aka.core.pyparse import parse_module

__all__ = [
    "DEFAULT_FAMILY",
    "CodeBlock",
    "defines_model_new",
    "extract_proposal",
    "find_code_blocks",
    "normalize_family",
    "parse_cited_ids",
    "parse_family",
    "pick_candidate_block",
]

#: The family of a reply that names none.
DEFAULT_FAMILY = "llm"

_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)[ \t]*$")
_FAMILY = re.compile(
    r"^[\s>*_#-]*(?:technique\s+)?family[\s*_]*:[\s*_]*(?P<value>.+?)[\s*_]*$",
    re.IGNORECASE | re.MULTILINE,
)
_KNOWLEDGE = re.compile(
    r"^[\s>*_#-]*(?:knowledge|kb|cites?|sources?)[\s*_]*:[\s*_]*(?P<value>.+?)[\s*_]*$",
    re.IGNORECASE | re.MULTILINE,
)
_MODEL_NEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
_PYTHON_TAGS = frozenset({"python", "py", "python3", "cuda-in-python", "triton"})
_FAMILY_MAX = 60
_RATIONALE_MAX = 600


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block of a reply.

    Attributes:
        lang: The info string's first word, lower-cased ("" for a bare fence).
        code: The block's text, without the fences.
        closed: Whether a closing fence was found (False: the reply ended inside the block).
        start: Character offset of the opening fence in the reply.
        end: Character offset just past the closing fence (or the reply's end).
    """

    lang: str
    code: str
    closed: bool
    start: int
    end: int

    @property
    def is_python(self) -> bool:
        """Whether the info string marks Python (or says nothing)."""
        return self.lang in _PYTHON_TAGS or self.lang == ""


def find_code_blocks(text: str) -> list[CodeBlock]:
    """Return the fenced code blocks of a Markdown reply, in order.

    A block closes at a line holding only a fence of the same character, at least as long as the
    opening one (CommonMark's rule), so a shorter fence inside the code does not end it.
    """
    blocks: list[CodeBlock] = []
    lines = text.splitlines(keepends=True)
    offset = 0
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i].rstrip("\r\n"))
        if match is None:
            offset += len(lines[i])
            i += 1
            continue
        fence = match.group("fence")
        lang = (match.group("info").split() or [""])[0].lower()
        start = offset
        offset += len(lines[i])
        i += 1
        body: list[str] = []
        closed = False
        while i < len(lines):
            stripped = lines[i].strip()
            offset += len(lines[i])
            i += 1
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                closed = True
                break
            body.append(lines[i - 1])
        code = "".join(body)
        blocks.append(CodeBlock(lang=lang, code=code, closed=closed, start=start, end=offset))
    return blocks


def defines_model_new(code: str) -> bool:
    """Whether ``code`` defines ``class ModelNew`` at module level (by AST, else by text)."""
    try:
        tree = parse_module(code)
    except SyntaxError:
        return _MODEL_NEW.search(code) is not None
    return any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)


def pick_candidate_block(blocks: list[CodeBlock]) -> CodeBlock | None:
    """Return the block that holds the candidate: defines ModelNew, Python-tagged, longest."""
    defining = [b for b in blocks if defines_model_new(b.code)]
    if not defining:
        return None
    return max(defining, key=lambda b: (b.is_python, len(b.code)))


def normalize_family(raw: str) -> str:
    """Return a family name as a short slug (``"Split-K GEMM"`` -> ``"split-k-gemm"``).

    Dropout compares families as strings, so two spellings of one name must become one.
    Underscores stay, so kernel ids used as families (``rms_norm_rowwise``) keep their spelling.
    """
    text = raw.strip().strip("`*_\"'").lower()
    text = re.sub(r"[^a-z0-9_+.]+", "-", text).strip("-._")
    return text[:_FAMILY_MAX].rstrip("-.") or DEFAULT_FAMILY


def parse_family(text: str) -> str | None:
    """Return the normalized ``Family:`` value of the prose outside code blocks, or None."""
    match = _FAMILY.search(text)
    return normalize_family(match.group("value")) if match else None


def parse_cited_ids(text: str) -> list[str]:
    """Return the ids of a ``Knowledge: a, b`` line ("none" and empty mean no citation)."""
    match = _KNOWLEDGE.search(text)
    if match is None:
        return []
    ids = [p.strip().strip("`*[]()\"'") for p in re.split(r"[,;\s]+", match.group("value"))]
    return [i for i in ids if i and i.lower() not in ("none", "n/a", "-")]


def _prose(text: str, blocks: list[CodeBlock]) -> str:
    parts: list[str] = []
    last = 0
    for block in blocks:
        parts.append(text[last : block.start])
        last = block.end
    parts.append(text[last:])
    return "".join(parts)


def _rationale(prose: str) -> str:
    kept = [
        line.strip()
        for line in prose.splitlines()
        if line.strip() and not _FAMILY.match(line) and not _KNOWLEDGE.match(line)
    ]
    text = " ".join(kept)
    return text if len(text) <= _RATIONALE_MAX else text[: _RATIONALE_MAX - 3].rstrip() + "..."


def extract_proposal(
    reply: str,
    *,
    origin: str,
    prompt: str | None = None,
    params: dict[str, object] | None = None,
) -> Proposal:
    """Parse one reply into a ``Proposal``; a malformed reply is a failed proposal, not an error.

    Args:
        reply: The model's raw reply text.
        origin: The proposal's origin, e.g. ``"llm:openai/gpt-4o"``.
        prompt: The prompt text that produced the reply (kept as an artifact).
        params: Extra values to record (e.g. the sampling temperature).

    Returns:
        The proposal: ``source`` set when a block defining ``ModelNew`` was found (even if it does
        not parse: the scorer reports syntax errors), else ``source=None`` and ``error`` saying
        what the reply lacked. ``params["kb_cited"]`` lists the knowledge ids the reply cites.
    """
    blocks = find_code_blocks(reply)
    prose = _prose(reply, blocks)
    family = parse_family(prose) or DEFAULT_FAMILY
    cited = parse_cited_ids(prose)
    recorded: dict[str, object] = dict(params or {})
    if cited:
        recorded["kb_cited"] = cited
    source: str | None = None
    error: str | None = None
    if not reply.strip():
        error = "the reply is empty"
    elif not blocks:
        error = (
            "the reply has no fenced code block; the candidate file must come in one "
            "```python block"
        )
    else:
        chosen = pick_candidate_block(blocks)
        if chosen is None:
            error = (
                f"none of the reply's {len(blocks)} code block(s) defines class ModelNew (the "
                "candidate contract: class ModelNew(torch.nn.Module) with the reference's "
                "__init__ and forward signatures)"
            )
        else:
            source = chosen.code if chosen.code.endswith("\n") else chosen.code + "\n"
    return Proposal(
        source=source,
        family=family,
        origin=origin,
        params=recorded,
        rationale=_rationale(prose),
        error=error,
        prompt=prompt,
        reply=reply,
    )
