"""Suite reports (aka.bench.suite_report): Markdown and HTML content, charts, escaping, files.

The GPU-like run has 3 operators, 2 phases, tune and holdout shapes and 3 entrants (one operator
failed by the candidate, one left out by torch_compile); the CPU run has no timings. Expected
numbers are worked out by hand in comments, independently of ``summarize``.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from aka.bench.suite_charts import Ceilings, compute_ceiling, parse_ceilings
from aka.bench.suite_report import render_html, render_markdown, top_gaps, write_reports
from aka.bench.suite_result import EntrantOp, OperatorInfo, ShapeScore, SuiteRun, summarize

BANDWIDTH = 4.0e12  # bytes/s
RATES = {"tc_bf16": 8.0e14, "vector_fp32": 6.0e13}  # FLOP/s
CEILINGS: dict[str, object] = {
    "bandwidth_bytes_per_s": BANDWIDTH,
    "rates_flops_per_s": RATES,
    "launch_floor_us": 4.6,
    "source": "measured",
}
HOSTILE = "<script>x</script>"

# Shapes per operator: (id, split, phase, flops, bytes, bound); T_sol from the ceilings above.
SHAPES: dict[str, list[tuple[str, str, str, float, float, str]]] = {
    "rms_norm": [  # memory-bound, AI 0.25
        ("t0", "tune", "prefill", 2e7, 8e7, "memory"),
        ("t1", "tune", "prefill", 4e7, 1.6e8, "memory"),
        ("t2", "tune", "decode", 2e7, 8e7, "memory"),
        ("h0", "holdout", "prefill", 2e7, 8e7, "memory"),
    ],
    "matmul": [  # compute-bound on tc_bf16
        ("m0", "tune", "prefill", 8e10, 1e8, "compute"),
        ("m1", "tune", "prefill", 1.6e11, 2e8, "compute"),
        ("h0", "holdout", "prefill", 8e10, 1e8, "compute"),
    ],
    "silu_and_mul": [
        ("s0", "tune", "decode", 1e7, 4e7, "memory"),
        ("h0", "holdout", "decode", 1e7, 4e7, "memory"),
    ],
}
# S per entrant, operator and shape id; None: the entrant has no result for the operator.
SCORES: dict[str, dict[str, dict[str, float] | None]] = {
    # rms_norm: (1 * 1 * 1/8)^(1/3) = 0.5, holdout 0.81; matmul: sqrt(0.64 * 0.25) = 0.4,
    # holdout 0.49; silu_and_mul failed (wrong output) -> 0.
    "candidate": {
        "rms_norm": {"t0": 1.0, "t1": 1.0, "t2": 0.125, "h0": 0.81},
        "matmul": {"m0": 0.64, "m1": 0.25, "h0": 0.49},
        "silu_and_mul": {},
    },
    "eager": {
        op: {sid: 0.5 for sid, *_ in shapes} for op, shapes in SHAPES.items()
    },  # 0.5 everywhere
    "torch_compile": {
        "rms_norm": {sid: 0.8 for sid, *_ in SHAPES["rms_norm"]},
        "matmul": None,  # missing: counts 0
        "silu_and_mul": {"s0": 0.9, "h0": 0.9},
    },
}
WEIGHTS = {"rms_norm": 0.5, "matmul": 0.3, "silu_and_mul": 0.2}
PHASES = {"rms_norm": "prefill/decode", "matmul": "prefill", "silu_and_mul": "decode"}


def _t_sol_us(flops: float, nbytes: float, bound: str) -> float:
    if bound == "compute":
        return flops / RATES["tc_bf16"] * 1e6
    return nbytes / BANDWIDTH * 1e6


def _entrant_op(entrant: str, op: str, scores: dict[str, float], *, name: str) -> EntrantOp:
    shapes = []
    failed = not scores
    for sid, split, phase, flops, nbytes, bound in SHAPES[op]:
        t_sol = _t_sol_us(flops, nbytes, bound)
        common = {
            "shape_id": sid,
            "split": split,
            "phase": phase,
            "t_sol_us": t_sol,
            "bound": bound,
            "flops": flops,
            "bytes": nbytes,
        }
        if failed:
            shapes.append(
                ShapeScore.model_validate(
                    {
                        **common,
                        "correct": False,
                        "verdict": "wrong_output",
                        "message": "max abs 3.2",
                    }
                )
            )
        else:
            s = scores[sid]
            shapes.append(
                ShapeScore.model_validate(
                    {
                        **common,
                        "latency_us": t_sol / s,
                        "s": s,
                        "correct": True,
                        "verdict": "accepted",
                    }
                )
            )
    return EntrantOp(
        entrant=entrant,
        op=name,
        status="failed" if failed else "ok",
        verdict="wrong_output" if failed else "accepted",
        message="output differs at 12 elements" if failed else None,
        shapes=shapes,
    )


def _gpu_run(*, rename: dict[str, str] | None = None, ceilings: bool = True) -> SuiteRun:
    names = {op: (rename or {}).get(op, op) for op in SHAPES}
    results = [
        _entrant_op(entrant, op, scores, name=names[op])
        for entrant, per_op in SCORES.items()
        for op, scores in per_op.items()
        if scores is not None
    ]
    return SuiteRun(
        suite="mini3",
        date="2026-12-02T10:00:00Z",
        device={"name": "NVIDIA H200", "sm_count": 132},
        ceilings=CEILINGS if ceilings else None,
        versions={"torch": "2.11.0", "triton": "3.6.0"},
        performance_measured=True,
        splits=["tune", "holdout"],
        notes=["baseline times cached"],
        operators=[
            OperatorInfo(name=names[op], weight=WEIGHTS[op], phase=PHASES[op]) for op in SHAPES
        ],
        entrants=list(SCORES),
        results=results,
    )


def _cpu_run() -> SuiteRun:
    def shape(sid: str, correct: bool) -> ShapeScore:
        return ShapeScore(
            shape_id=sid,
            split="smoke",
            phase="prefill",
            correct=correct,
            verdict="not_measured" if correct else "wrong_output",
        )

    return SuiteRun(
        suite="mini3",
        date="2026-12-02",
        device={"name": "cpu"},
        performance_measured=False,
        splits=["smoke"],
        operators=[
            OperatorInfo(name="rms_norm", weight=0.6, phase="prefill"),
            OperatorInfo(name="silu_and_mul", weight=0.4, phase="prefill"),
        ],
        entrants=["candidate"],
        results=[
            EntrantOp(
                entrant="candidate",
                op="rms_norm",
                status="ok",
                verdict="accepted",
                shapes=[shape("a", True), shape("b", True)],
            ),
            EntrantOp(
                entrant="candidate",
                op="silu_and_mul",
                status="failed",
                verdict="wrong_output",
                shapes=[shape("a", True), shape("b", False)],
            ),
        ],
    )


class _TagBalance(HTMLParser):
    """Records tags that close out of order or stay open (void elements excepted)."""

    VOID = frozenset({"meta", "br", "img", "input", "hr", "link", "area", "base", "col", "wbr"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> while open: {self.stack[-3:]}")
            return
        self.stack.pop()


def _assert_balanced(page: str) -> None:
    parser = _TagBalance()
    parser.feed(page)
    parser.close()
    assert parser.errors == []
    assert parser.stack == []


def _row(markdown: str, first_cell: str, *, after: str = "") -> list[str]:
    """The cells of the first table row starting with ``first_cell`` (after the line ``after``)."""
    lines = markdown.splitlines()
    start = lines.index(after) if after else 0
    line = next(ln for ln in lines[start:] if ln.startswith(f"| {first_cell} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


# ---------------------------------------------------------------------------- summary


def test_markdown_summary_matches_hand_computed_and_summarize() -> None:
    run = _gpu_run()
    md = render_markdown(run)

    # Hand-computed: candidate 0.5·0.5 + 0.3·0.4 + 0.2·0 = 0.37; prefill (0.5·1 + 0.3·0.4)/0.8;
    # decode (0.5·0.125 + 0.2·0)/0.7; holdout 0.5·0.81 + 0.3·0.49 + 0 = 0.552.
    # torch_compile 0.5·0.8 + 0 + 0.2·0.9 = 0.58; prefill: only rms_norm -> 0.8;
    # decode (0.5·0.8 + 0.2·0.9)/0.7; holdout 0.58; matmul missing -> 1 not run.
    expected = {
        "candidate": [0.37, 0.062_5 / 0.7, 0.62 / 0.8, 0.552, "2", "1", "0", "100.0 %"],
        "eager": [0.5, 0.5, 0.5, 0.5, "3", "0", "0", "100.0 %"],
        "torch_compile": [0.58, 0.58 / 0.7, 0.8, 0.58, "2", "0", "1", "100.0 %"],
    }
    header = _row(md, "Entrant")
    assert header[1:5] == ["Suite score", "decode score", "prefill score", "Holdout score"]
    for entrant, values in expected.items():
        cells = _row(md, entrant)
        numbers = [f"{v:.4f}" for v in values[:4]]
        assert cells[1:] == numbers + values[4:]
    for s in summarize(run):
        cells = _row(md, s.entrant)
        assert cells[1] == f"{s.suite_score:.4f}"
        assert cells[4] == f"{s.holdout_score:.4f}"


def test_operator_table_shows_tune_holdout_and_status() -> None:
    md = render_markdown(_gpu_run())

    cells = _row(md, "silu_and_mul")
    # op, weight, phase, then (tune, holdout, status) for candidate, eager, torch_compile
    assert cells[:3] == ["silu_and_mul", "0.2000", "decode"]
    assert cells[3:6] == ["0.000", "0.000", "failed: wrong_output"]
    assert cells[6:9] == ["0.500", "0.500", "ok"]
    assert cells[9:12] == ["0.900", "0.900", "ok"]
    assert _row(md, "matmul")[3:5] == ["0.400", "0.490"]
    assert _row(md, "matmul")[9:12] == ["—", "—", "missing"]


def test_top_gaps_order_and_best_entrant() -> None:
    # rms_norm best torch_compile 0.8 -> 0.5·0.2 = 0.1; matmul best eager 0.5 -> 0.3·0.5 = 0.15;
    # silu_and_mul best torch_compile 0.9 -> 0.2·0.1 = 0.02.
    gaps = top_gaps(_gpu_run())

    assert [(g.op, g.entrant) for g in gaps] == [
        ("matmul", "eager"),
        ("rms_norm", "torch_compile"),
        ("silu_and_mul", "torch_compile"),
    ]
    assert [g.gap for g in gaps] == pytest.approx([0.15, 0.1, 0.02])
    md = render_markdown(_gpu_run())
    assert _row(md, "1") == ["1", "matmul", "0.3000", "eager", "0.500", "0.1500"]


def test_top_gaps_keeps_five_largest() -> None:
    weights = [0.05, 0.3, 0.1, 0.2, 0.15, 0.12, 0.08]
    scores = [0.0, 0.9, 0.5, 0.5, 0.2, 1.0, 0.25]
    # gaps: 0.05, 0.03, 0.05, 0.1, 0.12, 0, 0.06 -> o4, o3, o6, o0, o2 (o0 before o2: suite order)
    run = SuiteRun(
        suite="seven",
        date="d",
        performance_measured=True,
        operators=[OperatorInfo(name=f"o{i}", weight=w, phase="p") for i, w in enumerate(weights)],
        entrants=["candidate"],
        results=[
            EntrantOp(
                entrant="candidate",
                op=f"o{i}",
                status="ok",
                verdict="accepted",
                shapes=[ShapeScore(shape_id="0", split="tune", s=s, verdict="accepted")],
            )
            for i, s in enumerate(scores)
        ],
    )

    assert [g.op for g in top_gaps(run)] == ["o4", "o3", "o6", "o0", "o2"]


# ---------------------------------------------------------------------------- HTML


def test_html_is_balanced_self_contained_with_one_roofline_per_timed_operator() -> None:
    page = render_html(_gpu_run())

    _assert_balanced(page)
    assert "<script" not in page.lower()
    assert not re.search(r"\b(src|href)=", page)
    assert len(re.findall(r'<svg [^>]*class="roofline"', page)) == 3
    assert len(re.findall(r'<svg [^>]*class="shape-scores"', page)) == 3
    assert len(re.findall(r'<svg [^>]*class="weight-score"', page)) == 1
    assert page.count("<details") == 3


def test_html_roofline_markers_and_ceiling() -> None:
    svgs = re.findall(r"<svg .*?</svg>", render_html(_gpu_run()), re.S)
    (svg,) = [s for s in svgs if "<title>Roofline of matmul</title>" in s]

    # 3 shapes x 2 entrants that ran matmul (candidate, eager): one marker each
    assert svg.count('<circle class="pt"') == 6
    assert "tc_bf16 800TFLOP/s" in svg  # the compute-bound shapes' unit
    assert '<polyline class="roof"' in svg
    # candidate on matmul shape m0: AI 800 FLOP/B, 8e10 FLOP in 100/0.64 µs = 512 TFLOP/s
    assert "candidate, shape m0 (tune): 800 FLOP/B, 512TFLOP/s" in svg


def test_html_without_ceilings_skips_the_roofline_lines() -> None:
    page = render_html(_gpu_run(ceilings=False))

    assert len(re.findall(r'<svg [^>]*class="roofline"', page)) == 3
    assert '<polyline class="roof"' not in page
    assert "recorded no ceilings, so the roofline lines are not drawn" in page


def test_malicious_operator_name_is_escaped_everywhere() -> None:
    run = _gpu_run(rename={"matmul": HOSTILE})
    page, md = render_html(run), render_markdown(run)

    assert HOSTILE not in page and "<script" not in page.lower()
    assert "&lt;script&gt;x&lt;/script&gt;" in page
    _assert_balanced(page)
    assert HOSTILE not in md
    assert "&lt;script&gt;x&lt;/script&gt;" in md


# ---------------------------------------------------------------------------- CPU run


def test_cpu_report_says_nothing_timed_and_shows_correctness() -> None:
    run = _cpu_run()
    md, page = render_markdown(run), render_html(run)

    for text in (md, page):
        assert "nothing was timed and only correctness was checked" in text
    assert _row(md, "Performance") == ["Performance", "not measured (nothing was timed)"]
    assert "<svg" not in page
    _assert_balanced(page)
    # per operator: correctness instead of S (smoke shapes only, so tune/holdout have none)
    # entrant, suite, prefill, holdout scores, ops ok / failed / not run, P(holdout | tune)
    assert _row(md, "candidate") == ["candidate", "—", "—", "—", "1", "1", "0", "—"]
    # operator table: correct on tune, holdout (none here), smoke; then the status
    assert _row(md, "rms_norm")[3:] == ["—", "—", "correct", "ok"]
    assert _row(md, "silu_and_mul")[3:] == ["—", "—", "wrong", "failed: wrong_output"]
    # details: shape, split, phase, T_sol, bound, candidate µs, candidate result
    silu = "### silu_and_mul"
    assert _row(md, "a", after=silu) == ["a", "smoke", "prefill", "—", "—", "—", "correct"]
    assert _row(md, "b", after=silu) == ["b", "smoke", "prefill", "—", "—", "—", "wrong_output"]
    assert "Not available: nothing was timed." in md


# ---------------------------------------------------------------------------- helpers, files


def test_compute_ceiling_inference() -> None:
    ceilings = parse_ceilings(CEILINGS)
    assert isinstance(ceilings, Ceilings)
    run = _gpu_run()
    by_op = {
        op: [s for r in run.results if r.op == op for s in r.shapes]
        for op in ("rms_norm", "matmul")
    }

    matmul = compute_ceiling(by_op["matmul"], ceilings)
    assert matmul is not None and matmul.unit == "tc_bf16"
    # memory-bound at AI 0.25: FLOPs / T_sol = 1 TFLOP/s, so the slowest unit fits
    rms = compute_ceiling(by_op["rms_norm"], ceilings)
    assert rms is not None and rms.unit == "vector_fp32"
    # memory-bound at AI 100: FLOPs / T_sol = 400 TFLOP/s > vector_fp32 -> tc_bf16
    dense = ShapeScore(
        shape_id="x",
        split="tune",
        t_sol_us=1.0,
        bound="memory",
        flops=4e8,
        bytes=4e6,
        verdict="accepted",
    )
    chosen = compute_ceiling([dense], ceilings)
    assert chosen is not None and chosen.unit == "tc_bf16"
    assert parse_ceilings({"rates_flops_per_s": RATES}) is None  # no bandwidth
    # A recorded unit wins over inference: the same shape, priced on vector_fp32.
    recorded = compute_ceiling([dense.model_copy(update={"compute_unit": "vector_fp32"})], ceilings)
    assert recorded is not None and recorded.unit == "vector_fp32" and "recorded" in recorded.how


def test_write_reports_writes_both_files(tmp_path: Path) -> None:
    run = _gpu_run()

    paths = write_reports(run, tmp_path / "out")

    assert paths["markdown"].read_text(encoding="utf-8") == render_markdown(run)
    assert paths["html"].read_text(encoding="utf-8") == render_html(run)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.html", "report.md"]
