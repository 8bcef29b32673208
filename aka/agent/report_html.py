"""``report.html``: the run report as one self-contained page, with inline SVG charts.

Owns tables and page layout, and the SVG charts of progress per round (best SOL and speedup on
a GPU; correct and incorrect candidates on the CPU interpreter). The page has inline CSS, no
script and no external asset. Every text from the record is untrusted and escaped with
``html.escape`` (through ``aka.core.svg.escape``, which also supplies the generic SVG pieces:
ticks, axes, the ``<svg>`` element); the rows themselves come from ``report_data``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aka.agent.records import RoundPoint, RunRecord
from aka.agent.report_data import (
    _ANCHOR_IDS,
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
from aka.core.svg import (
    Box,
    axis_lines,
    linear_ticks,
    svg_document,
    x_label,
    x_tick_labels,
    y_grid,
    y_label,
)
from aka.core.svg import escape as _e

__all__ = ["render_html"]

# --------------------------------------------------------------------------------------------
# SVG charts
# --------------------------------------------------------------------------------------------

_BOX = Box()
_W, _H = _BOX.width, _BOX.height
_LEFT, _RIGHT, _TOP, _BOTTOM = _BOX.left, _BOX.right, _BOX.top, _BOX.bottom


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


def _svg_axes(frame: _Frame, ticks: list[float], fmt: str, y_title: str) -> list[str]:
    """Grid and y labels, both axes, every round (thinned to about 12) on x, and the titles."""
    count = frame.r1 - frame.r0 + 1
    every = max(1, math.ceil(count / 12))
    rounds = [float(r) for r in range(frame.r0, frame.r1 + 1) if (r - frame.r0) % every == 0]
    return [
        *y_grid(_BOX, ticks, frame.y, fmt),
        *axis_lines(_BOX),
        *x_tick_labels(_BOX, rounds, frame.x, "{:.0f}"),
        x_label(_BOX, "round"),
        y_label(_BOX, y_title),
    ]


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
    return svg_document(title, body, _BOX)


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
    ticks = linear_ticks(max(ok + bad for ok, bad in counts.values()), integer=True)
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


def _candidate_counts(record: RunRecord) -> dict[int, tuple[int, int]]:
    """Round -> (correct, incorrect) candidates, anchors left out; every recorded round present."""
    counts: dict[int, tuple[int, int]] = {}
    for p in record.rounds:
        counts.setdefault(p.round, (0, 0))
    for c in record.candidates:
        if c.id in _ANCHOR_IDS:
            continue
        ok, bad = counts.get(c.round, (0, 0))
        counts[c.round] = (ok + 1, bad) if c.correct else (ok, bad + 1)
    return counts


def _unmeasured_chart_html(record: RunRecord, dropouts: list[int]) -> str:
    """The CPU interpreter's chart: correct and incorrect candidates per round, no SOL."""
    counts = _candidate_counts(record)
    why = (
        f"{_NOT_MEASURED}, so there is no SOL to plot: the chart shows correct (green) and "
        "incorrect (red) candidates per round instead. Dashed vertical lines: dropouts."
    )
    if not counts:
        return f'<p class="muted">{_e(why)} No candidates were evaluated.</p>'
    chart = _bar_chart("Correct and incorrect candidates per round", counts, dropouts)
    return f"<figure>{chart}<figcaption>{_e(why)}</figcaption></figure>"


def _speedup_figure(points: list[RoundPoint], promotions: set[int], dropouts: list[int]) -> str:
    """The speedup-vs-eager line chart; empty when no round recorded a speedup."""
    speedups = [(p.round, p.best_speedup_eager) for p in points]
    present = [v for _, v in speedups if v is not None]
    if not present:
        return ""
    return (
        "<figure>"
        + _line_chart(
            "Speedup vs eager per round",
            speedups,
            ticks=linear_ticks(max(max(present), 1.0) * 1.05),
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


def _charts_html(record: RunRecord) -> str:
    dropouts = _dropout_rounds(record)
    legend = "Dots: promotions. Dashed vertical lines: dropouts (after the round they follow)."
    if not _measured(record):
        return _unmeasured_chart_html(record, dropouts)
    points = sorted(record.rounds, key=lambda p: p.round)
    if not points:
        return '<p class="muted">No rounds were recorded.</p>'
    promotions = {p.round for p in points if p.promoted}
    promotions |= {d.round for d in record.decisions if d.promoted}
    sol = [(p.round, None if p.best_sol is None else p.best_sol * 100) for p in points]
    sol_figure = (
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
    )
    return sol_figure + _speedup_figure(points, promotions, dropouts)


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


def _html_results(record: RunRecord) -> list[str]:
    """The "Results of the incumbent" section: one table per final evaluation, with its notes."""
    out = ["<h2>Results of the incumbent</h2>"]
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
    return out


def _html_history(record: RunRecord) -> list[str]:
    """The Decisions, Dropouts, Candidates and Notes sections."""
    out = ["<h2>Decisions</h2>"]
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
    return out


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
    out += ["<h2>Progress</h2>", _charts_html(record)]
    out += _html_results(record)
    out += _html_history(record)
    out.append("</main></body></html>")
    return "\n".join(out) + "\n"
