"""What both run reports say, taken from a ``RunRecord`` as plain text.

Owns the facts read off the record (final evaluations, incumbent, device line, round count), the
number formatting both reports share (so Markdown and HTML agree to the digit), the table headers,
and the rows of every table and list. Nothing here escapes: each renderer (``report_markdown``,
``report_html``) escapes the text for its own format, and ``report_kernel`` reuses the record
helpers for the kernel header. The underscore names are private to the ``report*`` modules.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from aka.agent.records import CandidateRecord, RunRecord
from aka.bench import EvalResult, ShapeResult
from aka.core.errors import AgentError

_DASH = "—"
_NOT_MEASURED = "CPU interpreter — performance was not measured"
_MESSAGE_CHARS = 160
_ANCHOR_IDS = {"baseline", "from"}
_SHAPE_HEADERS = (
    "Shape",
    "Split",
    "Verdict",
    "Latency µs",
    "T_sol µs",
    "SOL %",
    "Eager µs",
    "torch.compile µs",
    "vs eager",
    "vs compile",
    "Bound",
)
_SHAPE_NUMERIC = frozenset(range(3, 10))
_CANDIDATE_HEADERS = (
    "ID",
    "Round",
    "Origin",
    "Family",
    "Verdict",
    "Score (SOL %)",
    "vs eager",
    "Message",
)
_CANDIDATE_NUMERIC = frozenset({1, 5, 6})
_DROPOUT_HEADERS = ("Round", "Masked ids", "Forbidden families", "Cleared messages", "Seed")
_BUDGET_HEADERS = ("Budget", "Used", "Limit")


# --------------------------------------------------------------------------------------------
# Data taken from the record
# --------------------------------------------------------------------------------------------


def _eval(data: dict[str, Any] | None, which: str) -> EvalResult | None:
    if data is None:
        return None
    try:
        return EvalResult.model_validate(data)
    except ValidationError as err:
        raise AgentError(
            f"run record field '{which}' is not an EvalResult ({err.error_count()} errors); "
            "store EvalResult.model_dump(mode='json') there"
        ) from err


def _finals(record: RunRecord) -> list[tuple[str, EvalResult]]:
    out: list[tuple[str, EvalResult]] = []
    for which, data in (("final_tune", record.final_tune), ("final_holdout", record.final_holdout)):
        result = _eval(data, which)
        if result is not None:
            out.append((which, result))
    return out


def _final_shapes(record: RunRecord) -> list[ShapeResult]:
    return [shape for _, result in _finals(record) for shape in result.shapes]


def _incumbent(record: RunRecord) -> CandidateRecord | None:
    return next((c for c in record.candidates if c.id == record.incumbent_id), None)


def _measured(record: RunRecord) -> bool:
    return record.performance_measured and record.mode == "gpu"


def _device_text(record: RunRecord) -> str:
    if record.mode == "cpu_interpreter":
        return _NOT_MEASURED
    name = record.device or "GPU (name unknown)"
    return name if record.performance_measured else f"{name} — performance was not measured"


def _round_count(record: RunRecord) -> int:
    if record.rounds:
        return len({p.round for p in record.rounds})
    return max((c.round for c in record.candidates), default=0)


# --------------------------------------------------------------------------------------------
# Number formatting (one place, so both reports agree)
# --------------------------------------------------------------------------------------------


def _us(value: float | None) -> str:
    return _DASH if value is None else f"{value:.2f}"


def _pct(fraction: float | None) -> str:
    return _DASH if fraction is None else f"{fraction * 100:.1f}"


def _times(value: float | None) -> str:
    return _DASH if value is None else f"{value:.2f}×"


def _seconds(value: float | None) -> str:
    if value is None:
        return "none"
    return f"{value:.1f} s" if value < 120 else f"{value:.1f} s ({value / 60:.1f} min)"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _first_line(text: str, limit: int = _MESSAGE_CHARS) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------
# Rows shared by both reports (plain text; each renderer escapes for its format)
# --------------------------------------------------------------------------------------------


def _summary_rows(record: RunRecord) -> list[tuple[str, str]]:
    family = record.op_family or "unknown"
    if record.op_family and record.op_family_inferred:
        family += " (inferred)"
    rows = [
        ("Run", record.run_id),
        ("Problem", f"{record.problem_name} ({record.problem_path})"),
        ("Operator family", family),
        ("DSL", record.dsl),
        ("Device", _device_text(record)),
        ("Proposer", record.proposer),
        ("Rounds", str(_round_count(record))),
        ("Stop reason", record.stop_reason),
        ("Incumbent", record.incumbent_id or "none (no correct kernel was found)"),
    ]
    for which, result in _finals(record):
        label = "Tune score" if which == "final_tune" else "Holdout score"
        if result.performance_measured and result.score is not None:
            n = len(result.shapes)
            value = f"{_pct(result.score)} % SOL (geometric mean over {_plural(n, 'shape')})"
        else:
            value = f"{result.verdict.value}; performance was not measured"
        rows.append((label, value))
    rows += [
        ("Started", record.started_at),
        ("Finished", record.finished_at or _DASH),
        ("Seed", str(record.seed)),
        ("aka version", record.aka_version),
    ]
    return rows


def _budget_rows(record: RunRecord) -> list[tuple[str, str, str]]:
    usage, limits = record.usage, record.limits
    tokens = usage.tokens

    def limit(value: float | int | None, fmt: str) -> str:
        return "none" if value is None else fmt.format(value)

    return [
        ("Iterations", str(usage.iters), str(limits.max_iters)),
        ("Wall time", _seconds(usage.wall_s), _seconds(limits.wall_time_s)),
        (
            "Tokens",
            f"{tokens.total_tokens:,} ({tokens.prompt_tokens:,} prompt + "
            f"{tokens.completion_tokens:,} completion, {tokens.calls} calls)",
            limit(limits.max_tokens, "{:,}"),
        ),
        ("Cost", f"${tokens.cost_usd:.4f}", limit(limits.max_cost_usd, "${:.2f}")),
        ("GPU time", _seconds(usage.gpu_s), _seconds(limits.max_gpu_s)),
        ("Candidates evaluated", str(usage.candidates), _DASH),
        (
            "Target SOL",
            _DASH,
            _DASH if limits.target_sol is None else f"{_pct(limits.target_sol)} %",
        ),
    ]


def _shape_row(shape: ShapeResult) -> list[str]:
    verdict = shape.verdict.value + (f" ({', '.join(shape.flags)})" if shape.flags else "")
    eager = shape.baselines_us.get("eager")
    compiled = shape.baselines_us.get("torch_compile")
    return [
        shape.shape_id,
        shape.split.value,
        verdict,
        _us(shape.latency_us.median if shape.latency_us else None),
        _us(shape.t_sol_us),
        _pct(shape.sol_fraction),
        _us(eager.median if eager else None),
        _us(compiled.median if compiled else None),
        _times(shape.speedup_vs.get("eager")),
        _times(shape.speedup_vs.get("torch_compile")),
        shape.bound or _DASH,
    ]


def _shape_sections(record: RunRecord) -> list[tuple[str, list[list[str]], list[str]]]:
    """Return (title, rows, notes) for the tune and holdout evaluations of the incumbent."""
    sections: list[tuple[str, list[list[str]], list[str]]] = []
    for which, result in _finals(record):
        title = "Tune shapes" if which == "final_tune" else "Holdout shapes"
        notes = list(result.notes)
        if result.failure is not None:
            notes.insert(0, f"{result.failure.kind.value}: {_first_line(result.failure.message)}")
        if result.skipped_shapes:
            notes.append("skipped: " + ", ".join(result.skipped_shapes))
        sections.append((title, [_shape_row(s) for s in result.shapes], notes))
    return sections


def _no_final(record: RunRecord) -> str:
    if record.incumbent_id is None:
        return "No final evaluation: the run found no correct kernel."
    return f"No final evaluation of the incumbent {record.incumbent_id} was recorded."


def _decision_lines(record: RunRecord) -> list[tuple[bool, str]]:
    lines: list[tuple[bool, str]] = []
    for d in record.decisions:
        if d.promoted:
            text = f"Round {d.round}: promoted {d.candidate_id}"
            if d.incumbent_id:
                text += f" over {d.incumbent_id}"
        else:
            text = f"Round {d.round}: kept {d.incumbent_id or 'no incumbent'}"
            if d.candidate_id:
                text += f" (best candidate {d.candidate_id})"
        if d.ratio is not None:
            noise = f" ± {d.noise:.3f}" if d.noise is not None else ""
            text += f" — ratio {d.ratio:.3f}{noise}"
        text += f" — {d.reason}"
        lines.append((d.promoted, text))
    return lines


def _dropout_rows(record: RunRecord) -> list[list[str]]:
    return [
        [
            str(e.round),
            ", ".join(e.masked_ids) or _DASH,
            ", ".join(e.forbidden_families) or _DASH,
            str(e.cleared_messages),
            str(e.seed),
        ]
        for e in record.dropouts
    ]


def _candidate_rows(record: RunRecord) -> list[list[str]]:
    rows = []
    for c in record.candidates:
        cid = c.id + (" (incumbent)" if c.id == record.incumbent_id else "")
        verdict = c.verdict + (" (masked)" if c.masked else "")
        message = _first_line(c.message or c.lesson or "")
        rows.append(
            [
                cid,
                str(c.round),
                c.origin,
                c.family,
                verdict,
                _pct(c.score),
                _times(c.speedup_eager),
                message,
            ]
        )
    return rows
