"""aka.hardware: device detection, datasheet peaks, measured ceilings and roofline accounting.

Importing it never imports torch or triton; the functions that need them import them.
"""

from aka.hardware.ceilings import (
    DeviceCeilings,
    datasheet_ceilings,
    load_cached_ceilings,
    load_or_measure_ceilings,
    measure_ceilings,
    save_ceilings,
)
from aka.hardware.device import (
    DeviceInfo,
    detect_device,
    device_key,
    gpu_name,
    library_versions,
    parse_visible_devices,
    visible_gpus,
    worker_device,
)
from aka.hardware.profiles import PROFILES, DatasheetProfile, match_profile
from aka.hardware.roofline import CostCounts, TSol, apply_overrides, count_costs, t_sol
from aka.hardware.timer import WindowSamples, empty_kernel_fn, make_l2_flusher, sample_windows

__all__ = [
    "PROFILES",
    "CostCounts",
    "DatasheetProfile",
    "DeviceCeilings",
    "DeviceInfo",
    "TSol",
    "WindowSamples",
    "apply_overrides",
    "count_costs",
    "datasheet_ceilings",
    "detect_device",
    "gpu_name",
    "device_key",
    "empty_kernel_fn",
    "library_versions",
    "load_cached_ceilings",
    "load_or_measure_ceilings",
    "make_l2_flusher",
    "match_profile",
    "measure_ceilings",
    "parse_visible_devices",
    "sample_windows",
    "save_ceilings",
    "t_sol",
    "visible_gpus",
    "worker_device",
]
