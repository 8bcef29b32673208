from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.integration
def test_import_needs_neither_torch_nor_triton() -> None:
    code = (
        "import sys, aka.hardware\n"
        "heavy = sorted(m for m in ('torch', 'triton') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )

    assert proc.stdout.strip() == ""
