"""The ``aka`` CLI: exit codes, JSON output and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aka.cli import main

REPO = Path(__file__).resolve().parents[2]
RMS = REPO / "configs" / "examples" / "rms_norm"
BAD = REPO / "tests" / "fixtures" / "candidates"

pytestmark = pytest.mark.integration


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_score_accepted_exits_0_and_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "bench",
        "score",
        "--problem",
        str(RMS / "op.yaml"),
        "--candidate",
        str(RMS / "candidate.py"),
        "--json",
        "--shapes",
        "smoke_t33_h256",
    )
    assert code == 0
    result = json.loads(out)
    assert result["verdict"] == "accepted"
    assert result["performance_measured"] is False
    assert [s["shape_id"] for s in result["shapes"]] == ["smoke_t33_h256"]
    assert result["fallback_ratio"] == 0.0
    assert result["engagement"]["own_kernels"] == ["_rms_norm_row_kernel"]


def test_score_table_shows_the_engagement(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "bench", "score", "-p", str(RMS / "op.yaml"), "-c", str(RMS / "candidate.py")
    )
    assert code == 0
    assert "fallback" in out
    assert "engagement: 0% of the bytes touched (interpreter) is library work" in out
    assert "own kernels: _rms_norm_row_kernel" in out


def test_score_rejected_exits_1_with_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "bench", "score", "-p", str(RMS / "op.yaml"), "-c", str(BAD / "rms_norm_nan.py")
    )
    assert code == 1
    assert "non_finite" in out and "smoke_t8_h1000" in out


def test_score_screen_rejection_lists_rules(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "bench",
        "score",
        "-p",
        str(RMS / "op.yaml"),
        "-c",
        str(BAD / "rms_norm_torch_fallback.py"),
    )
    assert code == 1
    assert "[torch-compute-in-forward]" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-p", "nope.yaml", "-c", str(RMS / "candidate.py")], "nope.yaml"),
        (["-p", str(RMS / "op.yaml"), "-c", "missing.py"], "missing.py"),
        (
            ["-p", str(RMS / "op.yaml"), "-c", str(RMS / "candidate.py"), "--shapes", "bogus"],
            "bogus",
        ),
        (
            ["-p", str(RMS / "op.yaml"), "-c", str(RMS / "candidate.py"), "--device", "tpu"],
            "--device",
        ),
        (["-p", str(RMS / "op.yaml"), "-c", str(RMS / "candidate.py"), "--format", "csv"], "csv"),
    ],
)
def test_bad_usage_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    code, out, err = run(capsys, "bench", "score", *args)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err


def test_missing_option_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "bench", "score", "--problem", str(RMS / "op.yaml"))
    assert code == 2
    assert "--candidate" in err


def test_broken_reference_is_a_harness_failure_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    problem = tmp_path / "broken.yaml"
    problem.write_text(
        "name: broken\nreference:\n  code: |\n"
        "    import torch\n"
        "    class Model(torch.nn.Module):\n"
        "        def forward(self, x):\n"
        "            raise RuntimeError('reference is broken')\n"
        "    def _make_inputs(n):\n"
        "        return {'x': torch.randn(n)}\n"
        "shapes:\n  cases:\n    - {id: s, input_kwargs: {n: 4}, split: smoke}\n"
    )
    code, _, err = run(
        capsys, "bench", "score", "-p", str(problem), "-c", str(RMS / "candidate.py")
    )
    assert code == 3
    assert "reference is broken" in err


def test_cuda_candidate_on_cpu_exits_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cand = tmp_path / "cuda_candidate.py"
    cand.write_text(
        "import torch\nfrom torch.utils.cpp_extension import load_inline\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x, weight):\n"
        "        return load_inline(name='m', cpp_sources='', cuda_sources='').f(x)\n"
    )
    code, out, _ = run(capsys, "bench", "score", "-p", str(RMS / "op.yaml"), "-c", str(cand))
    assert code == 4
    assert "not_run" in out


def test_hardware_show_and_measure_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "hardware", "show", "--json")
    assert code == 0
    assert json.loads(out)["device"] is None
    code, _, err = run(capsys, "hardware", "measure")
    assert code == 4
    assert "no CUDA device" in err


def test_config_show_masks_secrets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AKA_LLM__API_KEY", "sk-very-secret")
    monkeypatch.setenv("AKA_BENCH__MIN_SAMPLES", "123")
    code, out, _ = run(capsys, "config", "show", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["bench"]["min_samples"] == 123
    assert "sk-very-secret" not in out and data["llm"]["api_key"] == "**********"


def test_console_script_runs_as_a_module() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "aka", "--version"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0
    assert proc.stdout.startswith("aka ")
