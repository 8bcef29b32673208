"""Prompt building: a ``ProposalContext`` turned into bounded prompt text.

This module owns the prompts the LLM proposer sends: it renders the Jinja2 templates of
``aka/agent/prompts/`` (``system.md.j2``, ``propose.md.j2`` and the partials they include) from a
``ProposalContext``, and keeps every part within ``PromptLimits``: the history compressed to one
line per record, the sources, description, profile and knowledge snippets clipped, and the earlier
conversation cut to the most recent turns that fit. It calls no model; ``aka.agent.llm`` does.

jinja2 is imported lazily, the first time a template is rendered.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from aka.agent.records import CandidateRecord, KBSnippet, ProposalContext
from aka.core.errors import ConfigError

__all__ = [
    "PromptLimits",
    "bound_conversation",
    "clip_text",
    "history_lines",
    "one_line",
    "render_system_prompt",
    "render_user_prompt",
]


@dataclass(frozen=True)
class PromptLimits:
    """Caps that keep a prompt bounded, in lines and characters.

    Attributes:
        history_lines: History records shown (records with a lesson are kept first).
        history_message_chars: Characters of a record's message or lesson in its line.
        reference_chars: The reference source.
        incumbent_chars: The incumbent's source.
        description_chars: The problem's description.
        profile_chars: The profile summary.
        kb_snippets: Knowledge snippets shown at most.
        kb_snippet_chars: Characters of one snippet's text.
        kb_total_chars: Characters of all snippets together.
        conversation_chars: Earlier turns re-sent (the most recent ones that fit).
        reply_chars: Characters of one reply kept in the stored conversation.
    """

    history_lines: int = 12
    history_message_chars: int = 160
    reference_chars: int = 12_000
    incumbent_chars: int = 16_000
    description_chars: int = 2_000
    profile_chars: int = 2_000
    kb_snippets: int = 8
    kb_snippet_chars: int = 1_500
    kb_total_chars: int = 8_000
    conversation_chars: int = 24_000
    reply_chars: int = 8_000


# --------------------------------------------------------------------------------- templates


@lru_cache(maxsize=8)
def _environment(templates_dir: str | None) -> Any:
    import jinja2

    loader: jinja2.BaseLoader
    if templates_dir is None:
        loader = jinja2.PackageLoader("aka.agent", "prompts")
    else:
        loader = jinja2.FileSystemLoader(templates_dir)
    return jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # prompts are Markdown for a model, not HTML
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _render(templates_dir: Path | None, name: str, values: Mapping[str, Any]) -> str:
    import jinja2

    env = _environment(str(templates_dir) if templates_dir is not None else None)
    try:
        text: str = env.get_template(name).render(**values)
    except jinja2.TemplateError as err:
        where = templates_dir if templates_dir is not None else "aka/agent/prompts"
        raise ConfigError(
            f"prompt template {where}/{name} failed to render: {err}; fix the template or "
            "drop the templates_dir override to use the packaged prompts"
        ) from err
    return _squeeze_blank_lines(text)


def _squeeze_blank_lines(text: str) -> str:
    """Collapse runs of blank lines that template logic leaves, never inside code fences."""
    lines: list[str] = []
    in_code = False
    for line in text.rstrip().splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code or line.strip() or (lines and lines[-1].strip()):
            lines.append(line)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ formatting


def clip_text(text: str, limit: int) -> str:
    """Keep the head and the tail of ``text`` within ``limit`` characters, marking the cut."""
    text = text.rstrip()
    if len(text) <= limit:
        return text
    marker = "\n... [{} characters omitted] ...\n"
    keep = max(limit - len(marker) - 8, 0)
    head = keep * 2 // 3
    tail = keep - head
    omitted = len(text) - head - tail
    return text[:head] + marker.format(omitted) + (text[-tail:] if tail else "")


def one_line(text: str, limit: int) -> str:
    """Flatten ``text`` to one line of at most ``limit`` characters, ending in ``...`` if cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 3, 0)].rstrip() + "..."


def _num(value: float | None, spec: str = ".3g", suffix: str = "") -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:{spec}}{suffix}"


def _hardware_lines(hardware: Mapping[str, Any], prefix: str = "") -> list[str]:
    lines: list[str] = []
    for key, value in hardware.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            lines.extend(_hardware_lines(value, f"{name}."))
        elif isinstance(value, list | tuple):
            lines.append(f"{name}: {', '.join(str(v) for v in value)}")
        elif isinstance(value, float):
            lines.append(f"{name}: {value:.4g}")
        elif value is not None:
            lines.append(f"{name}: {value}")
    return lines


def _results(record: CandidateRecord) -> str:
    parts = [record.verdict]
    if record.score is not None:
        parts.append(f"SOL {record.score:.3f}")
    if record.speedup_eager is not None:
        parts.append(f"{record.speedup_eager:.2f}x vs eager")
    if record.speedup_compile is not None:
        parts.append(f"{record.speedup_compile:.2f}x vs torch.compile")
    return ", ".join(parts)


def history_lines(
    history: Sequence[CandidateRecord], limits: PromptLimits
) -> tuple[list[str], int]:
    """Compress the history to one line per record, capped, oldest first.

    Records with a correctness lesson are kept before others (dropout keeps them for the same
    reason); the rest of the cap goes to the most recent records.

    Returns:
        The lines and how many records were left out.
    """
    cap = max(limits.history_lines, 0)
    with_lesson = [i for i, r in enumerate(history) if r.lesson]
    keep = set(with_lesson[-cap:]) if cap else set()
    for i in range(len(history) - 1, -1, -1):
        if len(keep) >= cap:
            break
        keep.add(i)
    lines: list[str] = []
    for i in sorted(keep):
        record = history[i]
        line = f"{record.id} [{record.family}] {_results(record)}"
        if record.message:
            line += f" - {one_line(record.message, limits.history_message_chars)}"
        if record.lesson:
            line += f" - lesson: {one_line(record.lesson, limits.history_message_chars)}"
        lines.append(line)
    return lines, len(history) - len(keep)


def _kb_view(
    snippets: Sequence[KBSnippet], limits: PromptLimits
) -> tuple[list[dict[str, str]], int]:
    shown: list[dict[str, str]] = []
    budget = limits.kb_total_chars
    for snippet in snippets[: limits.kb_snippets]:
        if budget <= 0:
            break
        text = clip_text(snippet.text, min(limits.kb_snippet_chars, budget))
        budget -= len(text)
        shown.append({"id": snippet.id, "title": snippet.title, "kind": snippet.kind, "text": text})
    return shown, len(snippets) - len(shown)


def _incumbent_view(ctx: ProposalContext, limits: PromptLimits) -> dict[str, Any] | None:
    record = ctx.incumbent
    if record is None:
        return None
    if ctx.performance_measured:
        headline = _results(record)
    else:
        headline = f"{record.verdict} (correct on every checked shape; performance not measured)"
    shapes = [
        {
            "shape_id": s.shape_id,
            "verdict": s.verdict,
            "latency": _num(s.latency_us, ".2f"),
            "sol": _num(s.sol_fraction, ".3f"),
            "eager": _num(s.speedup_eager, ".2f", "x"),
            "compile": _num(s.speedup_compile, ".2f", "x"),
            "bound": s.bound or "n/a",
        }
        for s in record.shapes
    ]
    source = clip_text(ctx.incumbent_source, limits.incumbent_chars) if ctx.incumbent_source else ""
    return {
        "id": record.id,
        "family": record.family,
        "headline": headline,
        "shapes": shapes,
        "source": source,
    }


def render_system_prompt(ctx: ProposalContext, *, templates_dir: Path | None = None) -> str:
    """Render the system prompt (role, candidate contract for ``ctx.dsl``, reply format)."""
    return _render(templates_dir, "system.md.j2", {"dsl": ctx.dsl})


def render_user_prompt(
    ctx: ProposalContext,
    *,
    index: int = 1,
    sibling_families: Sequence[str] = (),
    templates_dir: Path | None = None,
    limits: PromptLimits | None = None,
) -> str:
    """Render this round's user prompt from everything in ``ctx``, within ``limits``.

    Args:
        ctx: The round's context.
        index: Which of the round's ``ctx.n`` candidates this prompt asks for (1-based).
        sibling_families: Families the round's earlier candidates already used.
        templates_dir: A folder overriding the packaged templates.
        limits: Prompt caps (default ``PromptLimits()``).

    Returns:
        The Markdown prompt.
    """
    limits = limits or PromptLimits()
    lines, omitted = history_lines(ctx.history, limits)
    kb, kb_omitted = _kb_view(ctx.kb, limits)
    profile = None
    if ctx.profile is not None:
        profile = {
            "candidate_id": ctx.profile.candidate_id,
            "summary": clip_text(ctx.profile.summary, limits.profile_chars),
            "hints": [one_line(h, 200) for h in ctx.profile.hints[:8]],
        }
    target = f"{'CUDA C++' if ctx.dsl == 'cuda' else 'Triton'} kernels"
    if ctx.arch:
        target += f" for {ctx.arch}"
    values = {
        "round": ctx.round,
        "index": index,
        "n": ctx.n,
        "dsl": ctx.dsl,
        "target": target,
        "problem": {
            "name": ctx.problem_name,
            "op_family": ctx.op_family,
            "description": clip_text(ctx.description, limits.description_chars),
        },
        "reference": clip_text(ctx.reference_source, limits.reference_chars),
        "init_signature": ctx.init_signature,
        "forward_signature": ctx.forward_signature,
        "hardware": _hardware_lines(ctx.hardware),
        "performance_measured": ctx.performance_measured,
        "incumbent": _incumbent_view(ctx, limits),
        "profile": profile,
        "history": lines,
        "history_omitted": omitted,
        "kb": kb,
        "kb_omitted": kb_omitted,
        "forbidden_families": list(ctx.forbidden_families),
        "sibling_families": list(dict.fromkeys(sibling_families)),
        "tried": len(ctx.tried_sources),
        "kernel_kind": (
            "CUDA kernels built with `torch.utils.cpp_extension.load_inline`"
            if ctx.dsl == "cuda"
            else "`@triton.jit` kernels"
        ),
    }
    return _render(templates_dir, "propose.md.j2", values)


def bound_conversation(
    conversation: Sequence[Mapping[str, str]], max_chars: int
) -> list[dict[str, str]]:
    """Return the most recent turns that fit in ``max_chars``, starting with a user turn."""
    kept: list[dict[str, str]] = []
    total = 0
    for turn in reversed(conversation):
        size = len(turn.get("content", ""))
        if total + size > max_chars:
            break
        kept.append({"role": turn["role"], "content": turn.get("content", "")})
        total += size
    kept.reverse()
    while kept and kept[0]["role"] != "user":
        kept.pop(0)
    return kept
