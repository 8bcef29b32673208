"""Load reference kernels by path under Triton's interpreter (CPU) for their tests.

``aka`` never imports ``reference_kernels/``; tests do, one module per file, with
``TRITON_INTERPRET=1`` set before the module's ``@triton.jit`` decorators run.

On the GPU machine, ``AKA_KERNEL_TESTS_DEVICE=cuda`` runs the same tests compiled for the GPU:
no interpreter, and torch's default device is CUDA, so ``make_inputs`` and the references
allocate there (issue #7: every kernel runs on the H200 at least once).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

KERNELS = Path(__file__).resolve().parents[2] / "reference_kernels"
ON_GPU = os.environ.get("AKA_KERNEL_TESTS_DEVICE") == "cuda"
# (test node id, kernel relpath) for every load: benchmarks/kb_kernel_tests.py attributes each
# test's outcome to the kernels it loaded.
KERNEL_CALLS: list[tuple[str, str]] = []


@pytest.fixture(scope="module")
def load_kernel() -> Iterator[Callable[[str], types.ModuleType]]:
    """Return ``load(relpath)`` -> the kernel module, e.g. ``load("triton/norm/rms_norm_rowwise.py")``."""
    loaded: dict[str, types.ModuleType] = {}
    with pytest.MonkeyPatch.context() as mp:
        if ON_GPU:
            if not torch.cuda.is_available():
                pytest.skip("AKA_KERNEL_TESTS_DEVICE=cuda but no CUDA device")
            mp.delenv("TRITON_INTERPRET", raising=False)
            torch.set_default_device("cuda")
        else:
            mp.setenv("TRITON_INTERPRET", "1")

        def load(relpath: str) -> types.ModuleType:
            current = os.environ.get("PYTEST_CURRENT_TEST", "")
            KERNEL_CALLS.append((current.rsplit(" (", 1)[0], relpath))
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

        try:
            yield load
        finally:
            if ON_GPU:
                torch.set_default_device(None)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
