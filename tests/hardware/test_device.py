from __future__ import annotations

import platform
import re
import stat
from pathlib import Path

import pytest

from aka.core import HardwareError
from aka.hardware import (
    DeviceInfo,
    detect_device,
    device_key,
    library_versions,
    match_profile,
    parse_visible_devices,
    visible_gpus,
    worker_device,
)
from aka.hardware.device import _nvidia_smi_driver_version
from aka.spec import Vendor


def _info(**changes: object) -> DeviceInfo:
    base: dict[str, object] = dict(
        name="NVIDIA H200",
        vendor=Vendor.NVIDIA,
        arch="sm_90",
        compute_capability="9.0",
        sm_count=132,
        l2_bytes=60 * 2**20,
        memory_bytes=150 * 2**30,
        driver_version="570.86.15",
        torch_version="2.11.0+cu130",
        triton_version="3.6.0",
        cuda_version="13.0",
    )
    base.update(changes)
    return DeviceInfo.model_validate(base)


def test_device_key_is_filesystem_safe_and_readable() -> None:
    key = device_key(_info(name="NVIDIA A100-SXM4-80GB / test"))

    assert re.fullmatch(r"[A-Za-z0-9._-]+", key)
    assert key.startswith("NVIDIA-A100-SXM4-80GB-test__drv-570.86.15__torch-2.11.0-cu130")
    assert key.endswith("__triton-3.6.0")


@pytest.mark.parametrize(
    "change",
    [{"driver_version": "580.1"}, {"torch_version": "2.12.0"}, {"triton_version": None}],
)
def test_device_key_changes_with_versions(change: dict[str, object]) -> None:
    assert device_key(_info(**change)) != device_key(_info())


def test_device_key_ignores_fields_outside_the_key() -> None:
    assert device_key(_info(sm_count=1, memory_bytes=1)) == device_key(_info())


def test_device_info_round_trips_through_json() -> None:
    info = _info()

    assert DeviceInfo.model_validate_json(info.model_dump_json()) == info


def test_library_versions_on_cpu() -> None:
    import torch

    versions = library_versions()

    assert set(versions) == {"python", "torch", "triton", "cuda", "hip"}
    assert versions["python"] == platform.python_version()
    assert versions["torch"] == str(torch.__version__)
    assert versions["cuda"] == torch.version.cuda


def test_detect_device_is_none_without_cuda() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert detect_device() is None


def _fake_nvidia_smi(tmp_path: Path, body: str) -> None:
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_nvidia_smi_driver_version_parses_first_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nvidia_smi(tmp_path, 'printf "570.86.15\\n570.86.15\\n"')
    monkeypatch.setenv("PATH", str(tmp_path))

    assert _nvidia_smi_driver_version() == "570.86.15"


def test_nvidia_smi_driver_version_none_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' ; exit 9")
    monkeypatch.setenv("PATH", str(tmp_path))

    assert _nvidia_smi_driver_version() is None


def test_nvidia_smi_driver_version_none_when_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))

    assert _nvidia_smi_driver_version() is None


UUID_A = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
UUID_B = "GPU-5c3b0a3e-1f7d-2e0b-9a4c-3d2e1f0a9b8c"


@pytest.mark.parametrize(
    ("value", "gpus"),
    [
        ("0,1", ["0", "1"]),
        ("1", ["1"]),
        (" 1 , 0 ", ["1", "0"]),
        ("", []),
        ("-1", []),
        ("0,-1,1", ["0"]),  # CUDA stops at the first invalid entry
        ("0,,1", ["0"]),
        ("0,0", ["0"]),
        (f"{UUID_A},{UUID_B}", [UUID_A, UUID_B]),
        ("GPU-8932f937", ["GPU-8932f937"]),  # a UUID prefix
        ("MIG-3c1e7c2d-52f4-5c41-b1c7-3b7f1e3a4f55", ["MIG-3c1e7c2d-52f4-5c41-b1c7-3b7f1e3a4f55"]),
        ("nope,0", []),
    ],
)
def test_visible_gpus_reads_cuda_visible_devices_as_cuda_does(
    value: str, gpus: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    monkeypatch.setattr("aka.hardware.device._torch_device_count", lambda: 8)  # never asked

    assert parse_visible_devices(value) == gpus
    assert visible_gpus() == gpus


@pytest.mark.parametrize("count", [0, 2])
def test_visible_gpus_asks_torch_when_cuda_visible_devices_is_unset(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)

    assert visible_gpus() == [str(i) for i in range(count)]


@pytest.mark.parametrize(
    ("value", "index", "pinned"),
    [
        (None, 0, "0"),
        (None, 3, "3"),
        ("1", 0, "1"),  # a process pinned to physical GPU 1 hands its child GPU 1, not 0
        ("1,0", 1, "0"),
        (f"{UUID_A},{UUID_B}", 1, UUID_B),
    ],
)
def test_worker_device_maps_a_visible_index_to_the_entry_that_pins_a_child(
    value: str | None, index: int, pinned: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)

    assert worker_device(index) == pinned


@pytest.mark.parametrize(("value", "index"), [("", 0), ("-1", 0), ("0,1", 2), ("1", -1)])
def test_worker_device_refuses_an_index_that_is_not_visible(
    value: str, index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)

    with pytest.raises(HardwareError, match=f"GPU index {index} is not visible"):
        worker_device(index)


@pytest.mark.gpu
def test_detect_device_on_gpu() -> None:
    info = detect_device()

    assert info is not None
    assert info.sm_count > 0 and info.memory_bytes > 0
    assert info.l2_bytes is not None and info.l2_bytes > 0
    assert info.torch_version and info.cuda_version
    if info.vendor is Vendor.NVIDIA:
        assert re.fullmatch(r"sm_\d+", info.arch)
        assert info.driver_version is not None
    if "H200" in info.name:
        profile = match_profile(info.name)
        assert profile is not None and profile.key == "h200_sxm"
        assert info.arch == "sm_90" and info.sm_count == 132
