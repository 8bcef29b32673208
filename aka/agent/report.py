"""The run directory the finalize node writes: the kernel, the reports, the record, the artifacts.

Layout of ``<out>/``::

    kernel.py      the incumbent, its module docstring replaced by a KernelMeta header
                   (``status: candidate``, ``measured:`` from the final GPU results)
    report.md      the run summary, per-shape tables, decisions, dropouts and candidates
    report.html    the same, self-contained (inline CSS and SVG charts, no script, no assets)
    run.json       ``RunRecord`` as JSON: enough to audit every decision and re-render both reports
    artifacts/     prompts, replies, candidate files... (names relative to this folder)

Every file is written to a temporary file beside its target and renamed over it, so a killed
process leaves either the old file or the new one, never half of one. Candidate messages, origins
and families come from proposers (an LLM among them) and are untrusted: every text is escaped for
the format it lands in. ``render_markdown``, ``render_html`` and ``build_kernel_file`` are public so
the service can render the same documents from a stored ``run.json``.
"""

from __future__ import annotations

import ast
import contextlib
import html
import logging
import math
import os
import re
import tempfile
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import yaml
from pydantic import ValidationError

from aka.agent.records import CandidateRecord, RunRecord
from aka.bench import EvalResult, ShapeResult, Verdict
from aka.core.errors import AgentError, SpecError
from aka.hardware import match_profile
from aka.spec import (
    Arch,
    DType,
    KernelMeta,
    KernelSource,
    OpFamily,
    ProblemSpec,
    Vendor,
    kernel_header,
    load_problem,
    split_front_matter,
)

__all__ = [
    "RunPaths",
    "build_kernel_file",
    "normalize_dtype",
    "problem_dtypes",
    "render_html",
    "render_markdown",
    "write_run_dir",
]

logger = logging.getLogger(__name__)

_DASH = "—"
_NOT_MEASURED = "CPU interpreter — performance was not measured"
_PROVENANCE = "Produced by aka run"
_MESSAGE_CHARS = 160
_ANCHOR_IDS = {"baseline", "from"}
_BOUNDS = ("memory", "compute", "latency")
_COMPUTE_FAMILIES = {OpFamily.GEMM.value, OpFamily.ATTENTION.value, OpFamily.CONV.value}
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


@dataclass(frozen=True)
class RunPaths:
    """The files ``write_run_dir`` wrote.

    Attributes:
        root: The run directory.
        run_json: ``run.json``.
        report_md: ``report.md``.
        report_html: ``report.html``.
        kernel: ``kernel.py``; None when no kernel source was given (no correct kernel).
        artifacts: Every file written under ``artifacts/``, in the order given.
    """

    root: Path
    run_json: Path
    report_md: Path
    report_html: Path
    kernel: Path | None
    artifacts: tuple[Path, ...]


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def write_run_dir(
    out: Path,
    record: RunRecord,
    *,
    kernel_source: str | None,
    artifacts: Mapping[str, str] | None = None,
    dtypes: Mapping[str, str] | None = None,
) -> RunPaths:
    """Write a run directory (see the module docstring for its layout).

    Everything is rendered and every artifact name checked before the first file is written, so
    a bad name or an unparsable kernel leaves the directory as it was.

    Args:
        out: The run directory; created if missing.
        record: The finished run.
        kernel_source: The incumbent's source; None when the run found no correct kernel (then no
            ``kernel.py`` is written).
        artifacts: Relative name (``prompts/c1_0.md``) to text, written under ``artifacts/``.
        dtypes: Shape id to dtype name for the kernel header (see ``build_kernel_file``).

    Returns:
        The paths written.

    Raises:
        AgentError: An artifact name escapes ``artifacts/`` (absolute, ``..``, empty), or the kernel
            source does not parse.
    """
    root = Path(out)
    artifact_root = root / "artifacts"
    targets = _artifact_targets(artifact_root, artifacts or {})
    kernel_text = (
        build_kernel_file(record, kernel_source, dtypes=dtypes)
        if kernel_source is not None
        else None
    )
    markdown = render_markdown(record)
    page = render_html(record)
    run_json = record.model_dump_json(indent=2) + "\n"

    root.mkdir(parents=True, exist_ok=True)
    for path, text in targets:
        _atomic_write(path, text)
    kernel_path: Path | None = None
    if kernel_text is not None:
        kernel_path = root / "kernel.py"
        _atomic_write(kernel_path, kernel_text)
    paths = RunPaths(
        root=root,
        run_json=root / "run.json",
        report_md=root / "report.md",
        report_html=root / "report.html",
        kernel=kernel_path,
        artifacts=tuple(path for path, _ in targets),
    )
    _atomic_write(paths.report_md, markdown)
    _atomic_write(paths.report_html, page)
    _atomic_write(paths.run_json, run_json)  # last: its presence means the directory is complete
    logger.info(
        "run %s written to %s (%d artifacts, kernel: %s)",
        record.run_id,
        root,
        len(targets),
        "yes" if kernel_path else "none",
    )
    return paths


def _artifact_targets(root: Path, artifacts: Mapping[str, str]) -> list[tuple[Path, str]]:
    """Map artifact names to paths under ``root``, rejecting any name that would leave it."""
    targets: list[tuple[Path, str]] = []
    resolved_root = root.resolve()
    for name, text in artifacts.items():
        posix = PurePosixPath(name.replace("\\", "/"))
        parts = [p for p in posix.parts if p not in ("", ".")]
        escapes = (
            not name.strip()
            or "\x00" in name
            or posix.is_absolute()
            or bool(PureWindowsPath(name).drive)
            or ".." in parts
            or not parts
        )
        target = root.joinpath(*parts) if parts else root
        if not escapes:
            # a symlink already inside artifacts/ must not lead out of it either
            escapes = not target.resolve().is_relative_to(resolved_root)
        if escapes:
            raise AgentError(
                f"artifact name {name!r} does not stay inside the run directory's artifacts/ "
                "folder; give a relative path without '..', e.g. 'prompts/c1_0.md'",
                code="agent.artifact_path",
            )
        targets.append((target, text))
    paths = {path for path, _ in targets}
    for path, _ in targets:
        clash = next((parent for parent in path.parents if parent in paths), None)
        if clash is not None:
            raise AgentError(
                f"artifact {str(clash.relative_to(root))!r} is a file but "
                f"{str(path.relative_to(root))!r} needs it to be a folder; rename one of them",
                code="agent.artifact_path",
            )
    return targets


def _atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; reports are meant to be read
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


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
    out += ["## Results of the incumbent", ""]
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
    out += ["## Decisions", ""]
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
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# SVG charts
# --------------------------------------------------------------------------------------------

_W, _H = 640.0, 240.0
_LEFT, _RIGHT, _TOP, _BOTTOM = 64.0, 16.0, 18.0, 40.0


@dataclass(frozen=True)
class _Frame:
    """Plot geometry: rounds r0..r1 on x (half a round of room each side), 0..y_max on y."""

    r0: int
    r1: int
    y_max: float

    def x(self, r: float) -> float:
        span = self.r1 - self.r0 + 1
        return _LEFT + (r - self.r0 + 0.5) / span * (_W - _LEFT - _RIGHT)

    def y(self, v: float) -> float:
        return _H - _BOTTOM - min(max(v, 0.0), self.y_max) / self.y_max * (_H - _TOP - _BOTTOM)

    @property
    def step(self) -> float:
        return (_W - _LEFT - _RIGHT) / (self.r1 - self.r0 + 1)


def _ticks(top: float, *, integer: bool = False) -> list[float]:
    """Return 0, step, 2*step, ... up to the first multiple of a round step at or above ``top``.

    The step is 1, 2 or 5 times a power of ten, chosen so about four intervals cover ``top``.
    """
    top = max(top, 1e-9)
    raw = top / 4
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(f * power for f in (1.0, 2.0, 5.0, 10.0) if f * power >= raw - 1e-12)
    if integer:
        step = float(max(1, math.ceil(step)))
    count = max(1, math.ceil(top / step - 1e-9))
    return [step * i for i in range(count + 1)]


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _svg_axes(frame: _Frame, ticks: list[float], fmt: str, y_label: str) -> list[str]:
    parts: list[str] = []
    x0, x1 = _LEFT, _W - _RIGHT
    for t in ticks:
        y = frame.y(t)
        parts.append(
            f'<line class="grid" x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" '
            'stroke="#e3e3e3"/>'
        )
        parts.append(
            f'<text x="{x0 - 6:.1f}" y="{y + 4:.1f}" text-anchor="end">{_e(fmt.format(t))}</text>'
        )
    base = frame.y(0)
    parts.append(
        f'<line x1="{x0:.1f}" y1="{base:.1f}" x2="{x1:.1f}" y2="{base:.1f}" stroke="#555"/>'
    )
    parts.append(
        f'<line x1="{x0:.1f}" y1="{_TOP:.1f}" x2="{x0:.1f}" y2="{base:.1f}" stroke="#555"/>'
    )
    count = frame.r1 - frame.r0 + 1
    every = max(1, math.ceil(count / 12))
    for r in range(frame.r0, frame.r1 + 1):
        if (r - frame.r0) % every == 0:
            parts.append(
                f'<text x="{frame.x(r):.1f}" y="{base + 16:.1f}" text-anchor="middle">{r}</text>'
            )
    parts.append(
        f'<text x="{(x0 + x1) / 2:.1f}" y="{_H - 6:.1f}" text-anchor="middle">round</text>'
    )
    parts.append(
        f'<text x="12" y="{(_TOP + base) / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {(_TOP + base) / 2:.1f})">{_e(y_label)}</text>'
    )
    return parts


def _svg_dropouts(frame: _Frame, rounds: list[int]) -> list[str]:
    """One dashed vertical line per dropout, half a round after the round it followed."""
    parts = []
    for r in rounds:
        x = frame.x(r + 0.5)
        parts.append(
            f'<line class="dropout" x1="{x:.1f}" y1="{_TOP:.1f}" x2="{x:.1f}" '
            f'y2="{frame.y(0):.1f}" stroke="#b35900" stroke-width="1.5" stroke-dasharray="5 4">'
            f"<title>dropout after round {r}</title></line>"
        )
        parts.append(
            f'<text class="dropout-label" x="{x + 3:.1f}" y="{_TOP + 9:.1f}" fill="#b35900" '
            f'font-size="10">dropout</text>'
        )
    return parts


def _svg(title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W:.0f} {_H:.0f}" '
        f'width="{_W:.0f}" height="{_H:.0f}" role="img" font-size="11" '
        f'font-family="system-ui, sans-serif"><title>{_e(title)}</title>' + "".join(body) + "</svg>"
    )


def _line_chart(
    title: str,
    points: list[tuple[int, float | None]],
    *,
    ticks: list[float],
    tick_fmt: str,
    fmt: str,
    y_label: str,
    promotions: set[int],
    dropouts: list[int],
    reference: float | None = None,
) -> str:
    """A per-round line: one point per round, promotions as large dots, dropouts dashed."""
    rounds = [r for r, _ in points]
    frame = _Frame(min(rounds + dropouts), max(rounds + dropouts), ticks[-1])
    body = _svg_axes(frame, ticks, tick_fmt, y_label)
    if reference is not None:
        y = frame.y(reference)
        body.append(
            f'<line class="reference" x1="{_LEFT:.1f}" y1="{y:.1f}" x2="{_W - _RIGHT:.1f}" '
            f'y2="{y:.1f}" stroke="#888" stroke-dasharray="2 3"/>'
        )
    body += _svg_dropouts(frame, dropouts)
    coords = [f"{frame.x(r):.1f},{frame.y(v):.1f}" for r, v in points if v is not None]
    if len(coords) > 1:
        body.append(
            f'<polyline class="series" points="{" ".join(coords)}" fill="none" '
            'stroke="#1f5fa8" stroke-width="2"/>'
        )
    for r, v in points:
        if v is None:
            body.append(
                f'<circle class="pt pt-missing" cx="{frame.x(r):.1f}" cy="{frame.y(0):.1f}" '
                'r="3.5" fill="#fff" stroke="#999">'
                f"<title>round {r}: no correct kernel yet</title></circle>"
            )
            continue
        body.append(
            f'<circle class="pt" cx="{frame.x(r):.1f}" cy="{frame.y(v):.1f}" r="3" fill="#1f5fa8">'
            f"<title>round {r}: {_e(fmt.format(v))}</title></circle>"
        )
        if r in promotions:
            body.append(
                f'<circle class="promo" cx="{frame.x(r):.1f}" cy="{frame.y(v):.1f}" r="6.5" '
                f'fill="#2e8b57" fill-opacity="0.85" stroke="#fff">'
                f"<title>promotion in round {r}</title></circle>"
            )
    return _svg(title, body)


def _bar_chart(title: str, counts: dict[int, tuple[int, int]], dropouts: list[int]) -> str:
    """Stacked bars per round: correct (green, bottom) and incorrect (red, top) candidates."""
    rounds = sorted(counts)
    ticks = _ticks(max(ok + bad for ok, bad in counts.values()), integer=True)
    frame = _Frame(min(rounds + dropouts), max(rounds + dropouts), ticks[-1])
    body = _svg_axes(frame, ticks, "{:.0f}", "candidates")
    width = min(frame.step * 0.6, 40.0)
    for r in rounds:
        ok, bad = counts[r]
        x = frame.x(r) - width / 2
        for cls, colour, low, high, label in (
            ("bar-ok", "#2e8b57", 0, ok, f"round {r}: {ok} correct"),
            ("bar-bad", "#c0392b", ok, ok + bad, f"round {r}: {bad} incorrect"),
        ):
            if high == low:
                continue
            y_top, y_low = frame.y(high), frame.y(low)
            body.append(
                f'<rect class="{cls}" x="{x:.1f}" y="{y_top:.1f}" width="{width:.1f}" '
                f'height="{y_low - y_top:.1f}" fill="{colour}"><title>{_e(label)}</title></rect>'
            )
    body += _svg_dropouts(frame, dropouts)
    return _svg(title, body)


def _dropout_rounds(record: RunRecord) -> list[int]:
    rounds = {e.round for e in record.dropouts}
    rounds |= {p.round for p in record.rounds if p.dropout}
    return sorted(rounds)


def _charts_html(record: RunRecord) -> str:
    dropouts = _dropout_rounds(record)
    legend = "Dots: promotions. Dashed vertical lines: dropouts (after the round they follow)."
    if not _measured(record):
        counts: dict[int, tuple[int, int]] = {}
        for p in record.rounds:
            counts.setdefault(p.round, (0, 0))
        for c in record.candidates:
            if c.id in _ANCHOR_IDS:
                continue
            ok, bad = counts.get(c.round, (0, 0))
            counts[c.round] = (ok + 1, bad) if c.correct else (ok, bad + 1)
        why = (
            f"{_NOT_MEASURED}, so there is no SOL to plot: the chart shows correct (green) and "
            "incorrect (red) candidates per round instead. Dashed vertical lines: dropouts."
        )
        if not counts:
            return f'<p class="muted">{_e(why)} No candidates were evaluated.</p>'
        chart = _bar_chart("Correct and incorrect candidates per round", counts, dropouts)
        return f"<figure>{chart}<figcaption>{_e(why)}</figcaption></figure>"
    points = sorted(record.rounds, key=lambda p: p.round)
    if not points:
        return '<p class="muted">No rounds were recorded.</p>'
    promotions = {p.round for p in points if p.promoted}
    promotions |= {d.round for d in record.decisions if d.promoted}
    sol = [(p.round, None if p.best_sol is None else p.best_sol * 100) for p in points]
    parts = [
        "<figure>"
        + _line_chart(
            "Best SOL per round",
            sol,
            ticks=[0.0, 25.0, 50.0, 75.0, 100.0],
            tick_fmt="{:.0f} %",
            fmt="{:.1f} %",
            y_label="best SOL %",
            promotions=promotions,
            dropouts=dropouts,
        )
        + f"<figcaption>Best SOL (% of the roofline) of the incumbent after each round. "
        f"{_e(legend)}</figcaption></figure>"
    ]
    speedups = [(p.round, p.best_speedup_eager) for p in points]
    present = [v for _, v in speedups if v is not None]
    if present:
        parts.append(
            "<figure>"
            + _line_chart(
                "Speedup vs eager per round",
                speedups,
                ticks=_ticks(max(max(present), 1.0) * 1.05),
                tick_fmt="{:g}×",
                fmt="{:.2f}×",
                y_label="speedup vs eager",
                promotions=promotions,
                dropouts=dropouts,
                reference=1.0,
            )
            + "<figcaption>Speedup of the incumbent over PyTorch eager after each round "
            "(dotted line: parity).</figcaption></figure>"
        )
    return "".join(parts)


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d1d1f;
background:#fff}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:1.5em;margin:0 0 .6em}
h2{font-size:1.2em;margin:1.6em 0 .5em;border-bottom:1px solid #ddd}
h3{font-size:1.05em;margin:1.2em 0 .4em}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.9em}
th,td{border:1px solid #d8d8d8;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f5f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.ok td.verdict{color:#1e7b45}tr.bad td.verdict{color:#b03020}
table.kv th{width:12em}
li.promoted{font-weight:600}
.muted{color:#666}.banner{background:#fff6e0;border:1px solid #f0d080;padding:8px 12px}
figure{margin:1em 0}figcaption{font-size:.85em;color:#555;max-width:640px}
svg{max-width:100%;height:auto;background:#fcfcfd;border:1px solid #eee}
code{font-family:ui-monospace,Menlo,monospace}
"""


def _html_table(
    headers: tuple[str, ...],
    rows: list[list[str]],
    numeric: frozenset[int],
    *,
    verdict_col: int | None = None,
    css_class: str = "",
) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cls = ""
        if verdict_col is not None:
            cls = ' class="ok"' if row[verdict_col].startswith("accepted") else ' class="bad"'
        cells = []
        for i, cell in enumerate(row):
            kinds = (["num"] if i in numeric else []) + (["verdict"] if i == verdict_col else [])
            attr = f' class="{" ".join(kinds)}"' if kinds else ""
            cells.append(f"<td{attr}>{_e(cell)}</td>")
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    table_cls = f' class="{css_class}"' if css_class else ""
    return f"<table{table_cls}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_html(record: RunRecord) -> str:
    """Render ``report.html``: the Markdown report's content plus inline SVG charts.

    The page is self-contained: inline CSS, charts drawn as inline SVG, no script and no external
    asset. Every text from the record is escaped with ``html.escape``.

    Args:
        record: The run.

    Returns:
        A complete HTML5 document.
    """
    title = f"aka run {record.run_id}: {record.problem_name}"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{_e(title)}</h1>",
    ]
    if not _measured(record):
        out.append(f'<p class="banner">{_e(_NOT_MEASURED)}.</p>')
    summary = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in _summary_rows(record)
    )
    out.append(f'<table class="kv"><tbody>{summary}</tbody></table>')
    out.append("<h2>Budget</h2>")
    out.append(
        _html_table(_BUDGET_HEADERS, [list(r) for r in _budget_rows(record)], frozenset({1, 2}))
    )
    out.append("<h2>Progress</h2>")
    out.append(_charts_html(record))
    out.append("<h2>Results of the incumbent</h2>")
    sections = _shape_sections(record)
    if not sections:
        out.append(f"<p>{_e(_no_final(record))}</p>")
    for section_title, rows, notes in sections:
        out.append(f"<h3>{_e(section_title)}</h3>")
        out.append(
            _html_table(_SHAPE_HEADERS, rows, _SHAPE_NUMERIC, verdict_col=2)
            if rows
            else "<p>No shapes.</p>"
        )
        if notes:
            out.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    out.append("<h2>Decisions</h2>")
    decisions = _decision_lines(record)
    if decisions:
        items = "".join(
            f'<li class="promoted">{_e(t)}</li>' if p else f"<li>{_e(t)}</li>" for p, t in decisions
        )
        out.append(f"<ul>{items}</ul>")
    else:
        out.append("<p>None.</p>")
    out.append("<h2>Dropouts</h2>")
    dropouts = _dropout_rows(record)
    out.append(
        _html_table(_DROPOUT_HEADERS, dropouts, frozenset({0, 3, 4}))
        if dropouts
        else "<p>None.</p>"
    )
    out.append("<h2>Candidates</h2>")
    candidates = _candidate_rows(record)
    out.append(
        _html_table(_CANDIDATE_HEADERS, candidates, _CANDIDATE_NUMERIC, verdict_col=4)
        if candidates
        else "<p>None.</p>"
    )
    if record.notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in record.notes))
        out.append("</ul>")
    out.append("</main></body></html>")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# kernel.py
# --------------------------------------------------------------------------------------------

_DTYPE_ALIASES: dict[str, DType] = {
    "bf16": DType.BF16,
    "bfloat16": DType.BF16,
    "fp16": DType.FP16,
    "float16": DType.FP16,
    "half": DType.FP16,
    "fp32": DType.FP32,
    "float32": DType.FP32,
    "float": DType.FP32,
    "fp64": DType.FP64,
    "float64": DType.FP64,
    "double": DType.FP64,
    "fp8_e4m3fn": DType.FP8_E4M3FN,
    "float8_e4m3fn": DType.FP8_E4M3FN,
    "fp8": DType.FP8_E4M3FN,
    "fp8_e5m2": DType.FP8_E5M2,
    "float8_e5m2": DType.FP8_E5M2,
    "int64": DType.INT64,
    "long": DType.INT64,
    "int32": DType.INT32,
    "int": DType.INT32,
    "int16": DType.INT16,
    "short": DType.INT16,
    "int8": DType.INT8,
    "uint8": DType.UINT8,
    "bool": DType.BOOL,
}
_TORCH_DTYPE = re.compile(r"\btorch\.(bfloat16|float16|half|float32|float64|float8_\w+|u?int8)\b")
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=]")


def normalize_dtype(name: str) -> DType | None:
    """Map a dtype spelling (``bf16``, ``bfloat16``, ``torch.bfloat16``) to ``DType``; else None."""
    key = name.strip().lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(key)


def _expr_dtype(node: ast.expr | None) -> DType | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return normalize_dtype(node.value)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return normalize_dtype(node.attr) if node.value.id == "torch" else None
    return None


def _function_dtype(code: str, name: str) -> DType | None:
    """The dtype an input function produces by default, read from its source with ``ast``.

    A ``dtype`` parameter's default wins; otherwise the ``dtype=`` keywords and ``.half()`` style
    casts in its body, preferring a narrow float (fp32 there is often only the generator's type).
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    fn = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name),
        None,
    )
    if fn is None:
        return None
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    pairs = list(zip(positional, defaults, strict=True))
    pairs += list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
    for arg, default in pairs:
        if arg.arg == "dtype":
            found = _expr_dtype(default)
            if found is not None:
                return found
    seen: list[DType] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.keyword) and node.arg == "dtype":
            found = _expr_dtype(node.value)
            if found is not None:
                seen.append(found)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            found = normalize_dtype(node.func.attr) if node.func.attr in _DTYPE_ALIASES else None
            if found in (DType.BF16, DType.FP16, DType.FP64):
                seen.append(found)
    narrow = [d for d in seen if d is not DType.FP32]
    return narrow[0] if narrow else (seen[0] if seen else None)


def problem_dtypes(problem: ProblemSpec) -> dict[str, str]:
    """Return shape id -> input dtype name for every shape of ``problem``.

    A shape's ``input_kwargs['dtype']`` wins; otherwise the input function's default (read with
    ``ast``, nothing runs); otherwise fp32, torch's default. Shapes whose dtype cannot be named
    are left out.
    """
    code = problem.inputs_code or problem.reference_code
    default = _function_dtype(code, problem.input_fn) or DType.FP32
    out: dict[str, str] = {}
    for shape in problem.shapes:
        given = shape.input_kwargs.get("dtype")
        found = normalize_dtype(given) if isinstance(given, str) else default
        if found is not None:
            out[shape.id] = found.value
    return out


def _record_problem_dtypes(record: RunRecord) -> dict[str, str]:
    """Shape dtypes from the record's problem file, if it is still the problem that ran."""
    path = Path(record.problem_path)
    if not path.exists():
        return {}
    try:
        problem = load_problem(path)
    except (SpecError, OSError) as err:
        logger.debug("cannot reload %s for dtypes: %s", path, err)
        return {}
    if problem.problem_hash() != record.problem_sha256:
        logger.debug("%s changed since run %s; dtypes not taken from it", path, record.run_id)
        return {}
    return problem_dtypes(problem)


def _snake_id(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    if not slug or not slug[0].isalpha():
        slug = f"k_{slug}".rstrip("_")
    return slug


def _split_docstring(source: str) -> tuple[dict[str, Any], str, str, str]:
    """Split a candidate into (old front matter, old prose, text before, code after docstring)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise AgentError(
            f"kernel source does not parse (line {err.lineno}: {err.msg}); only a candidate the "
            "scorer accepted can become kernel.py"
        ) from err
    lines = source.splitlines(keepends=True)
    first = tree.body[0] if tree.body else None
    if not (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        keep = 0  # a shebang and an encoding line must stay first
        while keep < min(2, len(lines)) and (
            lines[keep].startswith("#!") or _CODING.match(lines[keep])
        ):
            keep += 1
        return {}, "", "".join(lines[:keep]), "".join(lines[keep:])
    doc = first.value.value
    end_line = (first.end_lineno or first.lineno) - 1
    end_col = first.end_col_offset or 0
    before = "".join(lines[: first.lineno - 1])
    rest_of_line = lines[end_line].encode("utf-8")[end_col:].decode("utf-8").lstrip(" \t;")
    after = rest_of_line + "".join(lines[end_line + 1 :])
    try:
        old, prose = split_front_matter(doc, source="kernel source")
    except SpecError:
        old, prose = {}, doc.strip()
    return old, prose.strip(), before, after


def _member(value: object, vocab: type[StrEnum]) -> str | None:
    """Return ``value`` if it is one of ``vocab``'s values (text from a header is untrusted)."""
    return value if isinstance(value, str) and value in {m.value for m in vocab} else None


def _most_common(values: list[tuple[str, float]]) -> str | None:
    totals: dict[str, float] = {}
    for value, weight in values:
        totals[value] = totals.get(value, 0.0) + weight
    return max(totals, key=lambda v: totals[v]) if totals else None


def _header_dtypes(
    shapes: list[ShapeResult], source: str, old: dict[str, Any], dtype_map: Mapping[str, str]
) -> tuple[dict[str, str], list[str], str]:
    """Return (shape id -> dtype, the header's dtypes, the dtype of a shape the map lacks).

    The evaluated shapes' dtypes win, then every shape's in the map, then the old header's, then
    the ``torch.<dtype>`` names in the source, then fp32 (torch's default: nothing says otherwise).
    """
    by_shape = {k: d.value for k, v in dtype_map.items() if (d := normalize_dtype(v))}
    evaluated = [by_shape[s.shape_id] for s in shapes if s.shape_id in by_shape]
    known = evaluated or list(by_shape.values())
    dtypes = sorted(set(known))
    old_dtypes = old.get("dtypes")
    if not dtypes and isinstance(old_dtypes, list):
        named = [normalize_dtype(str(d)) for d in old_dtypes]
        dtypes = [d.value for d in named if d is not None] if all(named) else []
    if not dtypes:
        dtypes = sorted(
            {d.value for m in _TORCH_DTYPE.findall(source) if (d := normalize_dtype(m))}
        )
    dtypes = dtypes or [DType.FP32.value]
    fallback = _most_common([(d, 1.0) for d in known]) or dtypes[0]
    return by_shape, dtypes, fallback


def _measured_entries(
    record: RunRecord, dtypes_by_shape: Mapping[str, str], fallback_dtype: str
) -> list[dict[str, Any]]:
    """One ``measured:`` entry per accepted, timed shape of the final evaluations (GPU only)."""
    measured: list[dict[str, Any]] = []
    for _, result in _finals(record):
        if not result.performance_measured:
            continue
        device = result.manifest.device or record.device or "unknown GPU"
        date = result.manifest.created_at[:10] or None
        for s in result.shapes:
            if s.verdict is not Verdict.ACCEPTED or s.latency_us is None:
                continue
            if s.latency_us.median <= 0:
                continue
            entry: dict[str, Any] = {
                "device": device,
                "shape": s.shape_id,
                "dtype": dtypes_by_shape.get(s.shape_id, fallback_dtype),
                "latency_us": round(s.latency_us.median, 4),
            }
            if s.sol_fraction is not None:
                entry["sol_fraction"] = round(min(max(s.sol_fraction, 0.0), 1.0), 4)
            if date:
                entry["date"] = date
            measured.append(entry)
    return measured


def _header(
    record: RunRecord,
    source: str,
    old: dict[str, Any],
    dtype_map: Mapping[str, str],
) -> dict[str, Any]:
    """Assemble the KernelMeta fields, in the order a person reads them."""
    incumbent = _incumbent(record)
    cid = record.incumbent_id or "kernel"
    family = incumbent.family if incumbent else None
    shapes = _final_shapes(record)

    op_family = _member(record.op_family, OpFamily) or _member(old.get("op_family"), OpFamily)
    op_family = op_family or OpFamily.OTHER.value
    profile = match_profile(record.device) if record.device else None
    vendor = profile.vendor.value if profile else _member(old.get("vendor"), Vendor)
    vendor = vendor or Vendor.NVIDIA.value
    arch = [a] if profile and (a := _member(profile.arch, Arch)) else []
    old_arch = old.get("arch")
    if not arch and isinstance(old_arch, list):
        named = [_member(a, Arch) for a in old_arch]
        arch = [a for a in named if a] if all(named) else []
    arch = arch or [Arch.ANY.value]

    dtypes_by_shape, dtypes, fallback_dtype = _header_dtypes(shapes, source, old, dtype_map)

    bound = _most_common([(s.bound, s.weight) for s in shapes if s.bound])
    if bound is None and incumbent is not None:
        bound = _most_common([(s.bound, 1.0) for s in incumbent.shapes if s.bound in _BOUNDS])
    if bound is None and old.get("bound") in _BOUNDS:
        bound = str(old["bound"])
    if bound is None:
        bound = "compute" if op_family in _COMPUTE_FAMILIES else "memory"

    techniques = [str(t) for t in old.get("techniques", []) or [] if isinstance(t, str)]
    if family and family not in _ANCHOR_IDS:
        tech = family.replace("_", "-")
        if tech not in techniques:
            techniques.append(tech)

    title = f"{record.problem_name} candidate {cid}"
    if family:
        title += f" ({family})"
    title += f", aka run {record.run_id}"
    if len(title) > 120:
        title = title[:119] + "…"

    measured = _measured_entries(record, dtypes_by_shape, fallback_dtype)
    header: dict[str, Any] = {
        "id": _snake_id(f"{record.problem_name}_{cid}"),
        "title": title,
        "op_family": op_family,
        "dsl": record.dsl,
        "vendor": vendor,
        "arch": arch,
        "dtypes": dtypes,
        "bound": bound,
        "techniques": techniques,
        "status": "candidate",
    }
    if isinstance(old.get("source"), dict):
        try:
            header["source"] = KernelSource.model_validate(old["source"]).model_dump(
                exclude_none=True
            )
        except ValidationError:
            logger.debug("dropping the old header's invalid source: %r", old["source"])
    header["launcher"] = "ModelNew"
    header["measured"] = measured
    return header


def _provenance(record: RunRecord) -> str:
    incumbent = _incumbent(record)
    cid = record.incumbent_id or "kernel"
    text = f"{_PROVENANCE} {record.run_id} for {record.problem_name}: candidate {cid}"
    if incumbent is not None:
        text += f" of design {incumbent.family} ({incumbent.origin}), round {incumbent.round}"
        if incumbent.params:
            params = ", ".join(f"{k}={v}" for k, v in sorted(incumbent.params.items()))
            text += f", parameters {params}"
    text += "."
    tune = next((r for w, r in _finals(record) if w == "final_tune"), None)
    if _measured(record) and tune is not None and tune.score is not None:
        text += (
            f" On {record.device or 'the GPU'} it reaches {_pct(tune.score)} % SOL (geometric mean "
            f"over {_plural(len(tune.shapes), 'tune shape')}); the measured entries above are per "
            "shape."
        )
    elif _measured(record):
        text += " The run recorded no final timing of it."
    else:
        text += " It was checked for correctness only; performance was not measured."
    return textwrap.fill(text, width=99)


def _docstring_literal(text: str) -> str:
    """Return a triple-quoted literal whose value is exactly ``text``."""
    escaped = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    escaped = escaped.replace("\r", "\\r").replace("\x00", "\\x00")
    if escaped.endswith('"'):
        escaped = escaped[:-1] + '\\"'
    return f'"""{escaped}"""'


def build_kernel_file(
    record: RunRecord, source: str, *, dtypes: Mapping[str, str] | None = None
) -> str:
    """Return the incumbent's source with a KernelMeta header as its module docstring.

    The header has ``status: candidate`` and ``launcher: ModelNew``; id, title, op family, DSL,
    arch (from the device's datasheet entry), dtypes, bound (the weighted majority of the final
    shapes' bounds) and techniques come from the record, and ``measured:`` holds one entry per
    accepted shape of the final GPU evaluations (none on the CPU). An existing module docstring is
    replaced; its prose (after any front matter), its techniques and its ``source:`` are kept, and
    a line on where the kernel came from is added.

    Args:
        record: The finished run.
        source: The incumbent's file.
        dtypes: Shape id -> dtype name (``problem_dtypes(problem)``). When None, they are read
            from ``record.problem_path`` if that file still hashes to ``record.problem_sha256``,
            else from the source's ``torch.<dtype>`` names, else fp32.

    Returns:
        The file text; it parses and its header validates as ``KernelMeta``.

    Raises:
        AgentError: ``source`` does not parse.
    """
    old, prose, before, after = _split_docstring(source)
    dtype_map = dict(dtypes) if dtypes is not None else _record_problem_dtypes(record)
    header = _header(record, source, old, dtype_map)
    KernelMeta.model_validate(header)  # our own output: a failure here is a bug, not bad input
    front = yaml.safe_dump(
        header, sort_keys=False, default_flow_style=None, width=10_000, allow_unicode=True
    )
    kept = "\n\n".join(
        p for p in re.split(r"\n\s*\n", prose) if p.strip() and not p.startswith(_PROVENANCE)
    )
    body = (kept + "\n\n" if kept else "") + _provenance(record)
    doc = _docstring_literal(f"\n---\n{front}---\n{body}\n")
    text = f"{before}{doc}\n"
    if after.strip():
        text += "\n" + after.lstrip("\n")
    try:
        kernel_header(text, source="kernel.py")
    except SpecError as err:  # pragma: no cover - guards the escaping above
        raise AgentError(f"generated kernel.py header does not read back: {err}") from err
    return text
