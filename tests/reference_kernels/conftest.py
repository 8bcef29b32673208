"""Load reference kernels by path under Triton's interpreter (CPU) for their tests.

``aka`` never imports ``reference_kernels/``; tests do, one module per file, with
``TRITON_INTERPRET=1`` set before the module's ``@triton.jit`` decorators run.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

KERNELS = Path(__file__).resolve().parents[2] / "reference_kernels"


@pytest.fixture(scope="module")
def load_kernel() -> Iterator[Callable[[str], types.ModuleType]]:
    """Return ``load(relpath)`` -> the kernel module, e.g. ``load("triton/norm/rms_norm_rowwise.py")``."""
    loaded: dict[str, types.ModuleType] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")

        def load(relpath: str) -> types.ModuleType:
            if relpath not in loaded:
                path = KERNELS / relpath
                name = f"refkernel_{path.stem}"
                spec = importlib.util.spec_from_file_location(name, path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                spec.loader.exec_module(module)
                loaded[relpath] = module
            return loaded[relpath]

        yield load


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
