from __future__ import annotations

import pytest

from aka.hardware import PROFILES, match_profile
from aka.spec import ComputeUnit


@pytest.mark.parametrize(
    ("device_name", "key"),
    [
        ("NVIDIA H200", "h200_sxm"),
        ("NVIDIA H20", "h20"),
        ("NVIDIA H100 80GB HBM3", "h100_sxm"),
        ("NVIDIA H100", "h100_sxm"),
        ("NVIDIA A100-SXM4-80GB", "a100_sxm_80gb"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA B200", "b200"),
        ("AMD Instinct MI300X", "mi300x"),
        ("nvidia h200", "h200_sxm"),
        ("h20", "h20"),
    ],
)
def test_match_profile_finds_the_right_entry(device_name: str, key: str) -> None:
    found = match_profile(device_name)

    assert found is not None
    assert found.key == key


@pytest.mark.parametrize(
    "device_name",
    [
        "NVIDIA H100 PCIe",
        "NVIDIA H100 NVL",
        "NVIDIA H200 NVL",
        "NVIDIA GH200 480GB",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100 80GB PCIe",
        "NVIDIA L40",
        "NVIDIA GeForce RTX 4090",
        "",
    ],
)
def test_match_profile_rejects_variants_with_other_figures(device_name: str) -> None:
    assert match_profile(device_name) is None


def test_h200_and_h20_are_distinct_devices() -> None:
    h200, h20 = match_profile("NVIDIA H200"), match_profile("NVIDIA H20")

    assert h200 is not None and h20 is not None
    assert h200.bandwidth_bytes_per_s == pytest.approx(4.8e12)
    assert h20.bandwidth_bytes_per_s == pytest.approx(4.0e12)
    assert h200.peak_flops_per_s[ComputeUnit.TC_BF16] == pytest.approx(989.4e12)
    assert h20.peak_flops_per_s[ComputeUnit.TC_BF16] == pytest.approx(148e12)


def test_h200_shares_h100_sxm_compute_but_not_bandwidth() -> None:
    h100, h200 = match_profile("h100_sxm"), match_profile("h200_sxm")

    assert h100 is not None and h200 is not None
    assert h100.peak_flops_per_s == h200.peak_flops_per_s
    assert h100.bandwidth_bytes_per_s == pytest.approx(3.35e12)


def test_every_profile_is_complete_and_sourced() -> None:
    keys = [p.key for p in PROFILES]

    assert len(keys) == len(set(keys)) == 7
    for profile in PROFILES:
        assert set(profile.peak_flops_per_s) == set(ComputeUnit), profile.key
        assert profile.source.strip(), profile.key
        assert profile.peak_flops_per_s[ComputeUnit.TC_BF16] is not None
        # dense tensor-core peaks: fp16 == bf16, tf32 == bf16 / 2
        bf16 = profile.peak_flops_per_s[ComputeUnit.TC_BF16]
        assert profile.peak_flops_per_s[ComputeUnit.TC_FP16] == bf16
        tf32 = profile.peak_flops_per_s[ComputeUnit.TC_TF32]
        assert tf32 is not None and tf32 == pytest.approx(bf16 / 2, rel=0.05)


def test_rates_drop_units_the_device_lacks() -> None:
    a100 = match_profile("NVIDIA A100-SXM4-80GB")

    assert a100 is not None
    assert a100.peak_flops_per_s[ComputeUnit.TC_FP8] is None
    rates = a100.rates_flops_per_s()
    assert ComputeUnit.TC_FP8 not in rates
    assert rates[ComputeUnit.FP32_MATMUL] == pytest.approx(19.5e12)


def test_mi300x_has_separate_matrix_and_vector_fp32() -> None:
    mi300x = match_profile("AMD Instinct MI300X")

    assert mi300x is not None
    assert mi300x.peak_flops_per_s[ComputeUnit.FP32_MATMUL] == pytest.approx(163.4e12)
    assert mi300x.peak_flops_per_s[ComputeUnit.VECTOR_FP32] == pytest.approx(81.7e12)


def test_b200_source_says_approximate() -> None:
    b200 = match_profile("NVIDIA B200")

    assert b200 is not None
    assert "APPROXIMATE" in b200.source.upper()
