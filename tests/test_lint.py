"""The tree stays clean under the linters (STYLE §13): CI catches what `make check` would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, check=False
    )


def test_ruff_check_passes() -> None:
    proc = _run("ruff", "check", "aka", "tests", "benchmarks", "scripts", "configs")
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_ruff_format_is_applied() -> None:
    proc = _run("ruff", "format", "--check", "aka", "tests", "benchmarks", "scripts", "configs")
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.slow
def test_mypy_passes() -> None:
    proc = _run("mypy")
    assert proc.returncode == 0, proc.stdout[-3000:]
