"""The worker's environment: one GPU, named through the parent's own view; NVLink multicast off."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from aka.bench.sandbox import build_worker_env, start_worker
from aka.core import BenchConfig, HardwareError

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


@pytest.mark.parametrize(
    ("parent", "index", "child"),
    [
        (None, 0, "0"),
        (None, 1, "1"),
        ("1", 0, "1"),  # a job process pinned to GPU 1: its workers stay on GPU 1
        ("2,3", 1, "3"),
        ("GPU-aaaa,GPU-bbbb", 0, "GPU-aaaa"),
    ],
)
def test_a_gpu_worker_sees_the_parents_visible_gpu_at_its_index(
    parent: str | None, index: int, child: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if parent is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", parent)

    env = build_worker_env(tmp_path, interpret=False, gpu_index=index)

    assert env["CUDA_VISIBLE_DEVICES"] == child
    assert "TRITON_INTERPRET" not in env


@pytest.mark.parametrize("interpret", [True, False])
def test_every_worker_keeps_nvlink_multicast_off(
    interpret: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # the parent's own choice does not leak through

    env = build_worker_env(
        tmp_path, interpret=interpret, gpu_index=None if interpret else 1,
        extra={"NCCL_NVLS_ENABLE": "1", "CUDA_CACHE_DISABLE": "1"},
    )  # fmt: skip

    assert {k: env[k] for k in MULTICAST_OFF} == MULTICAST_OFF
    assert env["CUDA_CACHE_DISABLE"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == ("" if interpret else "1")


def test_a_gpu_the_parent_cannot_see_is_a_harness_error_and_leaves_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    with pytest.raises(HardwareError, match="GPU index 1 is not visible"):
        start_worker(
            {"role": "reference"}, {}, config=BenchConfig(), interpret=False, gpu_index=1,
            timeout_s=5.0,
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []
