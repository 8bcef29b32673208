"""Datasheet peaks of the devices aka knows by name (the fallback when ceilings are not measured).

Owns the table of vendor figures (memory bandwidth, dense peak FLOP/s per ``ComputeUnit``, L2 size,
SM count) and the matching of a device name to an entry. Every figure names its source. Must not
import torch or touch a device: measured ceilings live in ``aka.hardware.ceilings``.

All rates are DENSE (no 2:4 sparsity) and in FLOP/s; bandwidth is bytes/s with 1 TB = 1e12 bytes,
as vendors print it. A unit the device lacks (fp8 on A100) is ``None``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from aka.spec.vocab import ComputeUnit, Vendor

__all__ = ["PROFILES", "DatasheetProfile", "match_profile"]

_TERA = 1e12
_MIB = 1024 * 1024


class DatasheetProfile(BaseModel):
    """Vendor peak figures of one device model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(description="Stable id of the entry, e.g. 'h200_sxm'.")
    display_name: str = Field(description="Human name, e.g. 'NVIDIA H200 SXM'.")
    vendor: Vendor
    arch: str = Field(description="Architecture, e.g. 'sm_90' or 'gfx942'.")
    name_pattern: str = Field(
        description="Regex matched (case-insensitive) against the device name the driver reports."
    )
    bandwidth_bytes_per_s: float = Field(gt=0, description="Peak DRAM bandwidth, bytes/s.")
    peak_flops_per_s: dict[ComputeUnit, float | None] = Field(
        description="Dense peak FLOP/s per compute unit; None where the unit does not exist."
    )
    l2_bytes: int | None = Field(default=None, description="L2 cache size; None if unpublished.")
    sm_count: int | None = Field(default=None, description="SMs (NVIDIA) or CUs (AMD).")
    source: str = Field(description="The vendor document the figures come from.")

    def rates_flops_per_s(self) -> dict[ComputeUnit, float]:
        """Return the units that exist on this device and their dense peaks, FLOP/s."""
        return {unit: rate for unit, rate in self.peak_flops_per_s.items() if rate is not None}


def _rates(
    *,
    bf16: float | None,
    fp16: float | None,
    fp8: float | None,
    tf32: float | None,
    fp32_matmul: float | None,
    vector_fp32: float | None,
) -> dict[ComputeUnit, float | None]:
    """Build a full per-unit table from TFLOP/s figures (None stays None)."""
    tflops = {
        ComputeUnit.TC_BF16: bf16,
        ComputeUnit.TC_FP16: fp16,
        ComputeUnit.TC_FP8: fp8,
        ComputeUnit.TC_TF32: tf32,
        ComputeUnit.FP32_MATMUL: fp32_matmul,
        ComputeUnit.VECTOR_FP32: vector_fp32,
    }
    return {unit: None if v is None else v * _TERA for unit, v in tflops.items()}


# Hopper compute (H100 SXM5 and H200 SXM share it). fp32 without tensor cores is 66.9 TFLOP/s, the
# same figure for matmul and elementwise work.
_HOPPER_SXM = _rates(
    bf16=989.4, fp16=989.4, fp8=1978.9, tf32=494.7, fp32_matmul=66.9, vector_fp32=66.9
)

#: The table, most specific entries first. Patterns use word boundaries, so "H20" never matches
#: "H200" or "GH200", and variants with other figures (PCIe, NVL, 40GB) match nothing.
PROFILES: tuple[DatasheetProfile, ...] = (
    DatasheetProfile(
        key="h200_sxm",
        display_name="NVIDIA H200 SXM",
        vendor=Vendor.NVIDIA,
        arch="sm_90",
        name_pattern=r"\bH200\b(?!.*\bNVL\b)",
        bandwidth_bytes_per_s=4.8 * _TERA,
        peak_flops_per_s=_HOPPER_SXM,
        l2_bytes=60 * _MIB,
        sm_count=132,
        source="NVIDIA H200 Tensor Core GPU datasheet (2024), SXM column; L2 and SMs as the "
        "device reports them (ENVIRONMENT.md, 2026-12-02)",
    ),
    DatasheetProfile(
        key="h20",
        display_name="NVIDIA H20",
        vendor=Vendor.NVIDIA,
        arch="sm_90",
        name_pattern=r"\bH20\b",
        bandwidth_bytes_per_s=4.0 * _TERA,
        peak_flops_per_s=_rates(
            bf16=148.0, fp16=148.0, fp8=296.0, tf32=74.0, fp32_matmul=44.0, vector_fp32=44.0
        ),
        source="NVIDIA H20 product brief (2024), as published by NVIDIA partners; L2 and SM count "
        "not published",
    ),
    DatasheetProfile(
        key="h100_sxm",
        display_name="NVIDIA H100 SXM5 80GB",
        vendor=Vendor.NVIDIA,
        arch="sm_90",
        name_pattern=r"\bH100\b(?!.*\b(PCIE|NVL)\b)",
        bandwidth_bytes_per_s=3.35 * _TERA,
        peak_flops_per_s=_HOPPER_SXM,
        l2_bytes=50 * _MIB,
        sm_count=132,
        source="NVIDIA H100 Tensor Core GPU datasheet (2023), SXM column; NVIDIA H100 "
        "architecture whitepaper (2022) for L2 and SMs",
    ),
    DatasheetProfile(
        key="a100_sxm_80gb",
        display_name="NVIDIA A100 SXM4 80GB",
        vendor=Vendor.NVIDIA,
        arch="sm_80",
        name_pattern=r"\bA100\b.*\bSXM\d?\b.*\b80GB\b",
        bandwidth_bytes_per_s=2.039 * _TERA,
        peak_flops_per_s=_rates(
            bf16=312.0, fp16=312.0, fp8=None, tf32=156.0, fp32_matmul=19.5, vector_fp32=19.5
        ),
        l2_bytes=40 * _MIB,
        sm_count=108,
        source="NVIDIA A100 Tensor Core GPU datasheet (2021), 80GB SXM column; NVIDIA A100 "
        "architecture whitepaper (2020) for L2 and SMs",
    ),
    DatasheetProfile(
        key="l40s",
        display_name="NVIDIA L40S",
        vendor=Vendor.NVIDIA,
        arch="sm_89",
        name_pattern=r"\bL40S\b",
        bandwidth_bytes_per_s=864e9,
        peak_flops_per_s=_rates(
            bf16=362.05, fp16=362.05, fp8=733.0, tf32=183.0, fp32_matmul=91.6, vector_fp32=91.6
        ),
        l2_bytes=96 * _MIB,
        sm_count=142,
        source="NVIDIA L40S datasheet (2023); NVIDIA Ada Lovelace architecture whitepaper for "
        "L2 and SMs",
    ),
    DatasheetProfile(
        key="b200",
        display_name="NVIDIA B200",
        vendor=Vendor.NVIDIA,
        arch="sm_100",
        name_pattern=r"\bB200\b",
        bandwidth_bytes_per_s=8.0 * _TERA,
        peak_flops_per_s=_rates(
            bf16=2250.0, fp16=2250.0, fp8=4500.0, tf32=1100.0, fp32_matmul=80.0, vector_fp32=80.0
        ),
        source="NVIDIA DGX B200 / HGX B200 datasheets (2024), per-GPU dense figures; APPROXIMATE "
        "(NVIDIA has printed several B200 power configurations); L2 and SMs left unset",
    ),
    DatasheetProfile(
        key="mi300x",
        display_name="AMD Instinct MI300X",
        vendor=Vendor.AMD,
        arch="gfx942",
        name_pattern=r"\bMI300X\b",
        bandwidth_bytes_per_s=5.3 * _TERA,
        peak_flops_per_s=_rates(
            bf16=1307.4, fp16=1307.4, fp8=2614.9, tf32=653.7, fp32_matmul=163.4, vector_fp32=81.7
        ),
        sm_count=304,
        source="AMD Instinct MI300X data sheet (2023); CUs as SM count; L2 (4 MB per XCD) and "
        "the 256 MB Infinity Cache left out of l2_bytes",
    ),
)


def match_profile(device_name: str) -> DatasheetProfile | None:
    """Find the datasheet entry for a device name as the driver reports it.

    Matches "NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H20", or an
    entry's own ``key``. Variants with other figures (H100 PCIe, A100 40GB, GH200) match nothing.

    Args:
        device_name: The name from ``torch.cuda.get_device_name`` or ``nvidia-smi``.

    Returns:
        The entry, or None when no entry fits.
    """
    name = device_name.strip().upper()
    for profile in PROFILES:
        if name == profile.key.upper() or re.search(profile.name_pattern, name, re.IGNORECASE):
            return profile
    return None
