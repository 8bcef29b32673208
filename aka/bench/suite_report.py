"""``report.md`` and ``report.html`` of a suite run, rendered from ``results.json`` (``SuiteRun``).

Owns the content of both reports and their layout: the header (suite, date, device, versions,
whether performance was measured), the summary per entrant (numbers from ``summarize``, recomputed
from the results so they always agree with the tables), the per-operator table, the five largest
weighted gaps to the roofline, and per operator a details section with one row per shape. The
HTML page adds inline SVG charts (``suite_charts``), has inline CSS, no script and no external
asset, and folds each operator's details into a ``<details>`` element.

Rows are built once as plain text and escaped by each renderer for its format: operator names,
verdicts and messages come from problem files and candidates and are untrusted. Must not import
torch: a report can be rendered anywhere from a stored ``results.json``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from aka.bench.suite_charts import (
    op_shapes,
    parse_ceilings,
    roofline_chart,
    shape_failed,
    shape_score_chart,
    weight_score_chart,
)
from aka.bench.suite_result import EntrantOp, OperatorInfo, SuiteRun, summarize
from aka.core.svg import escape, format_si

__all__ = ["GapRow", "render_html", "render_markdown", "top_gaps", "write_reports"]

logger = logging.getLogger(__name__)

_DASH = "—"
_MESSAGE_CHARS = 300
_NOT_TIMED = (
    "Performance was not measured: no GPU was used, so nothing was timed and only correctness "
    "was checked (Triton interpreter on the CPU). Scores are not available."
)
_SCORE_NOTE = (
    "Suite score: Σ w·S_op over tune shapes, the weights summing to 1 over all operators, so a "
    "failed or missing operator counts 0. Phase scores renormalise the weights over the operators "
    "with shapes of that phase. S_op is the geometric mean of S = min(1, T_sol / T) over shapes."
)


@dataclass(frozen=True)
class GapRow:
    """An operator's weighted gap to the roofline, ``w·(1 − S_op)`` of its best entrant."""

    op: str
    weight: float
    entrant: str
    s_op: float
    gap: float


def top_gaps(run: SuiteRun, count: int = 5) -> list[GapRow]:
    """The ``count`` operators with the largest weighted gap, largest first.

    Per operator the best entrant is the one with the highest S_op on tune shapes (the first in
    ``run.entrants`` on a tie); operators no entrant has a score for are left out, so a run with
    nothing timed has no gaps. Equal gaps keep the suite's operator order.
    """
    rows: list[GapRow] = []
    for op in run.operators:
        best: tuple[float, str] | None = None
        for entrant in run.entrants:
            result = run.result(entrant, op.name)
            score = None if result is None else result.score("tune")
            if score is not None and (best is None or score > best[0]):
                best = (score, entrant)
        if best is not None:
            rows.append(GapRow(op.name, op.weight, best[1], best[0], op.weight * (1 - best[0])))
    return sorted(rows, key=lambda r: -r.gap)[:count]


# --------------------------------------------------------------------------------------------
# Rows (plain text; each renderer escapes for its format)
# --------------------------------------------------------------------------------------------


def _num(value: float | None, fmt: str = "{:.3f}") -> str:
    return _DASH if value is None else fmt.format(value)


def _first_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 1] + "…"


def _device_text(device: dict[str, object]) -> str:
    name = device.get("name")
    extras = [
        f"{k}={v}"
        for k, v in sorted(device.items())
        if k != "name" and isinstance(v, str | int | float | bool)
    ]
    text = str(name) if name is not None else "unknown"
    return f"{text} ({', '.join(extras)})" if extras else text


def _ceilings_text(run: SuiteRun) -> str:
    ceilings = parse_ceilings(run.ceilings)
    if ceilings is None:
        return "none recorded (roofline lines are not drawn)"
    rates = ", ".join(
        f"{unit} {format_si(rate)}FLOP/s"
        for unit, rate in sorted(ceilings.rates_flops_per_s.items())
    )
    floor = _num(ceilings.launch_floor_us, "{:.2f} µs")
    return (
        f"{ceilings.source}: bandwidth {format_si(ceilings.bandwidth_bytes_per_s)}B/s; "
        f"{rates or 'no compute rates'}; launch floor {floor}"
    )


def _header_rows(run: SuiteRun) -> list[tuple[str, str]]:
    performance = "measured" if run.performance_measured else "not measured (nothing was timed)"
    rows = [
        ("Suite", run.suite),
        ("Date", run.date),
        ("Device", _device_text(run.device)),
        ("Performance", performance),
        ("Ceilings", _ceilings_text(run) if run.performance_measured else _DASH),
        ("Versions", ", ".join(f"{k} {v}" for k, v in sorted(run.versions.items())) or _DASH),
        ("Entrants", ", ".join(run.entrants)),
        ("Operators", str(len(run.operators))),
        ("Splits", ", ".join(run.splits) or _DASH),
    ]
    if run.holdout_seed_hash:
        rows.append(("Holdout seed (sha256 prefix)", run.holdout_seed_hash))
    if run.max_shapes is not None:
        rows.append(("Shapes per operator (at most)", str(run.max_shapes)))
    return rows


def _summary_table(run: SuiteRun) -> tuple[list[str], list[list[str]]]:
    summaries = summarize(run)
    phases = sorted({p for s in summaries for p in s.phase_scores})
    headers = ["Entrant", "Suite score", *(f"{p} score" for p in phases), "Holdout score"]
    headers += ["Ops ok", "Ops failed", "Ops not run", "P(correct on holdout | correct on tune)"]
    rows = [
        [
            s.entrant,
            _num(s.suite_score, "{:.4f}"),
            *(_num(s.phase_scores.get(p), "{:.4f}") for p in phases),
            _num(s.holdout_score, "{:.4f}"),
            str(s.ops_ok),
            str(s.ops_failed),
            str(s.ops_not_run),
            _num(
                None if s.p_holdout_given_tune is None else 100 * s.p_holdout_given_tune, "{:.1f} %"
            ),
        ]
        for s in summaries
    ]
    return headers, rows


def _status_text(result: EntrantOp | None) -> str:
    if result is None:
        return "missing"
    cached = " (cached)" if result.cached else ""
    if result.status == "ok":
        return f"ok{cached}"
    return f"{result.status}: {result.verdict}{cached}"


def _op_cell(run: SuiteRun, result: EntrantOp | None, split: str) -> str:
    """S_op of a split on a GPU run; correctness of the split without timings."""
    if result is None:
        return _DASH
    if run.performance_measured:
        return _num(result.score(split))
    return {True: "correct", False: "wrong", None: _DASH}[result.correct_on(split)]


def _operator_table(run: SuiteRun) -> tuple[list[str], list[list[str]]]:
    """Per operator and entrant: S_op (or correctness) per split side by side, then the status.

    Tune and holdout always have columns; smoke only when some shape is a smoke shape (a CPU run).
    """
    what = "S_op" if run.performance_measured else "correct"
    smoke = any(s.split == "smoke" for r in run.results for s in r.shapes)
    splits = ["tune", "holdout", *(["smoke"] if smoke else [])]
    headers = ["Operator", "Weight", "Phase"]
    for e in run.entrants:
        headers += [f"{e} {what} {split}" for split in splits] + [f"{e} status"]
    rows = []
    for op in run.operators:
        row = [op.name, f"{op.weight:.4f}", op.phase]
        for e in run.entrants:
            result = run.result(e, op.name)
            row += [_op_cell(run, result, split) for split in splits]
            row.append(_status_text(result))
        rows.append(row)
    return headers, rows


def _gap_table(run: SuiteRun) -> tuple[list[str], list[list[str]]]:
    headers = ["Rank", "Operator", "Weight", "Best entrant", "S_op (tune)", "Gap w·(1 − S_op)"]
    rows = [
        [str(i), g.op, f"{g.weight:.4f}", g.entrant, f"{g.s_op:.3f}", f"{g.gap:.4f}"]
        for i, g in enumerate(top_gaps(run), start=1)
    ]
    return headers, rows


def _shape_table(run: SuiteRun, op: OperatorInfo) -> tuple[list[str], list[list[str]]]:
    """One row per shape: its id, split, phase, T_sol and bound, then each entrant's result."""
    headers = ["Shape", "Split", "Phase", "T_sol µs", "Bound"]
    for e in run.entrants:
        headers += [f"{e} µs", f"{e} S" if run.performance_measured else f"{e} result"]
    rows = []
    for shape in op_shapes(run, op.name):
        row = [shape.shape_id, shape.split, shape.phase or _DASH]
        row += [_num(shape.t_sol_us, "{:.2f}"), shape.bound or _DASH]
        for e in run.entrants:
            result = run.result(e, op.name)
            mine = None
            if result is not None:
                key = (shape.split, shape.shape_id)
                mine = next((s for s in result.shapes if (s.split, s.shape_id) == key), None)
            if mine is None:
                row += [_DASH, "not run"]
            elif shape_failed(mine):
                row += [_DASH, mine.verdict]
            elif run.performance_measured:
                row += [_num(mine.latency_us, "{:.2f}"), _num(mine.s)]
            else:
                row += [_DASH, "correct" if mine.correct else mine.verdict]
        rows.append(row)
    return headers, rows


def _op_messages(run: SuiteRun, op: OperatorInfo) -> list[str]:
    """Per entrant that did not pass, its failure in one line (its first failing shape's else)."""
    out = []
    for e in run.entrants:
        result = run.result(e, op.name)
        if result is None or result.status == "ok":
            continue
        message = result.message or next(
            (s.message for s in result.shapes if shape_failed(s) and s.message), None
        )
        text = f"{e}: {result.status} ({result.verdict})"
        out.append(f"{text}: {_first_line(message)}" if message else text)
    return out


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


def _md(text: str) -> str:
    """Escape text for a Markdown table cell, heading or list item (untrusted text included)."""
    text = " ".join(text.split())
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")
    text = text.replace("*", "\\*").replace("[", "\\[").replace("]", "\\]")  # no links
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _is_number(cell: str) -> bool:
    try:
        float(cell.removesuffix(" %").replace(",", ""))
    except ValueError:
        return False
    return True


def _numeric_columns(rows: list[list[str]]) -> set[int]:
    """Columns whose cells are all numbers or dashes, at least one a number: right-aligned."""
    width = max((len(r) for r in rows), default=0)
    return {
        i
        for i in range(width)
        if all(_is_number(r[i]) or r[i] == _DASH for r in rows)
        and any(_is_number(r[i]) for r in rows)
    }


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    numeric = _numeric_columns(rows)
    align = ["---:" if i in numeric else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(_md(h) for h in headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(run: SuiteRun) -> str:
    """Render ``report.md``: header, summary, operators, largest gaps, per-operator details.

    Args:
        run: The suite run (``results.json``).

    Returns:
        GitHub-flavoured Markdown; every text from the run is escaped.
    """
    out = [f"# Suite run: {_md(run.suite)}", ""]
    out += [_md_table(["Field", "Value"], [list(r) for r in _header_rows(run)]), ""]
    if not run.performance_measured:
        out += [f"> **{_md(_NOT_TIMED)}**", ""]
    if run.notes:
        out += ["Notes:", "", *(f"- {_md(n)}" for n in run.notes), ""]
    out += ["## Summary", "", _md_table(*_summary_table(run)), "", _md(_SCORE_NOTE), ""]
    out += ["## Operators", "", _md_table(*_operator_table(run)), ""]
    out += ["## Largest gaps to the roofline", ""]
    gaps = _gap_table(run)
    out += [_md_table(*gaps) if gaps[1] else "Not available: nothing was timed.", ""]
    out += ["## Operator details", ""]
    for op in run.operators:
        out += [f"### {_md(op.name)}", ""]
        headers, rows = _shape_table(run, op)
        out += [_md_table(headers, rows) if rows else "No shapes were run.", ""]
        messages = _op_messages(run, op)
        out += [f"- {_md(m)}" for m in messages] + ([""] if messages else [])
    return "\n".join(out).rstrip("\n") + "\n"


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d1d1f;
background:#fff}
main{max-width:1280px;margin:0 auto;padding:24px}
h1{font-size:1.5em;margin:0 0 .6em}
h2{font-size:1.2em;margin:1.6em 0 .5em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.88em}
th,td{border:1px solid #d8d8d8;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f5f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
table.kv th{width:14em}.scroll{overflow-x:auto}
.banner{background:#fff6e0;border:1px solid #f0d080;padding:8px 12px}.muted{color:#666}
details{border:1px solid #e3e3e3;border-radius:4px;margin:.4em 0;padding:.3em .8em}
summary{cursor:pointer;font-weight:600}summary span{font-weight:400;color:#555}
figure{margin:1em 0}figcaption{font-size:.85em;color:#555;max-width:760px}
svg{max-width:100%;height:auto;background:#fcfcfd;border:1px solid #eee}
"""


def _html_table(headers: list[str], rows: list[list[str]]) -> str:
    numeric = _numeric_columns(rows)
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{escape(c)}</td>' if i in numeric else f"<td>{escape(c)}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="scroll">{table}</div>'


def _figure(chart: tuple[str, str] | None) -> str:
    return (
        ""
        if chart is None
        else f"<figure>{chart[0]}<figcaption>{escape(chart[1])}</figcaption></figure>"
    )


def _html_details(run: SuiteRun, index: int, op: OperatorInfo) -> str:
    """One operator's collapsed section: its charts, its shape table and failure messages."""
    headers, rows = _shape_table(run, op)
    parts = [
        f'<details id="op-{index}"><summary>{escape(op.name)} '
        f"<span>weight {op.weight:.4f}, {escape(op.phase)}, {len(rows)} shapes</span></summary>"
    ]
    if run.performance_measured:
        roofline = roofline_chart(run, op, parse_ceilings(run.ceilings))
        parts.append(
            _figure(roofline)
            if roofline
            else '<p class="muted">No roofline: no shape was timed with FLOPs and bytes.</p>'
        )
        parts.append(_figure(shape_score_chart(run, op)))
    parts.append(_html_table(headers, rows) if rows else "<p>No shapes were run.</p>")
    messages = _op_messages(run, op)
    if messages:
        parts.append("<ul>" + "".join(f"<li>{escape(m)}</li>" for m in messages) + "</ul>")
    parts.append("</details>")
    return "".join(parts)


def render_html(run: SuiteRun) -> str:
    """Render ``report.html``: the Markdown report's content plus inline SVG charts.

    Self-contained: inline CSS, charts as inline SVG, no script and no external asset; every
    text from the run is escaped with ``html.escape``.

    Args:
        run: The suite run (``results.json``).

    Returns:
        A complete HTML5 document.
    """
    title = f"aka suite run: {run.suite} ({run.date})"
    header = "".join(
        f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in _header_rows(run)
    )
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{escape(title)}</h1>",
        f'<table class="kv"><tbody>{header}</tbody></table>',
    ]
    if not run.performance_measured:
        out.append(f'<p class="banner">{escape(_NOT_TIMED)}</p>')
    if run.notes:
        out.append("<ul>" + "".join(f"<li>{escape(n)}</li>" for n in run.notes) + "</ul>")
    out += ["<h2>Summary</h2>", _html_table(*_summary_table(run)), f"<p>{escape(_SCORE_NOTE)}</p>"]
    out.append(_figure(weight_score_chart(run)))
    out += ["<h2>Operators</h2>", _html_table(*_operator_table(run))]
    out.append("<h2>Largest gaps to the roofline</h2>")
    gaps = _gap_table(run)
    out.append(_html_table(*gaps) if gaps[1] else "<p>Not available: nothing was timed.</p>")
    out.append("<h2>Operator details</h2>")
    out += [_html_details(run, i, op) for i, op in enumerate(run.operators)]
    out.append("</main></body></html>")
    return "\n".join(part for part in out if part) + "\n"


def write_reports(run: SuiteRun, out_dir: Path) -> dict[str, Path]:
    """Write ``report.md`` and ``report.html`` into ``out_dir`` (beside ``results.json``).

    Both documents are rendered before either file is written.

    Args:
        run: The suite run.
        out_dir: The run directory; created if missing.

    Returns:
        ``{"markdown": path, "html": path}``.
    """
    markdown, page = render_markdown(run), render_html(run)
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": root / "report.md", "html": root / "report.html"}
    for path, text in ((paths["markdown"], markdown), (paths["html"], page)):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)  # a killed process leaves the old report or the new one, never half
    logger.info("suite reports written to %s", root)
    return paths
