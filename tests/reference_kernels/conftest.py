"""Load reference kernels by path under Triton's interpreter (CPU) for their tests.

``aka`` never imports ``reference_kernels/``; tests do, one module per file, with
``TRITON_INTERPRET=1`` set before the module's ``@triton.jit`` decorators run.

On the GPU machine, ``AKA_KERNEL_TESTS_DEVICE=cuda`` runs the same tests compiled for the GPU:
no interpreter, torch's default device is CUDA and each kernel's ``make_inputs`` defaults to
``device="cuda"``, so inputs and references live there (issue #7: every kernel runs on the H200
at least once).

``AKA_KERNEL_TESTS_DEVICE=sm90`` needs no GPU: every launch is compiled for sm_90 (Hopper) by
Triton's real compiler down to a cubin and not run, and a kernel needing more shared memory than
an H100/H200 block may have fails like the GPU's ``OutOfResources``. A test passes when none of
its launches failed to compile; what it asserts about outputs is not checked (nothing ran). This
finds, on the CPU, the compile errors the interpreter cannot see (it never lowers to the GPU).

On either, a tuning extreme that does not fit the device's shared memory is skipped (a tuning
space is a search space: the tuner drops points that do not fit); a default tuning must fit.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from aka.bench import interpreter_fix

KERNELS = Path(__file__).resolve().parents[2] / "reference_kernels"
ON_GPU = os.environ.get("AKA_KERNEL_TESTS_DEVICE") == "cuda"
COMPILE_ONLY = os.environ.get("AKA_KERNEL_TESTS_DEVICE") == "sm90"
# The most shared memory one block may use on sm_90 (H100/H200: 227 KiB with the opt-in).
SM90_SHARED_LIMIT = 232448
# fp32 tolerance of kernels whose fp32 path multiplies with tl.dot: on the GPU that runs on TF32
# tensor cores (10-bit mantissa; the interpreter multiplies exactly), as those kernels document.
TF32_TOL = (3e-2, 1e-2)
# (test node id, kernel relpath) for every load: benchmarks/kb_kernel_tests.py attributes each
# test's outcome to the kernels it loaded.
KERNEL_CALLS: list[tuple[str, str]] = []


@pytest.fixture(scope="module")
def load_kernel() -> Iterator[Callable[[str], types.ModuleType]]:
    """Return ``load(relpath)`` -> the kernel module.

    For example ``load("triton/norm/rms_norm_rowwise.py")``.
    """
    loaded: dict[str, types.ModuleType] = {}
    with pytest.MonkeyPatch.context() as mp:
        if ON_GPU:
            if not torch.cuda.is_available():
                pytest.skip("AKA_KERNEL_TESTS_DEVICE=cuda but no CUDA device")
            mp.delenv("TRITON_INTERPRET", raising=False)
            torch.set_default_device("cuda")
        elif COMPILE_ONLY:
            mp.delenv("TRITON_INTERPRET", raising=False)
            _compile_only(mp)
        else:
            mp.setenv("TRITON_INTERPRET", "1")
            interpreter_fix.apply()  # bf16 stores round to nearest even, as on a GPU

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
                if ON_GPU:
                    _inputs_on_cuda(module)
                loaded[relpath] = module
            return loaded[relpath]

        try:
            yield load
        finally:
            if ON_GPU:
                torch.set_default_device(None)


def _inputs_on_cuda(module: types.ModuleType) -> None:
    """Make ``module.make_inputs`` allocate on CUDA unless a caller names a device."""
    make = getattr(module, "make_inputs", None)
    if make is None or "device" not in inspect.signature(make).parameters:
        return

    @functools.wraps(make)
    def on_cuda(*args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(make).bind_partial(*args, **kwargs)
        if "device" not in bound.arguments:
            kwargs["device"] = "cuda"
        return make(*args, **kwargs)

    module.make_inputs = on_cuda  # type: ignore[attr-defined]


class KernelCompileFailed(Exception):
    """A launch in sm90 mode did not compile (or would not fit an sm_90 block)."""


class _Sm90Driver:
    """Just enough of a Triton driver for ``JITFunction.run(warmup=True)``: an sm_90 target."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")


def _compile_only(mp: pytest.MonkeyPatch) -> None:
    """Route every Triton launch to a compile for sm_90 that launches nothing."""
    import triton.runtime.jit as jit
    from triton.runtime import driver

    # set_active/reset_active would leave the default driver behind, which a machine without a
    # GPU cannot create; the monkeypatch puts back whatever was there.
    mp.setattr(driver, "_active", _Sm90Driver())
    original = jit.JITFunction.run

    def compile_only(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        try:
            kernel = original(self, *args, grid=grid, warmup=True, **kwargs)
        except Exception as exc:
            raise KernelCompileFailed(f"{self.__name__}: {type(exc).__name__}: {exc}") from exc
        shared = kernel.metadata.shared
        if shared > SM90_SHARED_LIMIT:
            raise KernelCompileFailed(
                f"{self.__name__}: OutOfResources: shared memory, Required: {shared}, "
                f"sm_90 limit: {SM90_SHARED_LIMIT}"
            )
        return kernel

    mp.setattr(jit.JITFunction, "run", compile_only)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


def _out_of_shared_memory(exc: BaseException) -> bool:
    return any(
        type(e).__name__ == "OutOfResources" or "OutOfResources: shared memory" in str(e)
        for e in _chain(exc)
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """sm90 mode: only compile failures fail; either device: a too-large extreme is skipped."""
    try:
        return (yield)
    except BaseException as exc:
        if (ON_GPU or COMPILE_ONLY) and "extreme" in item.name and _out_of_shared_memory(exc):
            pytest.skip(f"this tuning extreme does not fit the device's shared memory: {exc}")
        if COMPILE_ONLY and not any(isinstance(e, KernelCompileFailed) for e in _chain(exc)):
            return None  # nothing ran, so the test's checks of outputs mean nothing
        raise


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
