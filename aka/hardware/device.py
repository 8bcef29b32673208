"""Device detection: what GPU this process sees, and the library versions around it.

Owns ``DeviceInfo`` (a snapshot of the device and software stack, recorded in every result's
manifest and used to key caches), ``detect_device``, ``library_versions``, ``device_key``, and the
one reading of ``CUDA_VISIBLE_DEVICES`` (``visible_gpus``, ``worker_device``) that every place
choosing a GPU for a child process uses.
Must not import torch or triton at module level (``import aka.hardware`` stays CPU-cheap), and
must not measure anything: that is ``aka.hardware.ceilings``.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import shutil
import subprocess

from pydantic import BaseModel, ConfigDict, Field

from aka.core import HardwareError
from aka.spec.vocab import Vendor

__all__ = [
    "DeviceInfo",
    "detect_device",
    "device_key",
    "gpu_name",
    "library_versions",
    "parse_visible_devices",
    "visible_gpus",
    "worker_device",
]

logger = logging.getLogger(__name__)

_NVIDIA_SMI_TIMEOUT_S = 5.0
_UNSAFE_KEY_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_VISIBLE = "CUDA_VISIBLE_DEVICES"
#: A CUDA_VISIBLE_DEVICES entry: a device ordinal, or a (prefix of a) GPU or MIG UUID.
_DEVICE_ENTRY = re.compile(r"^(\d+|(GPU|MIG)-[0-9A-Za-z/._-]+)$")


class DeviceInfo(BaseModel):
    """One GPU and the software stack that drives it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Device name as the driver reports it, e.g. 'NVIDIA H200'.")
    vendor: Vendor
    arch: str = Field(description="Architecture: 'sm_90' (NVIDIA) or 'gfx942' (AMD).")
    compute_capability: str = Field(description="'major.minor', e.g. '9.0'.")
    sm_count: int = Field(ge=0, description="Streaming multiprocessors (CUs on AMD).")
    l2_bytes: int | None = Field(default=None, description="L2 cache size; None if unknown.")
    memory_bytes: int = Field(ge=0, description="Total device memory.")
    driver_version: str | None = Field(default=None, description="GPU driver; None if unknown.")
    torch_version: str
    triton_version: str | None = None
    cuda_version: str | None = Field(default=None, description="CUDA (or HIP) runtime of torch.")


def library_versions() -> dict[str, str | None]:
    """Return the versions of python, torch, triton, CUDA and HIP (None where absent).

    Works on a CPU-only machine. Imports torch (and triton, if installed).
    """
    import torch

    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "triton": _triton_version(),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
    }


def detect_device(index: int = 0) -> DeviceInfo | None:
    """Describe CUDA (or ROCm) device ``index`` as torch sees it.

    Args:
        index: The device ordinal within ``CUDA_VISIBLE_DEVICES``.

    Returns:
        The description, or None when torch has no usable GPU.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(index)
    hip = getattr(torch.version, "hip", None)
    if hip:
        arch = str(getattr(props, "gcnArchName", "")).split(":")[0] or "gfx_unknown"
        vendor = Vendor.AMD
    else:
        arch = f"sm_{props.major}{props.minor}"
        vendor = Vendor.NVIDIA
    l2_bytes = getattr(props, "L2_cache_size", None)
    return DeviceInfo(
        name=str(props.name),
        vendor=vendor,
        arch=arch,
        compute_capability=f"{props.major}.{props.minor}",
        sm_count=int(props.multi_processor_count),
        l2_bytes=int(l2_bytes) if l2_bytes else None,
        memory_bytes=int(props.total_memory),
        driver_version=_driver_version(),
        torch_version=str(torch.__version__),
        triton_version=_triton_version(),
        cuda_version=torch.version.cuda or hip,
    )


def device_key(info: DeviceInfo) -> str:
    """Return a filesystem-safe cache key of the device name, driver, torch and triton versions.

    Example: ``NVIDIA-H200__drv-570.86.15__torch-2.11.0-cu130__triton-3.6.0``.
    """
    parts = (
        info.name,
        f"drv-{info.driver_version or 'unknown'}",
        f"torch-{info.torch_version}",
        f"triton-{info.triton_version or 'none'}",
    )
    return "__".join(_UNSAFE_KEY_CHARS.sub("-", p).strip("-") for p in parts)


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return str(getattr(triton, "__version__", None) or "") or None


def _driver_version() -> str | None:
    """Read the driver version: torch's own query if this torch has one, else ``nvidia-smi``."""
    import torch

    query = getattr(torch.cuda, "driver_version", None)
    if callable(query):
        try:
            return str(query())
        except (RuntimeError, TypeError) as err:
            logger.debug("torch.cuda.driver_version() failed: %s", err)
    return _nvidia_smi_driver_version()


def _nvidia_smi(field: str) -> list[str]:
    """Ask ``nvidia-smi`` for one field of every GPU; [] when it is missing, slow or unclear."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    cmd = [exe, f"--query-gpu={field}", "--format=csv,noheader"]
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as err:
        logger.debug("nvidia-smi failed: %s", err)
        return []
    if done.returncode != 0:
        return []
    return [line.strip() for line in done.stdout.strip().splitlines() if line.strip()]


def _nvidia_smi_driver_version() -> str | None:
    """Ask ``nvidia-smi`` for the driver version; None when it is missing, slow or unclear."""
    # No --id: nvidia-smi numbers GPUs physically, torch within CUDA_VISIBLE_DEVICES, and one host
    # has one driver anyway.
    lines = _nvidia_smi("driver_version")
    return lines[0] if lines else None


def gpu_name(index: int = 0) -> str | None:
    """Return a GPU's name without creating a CUDA context in this process (``nvidia-smi``).

    ``index`` counts within ``CUDA_VISIBLE_DEVICES`` when it lists numeric ids, as torch does.
    None when ``nvidia-smi`` is missing or the index does not exist.
    """
    names = _nvidia_smi("name")
    visible = os.environ.get(_VISIBLE, "").strip()
    if visible:
        ids = parse_visible_devices(visible)
        if all(i.isdigit() for i in ids) and index < len(ids):
            index = int(ids[index])
    return names[index] if 0 <= index < len(names) else None


# ---------------------------------------------------------------- visible GPUs
def parse_visible_devices(value: str) -> list[str]:
    """Read a ``CUDA_VISIBLE_DEVICES`` value the way the CUDA runtime does.

    Entries are comma-separated ordinals or ``GPU-``/``MIG-`` UUIDs (or their prefixes). The list
    ends at the first entry that is none of those (``-1``, an empty entry, a typo) or that repeats
    an earlier one, so ``""`` and ``"-1"`` hide every GPU and ``"0,-1,1"`` shows GPU 0 only.

    Returns:
        The entries that name visible GPUs, in order: entry ``i`` is the GPU torch calls ``cuda:i``.
    """
    entries: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not _DEVICE_ENTRY.match(entry) or entry in entries:
            break
        entries.append(entry)
    return entries


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as the ``CUDA_VISIBLE_DEVICES`` entries that pin a child.

    With ``CUDA_VISIBLE_DEVICES`` set, its entries (``parse_visible_devices``: ordinals or UUIDs,
    never checked against the hardware, so nothing initialises CUDA); unset, ``0 .. n-1`` for the
    ``n`` devices torch counts (none without torch or a driver). Position ``i`` in the list is the
    visible index ``i`` that ``Scorer(gpu_index=i)`` and ``worker_device(i)`` take.
    """
    value = os.environ.get(_VISIBLE)
    if value is not None:
        return parse_visible_devices(value)
    return [str(i) for i in range(_torch_device_count())]


def worker_device(index: int) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that shows a child process visible GPU ``index`` only.

    ``index`` counts within this process's own ``CUDA_VISIBLE_DEVICES`` (as torch's ``cuda:i``
    does), so a process pinned to physical GPU 1 (``CUDA_VISIBLE_DEVICES=1``) hands its child
    ``"1"`` for index 0, never physical GPU 0. Unset, the index is the physical ordinal.

    Raises:
        HardwareError: ``index`` is not visible (negative, or past the visible list).
    """
    value = os.environ.get(_VISIBLE)
    if value is None:
        if index < 0:
            raise HardwareError(f"GPU index {index} is negative; use 0 for the first GPU")
        return str(index)
    entries = parse_visible_devices(value)
    if not 0 <= index < len(entries):
        raise HardwareError(
            f"GPU index {index} is not visible: {_VISIBLE}={value!r} shows {len(entries)} GPU(s) "
            f"({', '.join(entries) or 'none'}); use an index below {len(entries)} or widen "
            f"{_VISIBLE}"
        )
    return entries[index]


def _torch_device_count() -> int:
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception as err:  # noqa: BLE001 - no torch, no driver: no GPU, said at DEBUG
        logger.debug("torch.cuda.device_count() failed: %s", err)
        return 0
