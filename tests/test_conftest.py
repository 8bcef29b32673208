"""tests/conftest.py itself: gpu tests skip without CUDA; torch is imported only for them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# A stand-in torch on PYTHONPATH: fast, and it says "no CUDA" even on the GPU machine.
FAKE_TORCH = """
import pathlib, os
pathlib.Path(os.environ["TORCH_IMPORTED_MARKER"]).touch()
class cuda:
    @staticmethod
    def is_available():
        return False
"""
TESTS = """
import pytest

@pytest.mark.gpu
def test_needs_gpu():
    assert False

def test_plain():
    pass
"""


def _run_pytest(
    repo_root: Path, tmp_path: Path, marker_expr: str
) -> tuple[subprocess.CompletedProcess[str], bool]:
    project = tmp_path / "project"
    fake = tmp_path / "fake"
    project.mkdir()
    fake.mkdir()
    shutil.copy(repo_root / "tests" / "conftest.py", project / "conftest.py")
    (project / "test_sample.py").write_text(TESTS, encoding="utf-8")
    (project / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: x\n", encoding="utf-8")
    (fake / "torch.py").write_text(FAKE_TORCH, encoding="utf-8")
    marker = tmp_path / "torch-imported"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env.update(PYTHONPATH=str(fake), TORCH_IMPORTED_MARKER=str(marker))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", marker_expr],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc, marker.exists()


@pytest.mark.integration
def test_conftest_skips_gpu_tests_without_cuda(repo_root: Path, tmp_path: Path) -> None:
    proc, torch_imported = _run_pytest(repo_root, tmp_path, "gpu")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 skipped" in proc.stdout
    assert "needs a CUDA device" in proc.stdout
    assert torch_imported


@pytest.mark.integration
def test_conftest_does_not_import_torch_when_gpu_deselected(
    repo_root: Path, tmp_path: Path
) -> None:
    proc, torch_imported = _run_pytest(repo_root, tmp_path, "not gpu")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert not torch_imported
