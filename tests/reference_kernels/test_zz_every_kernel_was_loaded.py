"""Every Triton reference kernel was loaded by some test of this session (issue #7: each is tested).

Named to run after the folder's other tests (``conftest.KERNEL_CALLS`` records each load). It
checks only a session that collected every test file here without ``-k``; the CUDA C++ kernels
load only in ``gpu`` tests, so a CPU session checks the Triton ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reference_kernels.conftest import KERNEL_CALLS, KERNELS, ON_GPU

HERE = Path(__file__).resolve().parent


def test_every_kernel_file_was_loaded_by_a_test(request: pytest.FixtureRequest) -> None:
    if request.config.getoption("keyword"):
        pytest.skip("a -k selection runs only some kernels' tests")
    collected = {Path(str(item.path)).name for item in request.session.items}
    wanted = {p.name for p in HERE.glob("test_*.py")}
    if not wanted <= collected:
        pytest.skip("only some test files of tests/reference_kernels were collected")
    roots = ("triton", "cuda") if ON_GPU else ("triton",)
    kernels = sorted(
        str(p.relative_to(KERNELS))
        for root in roots
        for p in (KERNELS / root).rglob("*.py")
        if p.name != "__init__.py"
    )
    loaded = {relpath for _, relpath in KERNEL_CALLS}
    assert len(kernels) > 200
    assert not [k for k in kernels if k not in loaded], "kernel files no test loaded"
