"""``gpu_name``: the GPU's name from ``nvidia-smi`` without opening a CUDA context."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from aka.hardware import gpu_name


def fake_nvidia_smi(tmp_path: Path, body: str) -> None:
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_gpu_name_counts_within_cuda_visible_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_nvidia_smi(tmp_path, 'printf "NVIDIA H100 80GB HBM3\\nNVIDIA H200\\n"')
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpu_name(0) == "NVIDIA H100 80GB HBM3"
    assert gpu_name(1) == "NVIDIA H200"
    assert gpu_name(2) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpu_name(0) == "NVIDIA H200"


def test_gpu_name_is_none_without_a_working_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_name(0) is None
    fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    assert gpu_name(0) is None
