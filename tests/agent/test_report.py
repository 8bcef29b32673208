"""The run-directory writer: kernel.py header, report.md, report.html (SVG), run.json, artifacts."""

from __future__ import annotations

import ast
import math
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from aka.agent.records import (
    BudgetLimits,
    BudgetUsage,
    CandidateRecord,
    Decision,
    DropoutEvent,
    RoundPoint,
    RunRecord,
    ShapeSummary,
    TokenUsage,
)
from aka.agent.report import (
    build_kernel_file,
    problem_dtypes,
    render_html,
    render_markdown,
    write_run_dir,
)
from aka.bench import EvalResult, LatencyStats, Manifest, ShapeResult, Verdict, screen_source
from aka.core.errors import AgentError
from aka.spec import KernelMeta, ShapeCase, Split, kernel_header, load_problem

HOSTILE = "<script>alert('pwned')</script> | bad"
SVG_NS = "{http://www.w3.org/2000/svg}"


# ---------------------------------------------------------------------------- record builders


def _stats(median: float) -> LatencyStats:
    return LatencyStats(median=median, iqr=median * 0.02, n=50)


def _shape(
    sid: str, split: Split, lat: float, t_sol: float, eager: float, comp: float, bound: str
) -> ShapeResult:
    return ShapeResult(
        shape_id=sid,
        split=split,
        verdict=Verdict.ACCEPTED,
        latency_us=_stats(lat),
        baselines_us={"eager": _stats(eager), "torch_compile": _stats(comp)},
        t_sol_us=t_sol,
        bound=bound,  # type: ignore[arg-type]
        sol_fraction=min(1.0, t_sol / lat),
        speedup_vs={"eager": eager / lat, "torch_compile": comp / lat},
    )


def _manifest(problem_sha: str, *, gpu: bool) -> Manifest:
    return Manifest(
        source_sha256="ab" * 32,
        problem_sha256=problem_sha,
        problem_name="rms_norm",
        device="NVIDIA H200" if gpu else None,
        mode="gpu" if gpu else "cpu_interpreter",
        created_at="2026-12-02T10:00:00+00:00",
    )


def _eval(shapes: list[ShapeResult], problem_sha: str, *, gpu: bool) -> dict[str, object]:
    sols = [s.sol_fraction for s in shapes if s.sol_fraction is not None]
    score = math.exp(sum(math.log(s) for s in sols) / len(sols)) if gpu and sols else None
    result = EvalResult(
        verdict=Verdict.ACCEPTED,
        performance_measured=gpu,
        shapes=shapes,
        score=score,
        notes=[] if gpu else ["performance was not measured (CPU interpreter)"],
        manifest=_manifest(problem_sha, gpu=gpu),
    )
    return result.model_dump(mode="json")


def _cand(
    cid: str,
    round_: int,
    verdict: str,
    *,
    score: float | None = None,
    family: str = "rms_norm_rowwise",
    message: str = "",
) -> CandidateRecord:
    return CandidateRecord(
        id=cid,
        round=round_,
        origin=f"search:{family}",
        family=family,
        params={"num_warps": 8},
        verdict=verdict,
        score=score,
        speedup_eager=None if score is None else 3 * score,
        message=message,
        shapes=[ShapeSummary(shape_id="decode_b64_h4096", verdict=verdict, bound="memory")],
    )


@pytest.fixture(scope="module")
def rms_problem_path() -> Path:
    return Path(__file__).resolve().parents[2] / "configs" / "examples" / "rms_norm" / "op.yaml"


@pytest.fixture(scope="module")
def problem_sha(rms_problem_path: Path) -> str:
    return load_problem(rms_problem_path).problem_hash()


@pytest.fixture
def gpu_record(rms_problem_path: Path, problem_sha: str) -> RunRecord:
    """Six rounds, three promotions (1, 3, 5), two dropouts (after 2 and 4), one hostile message."""
    tune = [
        _shape("decode_b64_h4096", Split.TUNE, 10.0, 8.0, 20.0, 15.0, "memory"),
        _shape("prefill_t4096_h4096", Split.TUNE, 40.0, 30.0, 100.0, 50.0, "memory"),
    ]
    holdout = [_shape("holdout_b128_h5120", Split.HOLDOUT, 200.0, 150.0, 420.0, 260.0, "compute")]
    candidates = [
        _cand("c1_0", 1, "accepted", score=0.5),
        _cand("c1_1", 1, "wrong_output", message=HOSTILE + "\nsecond line"),
        _cand("c2_0", 2, "accepted", score=0.49),
        _cand("c3_0", 3, "accepted", score=0.7, family="rms_norm_multirow"),
        _cand("c4_0", 4, "compile_error", family="rms_norm_looped", message="SyntaxError"),
        _cand("c5_1", 5, "accepted", score=0.78),
        _cand("c6_0", 6, "accepted", score=0.77),
    ]
    decisions = [
        Decision(round=1, candidate_id="c1_0", incumbent_id=None, promoted=True, reason="first"),
        Decision(
            round=2,
            candidate_id="c2_0",
            incumbent_id="c1_0",
            promoted=False,
            reason="within noise",
            ratio=1.01,
            noise=0.03,
        ),
        Decision(
            round=3,
            candidate_id="c3_0",
            incumbent_id="c1_0",
            promoted=True,
            reason="faster",
            ratio=1.25,
            noise=0.03,
        ),
        Decision(round=4, candidate_id=None, incumbent_id="c3_0", promoted=False, reason="none"),
        Decision(
            round=5,
            candidate_id="c5_1",
            incumbent_id="c3_0",
            promoted=True,
            reason="faster",
            ratio=1.1,
            noise=0.02,
        ),
    ]
    sols = [0.5, 0.5, 0.7, 0.7, 0.78, 0.78]
    incumbents = ["c1_0", "c1_0", "c3_0", "c3_0", "c5_1", "c5_1"]
    rounds = [
        RoundPoint(
            round=i + 1,
            best_sol=sol,
            best_speedup_eager=3 * sol,
            incumbent_id=inc,
            promoted=i + 1 in (1, 3, 5),
            dropout=i + 1 in (2, 4),
        )
        for i, (sol, inc) in enumerate(zip(sols, incumbents, strict=True))
    ]
    dropouts = [
        DropoutEvent(
            round=2,
            masked_ids=["c1_1", "c2_0"],
            kept_ids=["c1_0"],
            forbidden_families=["rms_norm_rowwise"],
            cleared_messages=4,
            seed=7,
        ),
        DropoutEvent(
            round=4,
            masked_ids=["c4_0"],
            kept_ids=["c1_0", "c3_0"],
            forbidden_families=["rms_norm_multirow", "rms_norm_looped"],
            cleared_messages=2,
            seed=7,
        ),
    ]
    return RunRecord(
        run_id="run-gpu-1",
        aka_version="0.1.0",
        problem_name="rms_norm",
        problem_path=str(rms_problem_path),
        problem_sha256=problem_sha,
        op_family="norm",
        proposer="search",
        mode="gpu",
        performance_measured=True,
        device="NVIDIA H200",
        started_at="2026-12-02T09:00:00+00:00",
        finished_at="2026-12-02T09:20:34+00:00",
        stop_reason="max_iters",
        limits=BudgetLimits(
            max_iters=8, wall_time_s=3600.0, max_tokens=100_000, max_cost_usd=5.0, target_sol=0.9
        ),
        usage=BudgetUsage(
            iters=6,
            wall_s=1234.5,
            tokens=TokenUsage(prompt_tokens=1000, completion_tokens=500, cost_usd=0.0123, calls=6),
            gpu_s=42.0,
            candidates=7,
        ),
        seed=7,
        incumbent_id="c5_1",
        candidates=candidates,
        decisions=decisions,
        dropouts=dropouts,
        rounds=rounds,
        final_tune=_eval(tune, problem_sha, gpu=True),
        final_holdout=_eval(holdout, problem_sha, gpu=True),
        notes=["op family from op.yaml"],
    )


@pytest.fixture
def cpu_record(rms_problem_path: Path, problem_sha: str) -> RunRecord:
    smoke = [
        ShapeResult(shape_id="smoke_t8_h1000", split=Split.SMOKE, verdict=Verdict.ACCEPTED),
        ShapeResult(shape_id="smoke_t33_h256", split=Split.SMOKE, verdict=Verdict.ACCEPTED),
    ]
    return RunRecord(
        run_id="run-cpu-1",
        aka_version="0.1.0",
        problem_name="rms_norm",
        problem_path=str(rms_problem_path),
        problem_sha256=problem_sha,
        op_family="norm",
        op_family_inferred=True,
        proposer="search",
        mode="cpu_interpreter",
        performance_measured=False,
        started_at="2026-12-02T09:00:00+00:00",
        stop_reason="no_ideas",
        limits=BudgetLimits(max_iters=3),
        usage=BudgetUsage(iters=2, wall_s=30.0, candidates=4),
        seed=1,
        incumbent_id="c1_0",
        candidates=[
            _cand("c1_0", 1, "accepted"),
            _cand("c1_1", 1, "wrong_output", message=HOSTILE),
            _cand("c2_0", 2, "compile_error"),
            _cand("c2_1", 2, "runtime_error"),
        ],
        decisions=[
            Decision(round=1, candidate_id="c1_0", incumbent_id=None, promoted=True, reason="x")
        ],
        rounds=[
            RoundPoint(round=1, incumbent_id="c1_0", promoted=True),
            RoundPoint(round=2, incumbent_id="c1_0"),
        ],
        final_tune=_eval(smoke, problem_sha, gpu=False),
    )


def _candidate_source(repo_root: Path) -> str:
    return (repo_root / "configs" / "examples" / "rms_norm" / "candidate.py").read_text()


def _svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", page, flags=re.S)]


def _by_class(svg: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [el for el in svg.iter(SVG_NS + tag) if cls in (el.get("class") or "").split()]


# ---------------------------------------------------------------------------- report.md


def test_render_markdown_gpu_tables_and_numbers(gpu_record: RunRecord) -> None:
    md = render_markdown(gpu_record)
    lines = md.splitlines()
    assert "| Device | NVIDIA H200 |" in lines
    assert "| Proposer | search |" in lines
    assert "| Rounds | 6 |" in lines
    assert "| Stop reason | max_iters |" in lines
    assert "| Iterations | 6 | 8 |" in lines
    assert "| Wall time | 1234.5 s (20.6 min) | 3600.0 s (60.0 min) |" in lines
    assert "| Tokens | 1,500 (1,000 prompt + 500 completion, 6 calls) | 100,000 |" in lines
    assert "| Cost | $0.0123 | $5.00 |" in lines
    assert "| GPU time | 42.0 s | none |" in lines
    # tune score: geomean(0.8, 0.75)
    assert f"{math.sqrt(0.8 * 0.75) * 100:.1f} % SOL" in md
    assert (
        "| decode_b64_h4096 | tune | accepted | 10.00 | 8.00 | 80.0 | 20.00 | 15.00 | 2.00× "
        "| 1.50× | memory |" in lines
    )
    assert (
        "| prefill_t4096_h4096 | tune | accepted | 40.00 | 30.00 | 75.0 | 100.00 | 50.00 | 2.50× "
        "| 1.25× | memory |" in lines
    )
    assert (
        "| holdout_b128_h5120 | holdout | accepted | 200.00 | 150.00 | 75.0 | 420.00 | 260.00 "
        "| 2.10× | 1.30× | compute |" in lines
    )
    assert md.index("### Tune shapes") < md.index("decode_b64_h4096 |") < md.index("### Holdout")
    # decisions: three promotions, with ratio ± noise where measured
    promoted = [ln for ln in lines if ln.startswith("- **promoted**")]
    assert len(promoted) == 3
    assert "- **promoted** Round 3: promoted c3_0 over c1_0 — ratio 1.250 ± 0.030 — faster" in lines
    assert "- **promoted** Round 5: promoted c5_1 over c3_0 — ratio 1.100 ± 0.020 — faster" in lines
    assert (
        "- Round 2: kept c1_0 (best candidate c2_0) — ratio 1.010 ± 0.030 — within noise" in lines
    )
    # dropouts table
    assert "| 2 | c1_1, c2_0 | rms_norm_rowwise | 4 | 7 |" in lines
    assert "| 4 | c4_0 | rms_norm_multirow, rms_norm_looped | 2 | 7 |" in lines
    # candidates table
    assert (
        "| c5_1 (incumbent) | 5 | search:rms_norm_rowwise | rms_norm_rowwise | accepted | 78.0 "
        "| 2.34× |  |" in lines
    )
    assert (
        "| c4_0 | 4 | search:rms_norm_looped | rms_norm_looped | compile_error | — | — "
        "| SyntaxError |" in lines
    )


def test_render_markdown_escapes_untrusted_text(gpu_record: RunRecord) -> None:
    md = render_markdown(gpu_record)
    assert "<script>" not in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| c1_1 "))
    # the message keeps its first line only, with the pipe escaped so the table stays 8 columns
    assert row.endswith("| &lt;script&gt;alert('pwned')&lt;/script&gt; \\| bad |")
    assert "second line" not in md
    assert len(re.split(r"(?<!\\)\|", row)) == 8 + 2


def test_render_markdown_cpu_says_performance_not_measured(cpu_record: RunRecord) -> None:
    md = render_markdown(cpu_record)
    lines = md.splitlines()
    assert "| Device | CPU interpreter — performance was not measured |" in lines
    assert "| Operator family | norm (inferred) |" in lines
    assert "| smoke_t8_h1000 | smoke | accepted | — | — | — | — | — | — | — | — |" in lines
    assert "- performance was not measured (CPU interpreter)" in lines
    assert "| Tune score | accepted; performance was not measured |" in lines


def test_render_run_without_correct_kernel(cpu_record: RunRecord) -> None:
    cleared = {"incumbent_id": None, "candidates": [], "decisions": [], "rounds": []}
    empty = cpu_record.model_copy(update={**cleared, "final_tune": None})
    md = render_markdown(empty)
    assert "| Incumbent | none (no correct kernel was found) |" in md.splitlines()
    assert "No final evaluation: the run found no correct kernel." in md
    page = render_html(empty)
    assert "<svg" not in page
    assert "No candidates were evaluated." in page


# ---------------------------------------------------------------------------- report.html


def test_render_html_sol_chart_points_promotions_and_dropouts(gpu_record: RunRecord) -> None:
    page = render_html(gpu_record)
    svgs = _svgs(page)
    assert len(svgs) == 2  # best SOL, and speedup vs eager
    sol = svgs[0]
    points = _by_class(sol, "circle", "pt")
    assert len(points) == len(gpu_record.rounds) == 6
    promos = _by_class(sol, "circle", "promo")
    assert len(promos) == 3
    dashed = [ln for ln in _by_class(sol, "line", "dropout") if ln.get("stroke-dasharray")]
    assert len(dashed) == len(gpu_record.dropouts) == 2
    # y follows the SOL: higher SOL is higher on the page (smaller y)
    ys = [float(p.get("cy", "nan")) for p in points]
    assert ys[0] == ys[1] > ys[2] == ys[3] > ys[4] == ys[5]
    # promotions sit on rounds 1, 3, 5; dropouts between rounds 2|3 and 4|5
    xs = [float(p.get("cx", "nan")) for p in points]
    assert sorted(float(p.get("cx", "nan")) for p in promos) == [xs[0], xs[2], xs[4]]
    drop_x = sorted(float(ln.get("x1", "nan")) for ln in dashed)
    assert xs[1] < drop_x[0] < xs[2]
    assert xs[3] < drop_x[1] < xs[4]
    speed = svgs[1]
    assert len(_by_class(speed, "circle", "pt")) == 6
    assert len(_by_class(speed, "line", "dropout")) == 2


def test_render_html_round_without_correct_kernel_still_has_a_point(gpu_record: RunRecord) -> None:
    rounds = [
        p.model_copy(update={"best_sol": None}) if p.round == 1 else p for p in gpu_record.rounds
    ]
    sol = _svgs(render_html(gpu_record.model_copy(update={"rounds": rounds})))[0]
    assert len(_by_class(sol, "circle", "pt")) == 6
    (missing,) = _by_class(sol, "circle", "pt-missing")
    assert missing.findtext(SVG_NS + "title") == "round 1: no correct kernel yet"
    (series,) = _by_class(sol, "polyline", "series")
    assert len(series.get("points", "").split()) == 5


def test_render_html_is_self_contained_and_escapes_hostile_text(gpu_record: RunRecord) -> None:
    page = render_html(gpu_record)
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt; | bad" in page
    for external in ("<link", " src=", "@import", "url(", "http://", "https://"):
        if external == "http://":
            # the only URL allowed is the SVG namespace
            assert page.count("http://") == page.count('xmlns="http://www.w3.org/2000/svg"')
        else:
            assert external not in page
    assert "<style>" in page
    # the same tables as the Markdown report
    assert "<td>holdout_b128_h5120</td><td>holdout</td>" in page
    assert '<td class="num">2.10×</td>' in page
    assert "promoted c3_0 over c1_0 — ratio 1.250 ± 0.030" in page


def test_render_html_cpu_chart_counts_correct_and_incorrect(cpu_record: RunRecord) -> None:
    page = render_html(cpu_record)
    assert "<script" not in page.lower()
    assert "performance was not measured" in page
    assert "correct (green) and incorrect (red) candidates per round instead" in page
    (svg,) = _svgs(page)
    assert not _by_class(svg, "circle", "pt")
    ok = _by_class(svg, "rect", "bar-ok")
    bad = _by_class(svg, "rect", "bar-bad")
    # round 1: one correct, one incorrect; round 2: two incorrect (stacked in one bar)
    assert [el.findtext(SVG_NS + "title") for el in ok] == ["round 1: 1 correct"]
    assert [el.findtext(SVG_NS + "title") for el in bad] == [
        "round 1: 1 incorrect",
        "round 2: 2 incorrect",
    ]
    assert float(bad[1].get("height", "0")) == pytest.approx(2 * float(ok[0].get("height", "0")))


# ---------------------------------------------------------------------------- kernel.py


def test_build_kernel_file_header_from_gpu_record(gpu_record: RunRecord, repo_root: Path) -> None:
    source = _candidate_source(repo_root)
    text = build_kernel_file(gpu_record, source)
    ast.parse(text)
    data, prose = kernel_header(text, source="kernel.py")
    meta = KernelMeta.model_validate(data)
    assert meta.id == "rms_norm_c5_1"
    assert meta.status == "candidate"
    assert meta.launcher == "ModelNew"
    assert meta.op_family == "norm"
    assert meta.dsl == "triton"
    assert [a.value for a in meta.arch] == ["sm_90"]  # H200, from the datasheet table
    assert [d.value for d in meta.dtypes] == ["bf16"]  # _make_inputs' default, read with ast
    assert meta.bound == "memory"  # two memory shapes outvote one compute shape
    assert "rms-norm-rowwise" in meta.techniques
    assert "row-per-program" in meta.techniques  # kept from the old header
    measured = {(m.shape, m.dtype.value): m for m in meta.measured}
    assert set(measured) == {
        ("decode_b64_h4096", "bf16"),
        ("prefill_t4096_h4096", "bf16"),
        ("holdout_b128_h5120", "bf16"),
    }
    entry = measured[("holdout_b128_h5120", "bf16")]
    assert (entry.device, entry.latency_us, entry.sol_fraction, entry.date) == (
        "NVIDIA H200",
        200.0,
        0.75,
        "2026-12-02",
    )
    # the old prose is kept, the old front matter is gone, the code is untouched
    assert prose.startswith("RMSNorm with one program per token row")
    assert "Produced by aka run run-gpu-1" in prose
    assert "rms_norm_candidate" not in text
    code = source.split('"""\n', 2)[2]
    assert text.endswith(code)
    assert screen_source(text).passed


def test_build_kernel_file_cpu_without_docstring(cpu_record: RunRecord, repo_root: Path) -> None:
    code = _candidate_source(repo_root).split('"""\n', 2)[2].lstrip("\n")
    assert ast.get_docstring(ast.parse(code)) is None
    text = build_kernel_file(cpu_record, code, dtypes={"smoke_t8_h1000": "float16"})
    data, prose = kernel_header(text, source="kernel.py")
    meta = KernelMeta.model_validate(data)
    assert meta.measured == []  # nothing was timed on the CPU
    assert [d.value for d in meta.dtypes] == ["fp16"]
    assert [a.value for a in meta.arch] == ["any"]
    assert "performance was not measured" in prose
    assert text.endswith(code)
    assert screen_source(text).passed


def test_build_kernel_file_survives_hostile_family_and_docstring(
    gpu_record: RunRecord, repo_root: Path
) -> None:
    family = 'evil"""family\\x'
    record = gpu_record.model_copy(
        update={
            "candidates": [
                c.model_copy(update={"family": family}) if c.id == "c5_1" else c
                for c in gpu_record.candidates
            ]
        }
    )
    code = _candidate_source(repo_root).split('"""\n', 2)[2]
    source = '"""Old prose with a backslash \\\\ and "quotes"."""\n' + code
    text = build_kernel_file(record, source)
    data, prose = kernel_header(text, source="kernel.py")
    meta = KernelMeta.model_validate(data)
    assert family in meta.title
    assert family in meta.techniques
    assert prose.startswith('Old prose with a backslash \\ and "quotes".')
    assert screen_source(text).passed


def test_build_kernel_file_ignores_invalid_old_header_values(
    cpu_record: RunRecord, repo_root: Path
) -> None:
    code = _candidate_source(repo_root).split('"""\n', 2)[2]
    old = (
        '"""\n---\nid: Bad Id\nop_family: [norm]\nvendor: {x: 1}\narch: [sm_90, {y: 2}]\n'
        "dtypes: [bf16, weird]\nbound: sideways\ntechniques: [tiling, {z: 3}]\n---\nOld prose.\n"
        '"""\n'
    )
    source = old + code + "\nHALF = torch.float16\n"
    record = cpu_record.model_copy(update={"op_family": None, "device": "Mystery GPU"})
    text = build_kernel_file(record, source, dtypes={})
    data, prose = kernel_header(text, source="kernel.py")
    meta = KernelMeta.model_validate(data)
    assert (meta.op_family, meta.vendor, [a.value for a in meta.arch]) == (
        "other",
        "nvidia",
        ["any"],
    )
    assert [d.value for d in meta.dtypes] == ["fp16"]  # from torch.float16 in the code
    assert meta.bound == "memory"  # from the incumbent's shape summaries
    assert meta.techniques == ["tiling", "rms-norm-rowwise"]
    assert prose.startswith("Old prose.")


def test_build_kernel_file_rejects_unparsable_source(gpu_record: RunRecord) -> None:
    with pytest.raises(AgentError, match="does not parse"):
        build_kernel_file(gpu_record, "def broken(:\n")


def test_problem_dtypes_shape_override_wins(rms_problem_path: Path) -> None:
    problem = load_problem(rms_problem_path)
    first = problem.shapes[0]
    override = ShapeCase(id="fp16_case", input_kwargs={**first.input_kwargs, "dtype": "fp16"})
    dtypes = problem_dtypes(problem.model_copy(update={"shapes": [first, override]}))
    assert dtypes == {first.id: "bf16", "fp16_case": "fp16"}


# ---------------------------------------------------------------------------- write_run_dir


def test_write_run_dir_writes_everything(
    gpu_record: RunRecord, tmp_path: Path, repo_root: Path
) -> None:
    source = _candidate_source(repo_root)
    artifacts = {
        "prompts/c1_0.md": "prompt text",
        "replies/c1_0.md": "reply text",
        "candidates/c5_1.py": source,
    }
    out = tmp_path / "run"
    paths = write_run_dir(out, gpu_record, kernel_source=source, artifacts=artifacts)
    assert paths.kernel == out / "kernel.py"
    assert RunRecord.model_validate_json(paths.run_json.read_text()) == gpu_record
    assert paths.report_md.read_text() == render_markdown(gpu_record)
    assert paths.report_html.read_text() == render_html(gpu_record)
    assert paths.kernel.read_text() == build_kernel_file(gpu_record, source)
    for name, text in artifacts.items():
        assert (out / "artifacts" / name).read_text() == text
    assert paths.artifacts == tuple(out / "artifacts" / n for n in artifacts)
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == sorted(
        ["kernel.py", "report.md", "report.html", "run.json"]
        + [f"artifacts/{n}" for n in artifacts]
    )  # and no temporary files left behind


def test_write_run_dir_without_kernel(cpu_record: RunRecord, tmp_path: Path) -> None:
    paths = write_run_dir(tmp_path / "run", cpu_record, kernel_source=None)
    assert paths.kernel is None
    assert not (tmp_path / "run" / "kernel.py").exists()
    assert RunRecord.model_validate_json(paths.run_json.read_text()) == cpu_record


@pytest.mark.parametrize(
    "name", ["../evil.md", "/etc/evil.md", "a/../../evil.md", "..\\evil.md", "", "C:/evil.md", "."]
)
def test_write_run_dir_rejects_escaping_artifact_names(
    cpu_record: RunRecord, tmp_path: Path, name: str
) -> None:
    out = tmp_path / "run"
    with pytest.raises(AgentError, match="artifacts/ folder") as info:
        write_run_dir(out, cpu_record, kernel_source=None, artifacts={"ok.md": "x", name: "y"})
    assert info.value.code == "agent.artifact_path"
    assert not out.exists()  # checked before anything is written
    assert not (tmp_path / "evil.md").exists()


def test_write_run_dir_rejects_file_and_folder_clash(cpu_record: RunRecord, tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="'notes' is a file but 'notes/a.md' needs it"):
        write_run_dir(
            tmp_path / "run",
            cpu_record,
            kernel_source=None,
            artifacts={"notes": "", "notes/a.md": ""},
        )
    assert not (tmp_path / "run").exists()


def test_write_run_dir_rejects_symlink_out_of_artifacts(
    cpu_record: RunRecord, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "run" / "artifacts").mkdir(parents=True)
    (tmp_path / "run" / "artifacts" / "link").symlink_to(outside)
    with pytest.raises(AgentError, match="artifacts/ folder"):
        write_run_dir(tmp_path / "run", cpu_record, kernel_source=None, artifacts={"link/x": "y"})
    assert list(outside.iterdir()) == []


def test_write_run_dir_is_atomic(
    cpu_record: RunRecord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    write_run_dir(out, cpu_record, kernel_source=None)
    before = (out / "report.md").read_text()
    changed = cpu_record.model_copy(update={"stop_reason": "wall_time"})

    def killed(src: str, dst: str) -> None:
        raise KeyboardInterrupt  # the process dies between writing and renaming

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_run_dir(out, changed, kernel_source=None)
    assert (out / "report.md").read_text() == before
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.md", "run.json"]
