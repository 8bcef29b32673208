#!/usr/bin/env python3
"""Write the JSON schemas of aka's file formats into docs/schemas/, or check they are current.

Usage:
    python scripts/export_schemas.py           # (re)write docs/schemas/*.schema.json
    python scripts/export_schemas.py --check   # exit 1 if a file is missing or stale

The schemas are generated from the pydantic models (``aka.spec.op_yaml_json_schema`` and
``aka.bench.EvalResult``), so the models stay the single source of truth; the files exist for
editors and readers. ``tests/spec/test_schema.py`` runs the check, so a model change that forgets
to regenerate them fails the tests. Imports nothing heavy (``aka.bench`` loads torch lazily).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = Path("docs") / "schemas"


def _op_yaml_schema() -> dict[str, Any]:
    from aka.spec import op_yaml_json_schema

    return op_yaml_json_schema()


def _eval_result_schema() -> dict[str, Any]:
    from aka.bench import EvalResult

    return EvalResult.model_json_schema()


#: File name under docs/schemas -> the function that builds its schema.
SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "op-yaml.schema.json": _op_yaml_schema,
    "eval-result.schema.json": _eval_result_schema,
}


def render_schemas() -> dict[Path, str]:
    """Return each schema file's path (relative to the repo root) and its text.

    The text is pretty-printed with sorted keys and ends in a newline, so regenerating an
    unchanged model gives a byte-identical file and a changed one gives a readable diff.
    """
    return {
        SCHEMA_DIR / name: json.dumps(build(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        for name, build in SCHEMAS.items()
    }


def stale_schemas(root: Path = REPO_ROOT) -> list[Path]:
    """Return the schema files under ``root`` that are missing or differ from the models."""
    stale = []
    for rel, text in render_schemas().items():
        path = root / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(rel)
    return stale


def write_schemas(root: Path = REPO_ROOT) -> list[Path]:
    """Write every schema file under ``root``; return the paths that changed."""
    changed = []
    for rel, text in render_schemas().items():
        path = root / rel
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        changed.append(rel)
    return changed


def main(argv: list[str] | None = None) -> int:
    """Run the command line.

    Returns:
        0 when the files are (now) current; 1 when ``--check`` finds a missing or stale one.
    """
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale files, write nothing")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="repository root")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_schemas(args.root)
        for rel in stale:
            sys.stderr.write(f"stale: {rel}; run python scripts/export_schemas.py\n")
        return 1 if stale else 0
    for rel in write_schemas(args.root):
        sys.stdout.write(f"wrote {rel}\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))  # run from a checkout without an install
    sys.exit(main())
