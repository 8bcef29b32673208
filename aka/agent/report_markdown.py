"""``report.md``: the run report as GitHub-flavoured Markdown.

Owns Markdown escaping and tables; the rows themselves come from ``report_data``. Every text from
the record (candidate messages, origins and families among it) is untrusted and escaped here.
"""

from __future__ import annotations

from aka.agent.records import RunRecord
from aka.agent.report_data import (
    _BUDGET_HEADERS,
    _CANDIDATE_HEADERS,
    _CANDIDATE_NUMERIC,
    _DROPOUT_HEADERS,
    _NOT_MEASURED,
    _SHAPE_HEADERS,
    _SHAPE_NUMERIC,
    _budget_rows,
    _candidate_rows,
    _decision_lines,
    _dropout_rows,
    _measured,
    _no_final,
    _shape_sections,
    _summary_rows,
)

__all__ = ["render_markdown"]


def _md(text: str) -> str:
    """Escape text for a Markdown table cell or list item (untrusted text included)."""
    text = " ".join(text.split())
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _md_table(headers: tuple[str, ...], rows: list[list[str]], numeric: frozenset[int]) -> str:
    align = ["---:" if i in numeric else "---" for i in range(len(headers))]
    lines = [
        "| " + " | ".join(_md(h) for h in headers) + " |",
        "| " + " | ".join(align) + " |",
    ]
    lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _md_results(record: RunRecord) -> list[str]:
    """The "Results of the incumbent" section: one table per final evaluation, with its notes."""
    out = ["## Results of the incumbent", ""]
    if not _measured(record):
        out += [f"_{_NOT_MEASURED}: latency, SOL and speedups are not available._", ""]
    sections = _shape_sections(record)
    if not sections:
        out += [_no_final(record), ""]
    for title, rows, notes in sections:
        out += [f"### {title}", ""]
        out += [_md_table(_SHAPE_HEADERS, rows, _SHAPE_NUMERIC) if rows else "No shapes.", ""]
        out += [f"- {_md(n)}" for n in notes]
        if notes:
            out.append("")
    return out


def _md_history(record: RunRecord) -> list[str]:
    """The Decisions, Dropouts, Candidates and Notes sections."""
    out = ["## Decisions", ""]
    decisions = _decision_lines(record)
    out += [f"- {'**promoted** ' if p else ''}{_md(t)}" for p, t in decisions] or ["None."]
    out += ["", "## Dropouts", ""]
    dropouts = _dropout_rows(record)
    out += [_md_table(_DROPOUT_HEADERS, dropouts, frozenset({0, 3, 4})) if dropouts else "None."]
    out += ["", "## Candidates", ""]
    candidates = _candidate_rows(record)
    out += [
        _md_table(_CANDIDATE_HEADERS, candidates, _CANDIDATE_NUMERIC) if candidates else "None."
    ]
    if record.notes:
        out += ["", "## Notes", ""] + [f"- {_md(n)}" for n in record.notes]
    return out


def render_markdown(record: RunRecord) -> str:
    """Render ``report.md``: summary, budget, per-shape tables, decisions, dropouts, candidates.

    Args:
        record: The run.

    Returns:
        GitHub-flavoured Markdown; every text from the record is escaped.
    """
    out = [f"# aka run {_md(record.run_id)}: {_md(record.problem_name)}", ""]
    out += [_md_table(("Item", "Value"), [list(r) for r in _summary_rows(record)], frozenset()), ""]
    budget = _md_table(_BUDGET_HEADERS, [list(r) for r in _budget_rows(record)], frozenset({1, 2}))
    out += ["## Budget", "", budget, ""]
    out += _md_results(record)
    out += _md_history(record)
    return "\n".join(out) + "\n"
