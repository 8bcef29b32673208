"""docs/schemas: generated from the models, current, and true to the examples."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from aka.spec import op_yaml_json_schema

REPO_ROOT = Path(__file__).resolve().parents[2]
EXPORT_SCRIPT = REPO_ROOT / "scripts" / "export_schemas.py"
EXAMPLES = sorted((REPO_ROOT / "configs" / "examples").glob("*/op.yaml"))


@pytest.fixture(scope="module")
def export_schemas() -> ModuleType:
    """scripts/export_schemas.py, loaded by path (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("export_schemas", EXPORT_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_schemas_are_current(export_schemas: ModuleType) -> None:
    stale = export_schemas.stale_schemas(REPO_ROOT)

    assert stale == [], f"{stale} are stale: run python scripts/export_schemas.py"


def test_export_check_mode_flags_stale_and_write_fixes(
    export_schemas: ModuleType, tmp_path: Path
) -> None:
    assert export_schemas.main(["--check", "--root", str(tmp_path)]) == 1  # missing files

    assert export_schemas.main(["--root", str(tmp_path)]) == 0
    assert export_schemas.main(["--check", "--root", str(tmp_path)]) == 0
    written = tmp_path / "docs" / "schemas" / "op-yaml.schema.json"
    written.write_text(written.read_text().replace('"title"', '"titel"', 1))
    assert export_schemas.stale_schemas(tmp_path) == [Path("docs/schemas/op-yaml.schema.json")]


def test_schema_files_are_sorted_pretty_json(export_schemas: ModuleType) -> None:
    for rel, text in export_schemas.render_schemas().items():
        assert text.endswith("}\n"), rel
        data = json.loads(text)
        assert json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n" == text


def test_op_yaml_schema_metadata() -> None:
    schema = op_yaml_json_schema()

    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "aka op.yaml v1"
    assert schema["additionalProperties"] is False
    assert {"name", "reference", "shapes"} <= set(schema["required"])
    assert all(
        d.get("additionalProperties") is False
        for d in schema["$defs"].values()
        if d.get("type") == "object"
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_examples_validate_against_the_schema(path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")

    jsonschema.validate(yaml.safe_load(path.read_text()), op_yaml_json_schema())


def test_schema_rejects_a_typo() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    body = {"name": "x", "reference": {"path": "r.py"}, "shapes": {"cases": []}, "tolerence": {}}

    with pytest.raises(jsonschema.ValidationError, match="tolerence"):
        jsonschema.validate(body, op_yaml_json_schema())
