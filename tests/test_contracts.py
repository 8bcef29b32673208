"""Contract tests (STYLE X6): `__all__` matches exports, layers hold, light packages stay light."""

from __future__ import annotations

import importlib
import json
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import aka

SUBPACKAGES = sorted(info.name for info in pkgutil.iter_modules(aka.__path__) if info.ispkg)
HEAVY_MODULES = ("torch", "triton", "chromadb", "sentence_transformers", "litellm", "fastapi")


def _public_bindings(module: ModuleType) -> set[str]:
    """Public names an ``__init__`` binds, minus submodules and ``from __future__`` features."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, ModuleType)
        and type(value).__module__ != "__future__"  # `annotations` from a future import
    }


def test_subpackages_found() -> None:
    assert {"core", "spec"} <= set(SUBPACKAGES)


def test_every_aka_folder_with_code_is_a_package(repo_root: Path) -> None:
    # A folder without __init__.py is a namespace package: no public API, no __all__ (STYLE L2).
    missing = [
        str(folder.relative_to(repo_root))
        for folder in (repo_root / "aka").rglob("*")
        if folder.is_dir()
        and folder.name != "__pycache__"
        and any(folder.glob("*.py"))
        and not (folder / "__init__.py").is_file()
    ]
    assert missing == [], f"add __init__.py (with __all__) to {missing}"


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_subpackage_all_matches_exports(name: str) -> None:
    module = importlib.import_module(f"aka.{name}")
    exported = getattr(module, "__all__", None)

    assert exported is not None, f"aka.{name} has no __all__"
    assert len(exported) == len(set(exported)), f"aka.{name}.__all__ has duplicates"
    unresolved = [item for item in exported if not hasattr(module, item)]
    assert unresolved == [], f"aka.{name}.__all__ names what it does not bind: {unresolved}"
    bound = _public_bindings(module)
    assert set(exported) == bound, (
        f"aka.{name}: bound but not in __all__: {sorted(bound - set(exported))}; "
        f"in __all__ but not bound: {sorted(set(exported) - bound)}"
    )


def _lint_imports_executable() -> str | None:
    beside_python = Path(sys.executable).with_name("lint-imports")
    return str(beside_python) if beside_python.is_file() else shutil.which("lint-imports")


@pytest.mark.integration
def test_import_linter_contracts_pass(repo_root: Path) -> None:
    executable = _lint_imports_executable()
    assert executable is not None, "lint-imports not installed; pip install -e '.[dev]'"

    proc = subprocess.run(
        [executable, "--no-cache", "--no-logo"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.integration
def test_core_and_spec_import_nothing_heavy() -> None:
    code = (
        "import json, sys; import aka.core, aka.spec; "
        f"print(json.dumps(sorted(set({list(HEAVY_MODULES)!r}) & set(sys.modules))))"
    )

    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )

    assert json.loads(proc.stdout) == []
