"""Load a repository script (``benchmarks/*.py``, ``scripts/*.py``) as a module, for its tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(relpath: str) -> ModuleType:
    """Import ``REPO/relpath`` under a name of its own (its ``main`` does not run)."""
    path = REPO / relpath
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
