from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from aka.core import ProgressEvent
from aka.hardware import (
    DeviceCeilings,
    DeviceInfo,
    datasheet_ceilings,
    detect_device,
    device_key,
    load_cached_ceilings,
    load_or_measure_ceilings,
    measure_ceilings,
    save_ceilings,
)
from aka.hardware import ceilings as ceilings_module
from aka.spec import ComputeUnit, Vendor

INFO = DeviceInfo(
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


def _fake_measured(bandwidth: float = 4.3e12) -> DeviceCeilings:
    return DeviceCeilings(
        device_name=INFO.name,
        device=INFO,
        source="measured",
        bandwidth_bytes_per_s=bandwidth,
        rates_flops_per_s={ComputeUnit.TC_BF16: 8.0e14, ComputeUnit.VECTOR_FP32: 6.0e13},
        launch_floor_us=4.6,
        launch_floor_iqr_us=0.2,
        measured_at="2026-12-02T00:00:00+00:00",
        versions={"torch": "2.11.0+cu130", "cuda": None},
        details={"bandwidth_bytes_per_s": {"1GiB": bandwidth}},
    )


class _FakeMeasure:
    """Stands in for ``measure_ceilings``: counts calls, returns a fixed measurement."""

    def __init__(self, bandwidth: float = 4.3e12) -> None:
        self.calls = 0
        self.bandwidth = bandwidth

    def __call__(self, info: DeviceInfo, *, progress: object = None) -> DeviceCeilings:
        self.calls += 1
        return _fake_measured(self.bandwidth)


@pytest.fixture
def fake_measure(monkeypatch: pytest.MonkeyPatch) -> _FakeMeasure:
    fake = _FakeMeasure()
    monkeypatch.setattr(ceilings_module, "measure_ceilings", fake)
    return fake


def test_datasheet_ceilings_from_name() -> None:
    sheet = datasheet_ceilings("NVIDIA H200")

    assert sheet is not None
    assert sheet.source == "datasheet"
    assert sheet.device is None and sheet.device_name == "NVIDIA H200"
    assert sheet.bandwidth_bytes_per_s == pytest.approx(4.8e12)
    assert sheet.rates_flops_per_s[ComputeUnit.TC_BF16] == pytest.approx(989.4e12)
    assert sheet.launch_floor_us is None
    assert sheet.details["profile"] == "h200_sxm"
    assert "H200" in str(sheet.details["source"])


def test_datasheet_ceilings_from_device_info_keeps_the_info() -> None:
    sheet = datasheet_ceilings(INFO)

    assert sheet is not None and sheet.device == INFO


def test_datasheet_ceilings_leave_out_missing_units() -> None:
    sheet = datasheet_ceilings("NVIDIA A100-SXM4-80GB")

    assert sheet is not None
    assert ComputeUnit.TC_FP8 not in sheet.rates_flops_per_s
    assert set(sheet.rates_flops_per_s) == set(ComputeUnit) - {ComputeUnit.TC_FP8}


def test_datasheet_ceilings_unknown_device_is_none() -> None:
    assert datasheet_ceilings("NVIDIA GeForce GTX 1080") is None


def test_ceilings_round_trip_through_json() -> None:
    original = _fake_measured()

    assert DeviceCeilings.model_validate_json(original.model_dump_json()) == original


def test_load_or_measure_measures_once_then_reads_the_cache(
    tmp_path: Path, fake_measure: _FakeMeasure
) -> None:
    first = load_or_measure_ceilings(tmp_path, INFO)
    second = load_or_measure_ceilings(tmp_path, INFO)

    assert fake_measure.calls == 1
    assert second == first
    assert (tmp_path / "ceilings" / f"{device_key(INFO)}.json").is_file()


def test_load_or_measure_remeasures_on_request(tmp_path: Path, fake_measure: _FakeMeasure) -> None:
    load_or_measure_ceilings(tmp_path, INFO)
    fake_measure.bandwidth = 4.4e12

    again = load_or_measure_ceilings(tmp_path, INFO, remeasure=True)

    assert fake_measure.calls == 2
    assert again.bandwidth_bytes_per_s == 4.4e12
    cached = load_cached_ceilings(tmp_path, INFO)
    assert cached is not None and cached.bandwidth_bytes_per_s == 4.4e12


@pytest.mark.parametrize("content", ["{not json", '{"source": "measured"}', ""])
def test_corrupt_cache_is_measured_again_with_a_warning(
    tmp_path: Path,
    fake_measure: _FakeMeasure,
    caplog: pytest.LogCaptureFixture,
    content: str,
) -> None:
    path = tmp_path / "ceilings" / f"{device_key(INFO)}.json"
    path.parent.mkdir(parents=True)
    path.write_text(content, encoding="utf-8")

    with caplog.at_level(logging.WARNING, logger="aka.hardware.ceilings"):
        got = load_or_measure_ceilings(tmp_path, INFO)

    assert fake_measure.calls == 1
    assert got == _fake_measured()
    assert any("unreadable cached ceilings" in r.getMessage() for r in caplog.records)
    assert DeviceCeilings.model_validate_json(path.read_text(encoding="utf-8")) == got


def test_load_cached_ceilings_none_when_absent(tmp_path: Path) -> None:
    assert load_cached_ceilings(tmp_path, INFO) is None


def test_cache_is_per_device_key(tmp_path: Path) -> None:
    save_ceilings(tmp_path, INFO, _fake_measured())
    other = INFO.model_copy(update={"driver_version": "580.0"})

    assert load_cached_ceilings(tmp_path, INFO) == _fake_measured()
    assert load_cached_ceilings(tmp_path, other) is None


def test_save_ceilings_leaves_no_temp_files(tmp_path: Path) -> None:
    path = save_ceilings(tmp_path, INFO, _fake_measured())

    assert [p.name for p in path.parent.iterdir()] == [path.name]


@pytest.mark.gpu
@pytest.mark.slow
def test_measure_ceilings_on_the_live_gpu_is_plausible() -> None:
    info = detect_device()
    assert info is not None
    events: list[ProgressEvent] = []

    started_s = time.perf_counter()
    measured = measure_ceilings(info, progress=events.append)
    elapsed_s = time.perf_counter() - started_s

    assert elapsed_s < 60.0
    assert [e.stage for e in events] == [
        "warmup",
        "bandwidth",
        "matmul",
        "vector",
        "launch_floor",
        "done",
    ]
    assert all(e.source == "hardware" for e in events)
    assert measured.source == "measured" and measured.measured_at is not None
    assert measured.launch_floor_us is not None and 0.5 < measured.launch_floor_us < 30.0
    assert measured.launch_floor_iqr_us is not None and measured.launch_floor_iqr_us >= 0
    for unit in (ComputeUnit.TC_BF16, ComputeUnit.TC_FP16, ComputeUnit.TC_TF32):
        assert unit in measured.rates_flops_per_s, unit
    assert ComputeUnit.FP32_MATMUL in measured.rates_flops_per_s
    assert ComputeUnit.VECTOR_FP32 in measured.rates_flops_per_s
    sheet = datasheet_ceilings(info)
    if sheet is None:
        return
    if info.arch == "sm_90":  # Hopper runs fp8 at twice the bf16 rate
        fp8 = measured.rates_flops_per_s[ComputeUnit.TC_FP8]
        assert fp8 > 1.3 * measured.rates_flops_per_s[ComputeUnit.TC_BF16]
    # Nothing may beat the datasheet (a FLOP or byte miscount would), and a warm, well-chosen
    # measurement reaches a good share of it.
    assert 0.6 * sheet.bandwidth_bytes_per_s < measured.bandwidth_bytes_per_s
    assert measured.bandwidth_bytes_per_s < 1.02 * sheet.bandwidth_bytes_per_s
    for unit, rate in measured.rates_flops_per_s.items():
        peak = sheet.rates_flops_per_s[unit]
        assert 0.4 * peak < rate < 1.05 * peak, (unit, rate, peak)
