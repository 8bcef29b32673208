"""JSON schemas of the person-written formats, for docs/schemas and editor support."""

from __future__ import annotations

from typing import Any

from aka.spec.problem import OpYamlSpec

__all__ = ["op_yaml_json_schema"]


def op_yaml_json_schema() -> dict[str, Any]:
    """Return the JSON schema of op.yaml v1."""
    schema = OpYamlSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "aka op.yaml v1"
    return schema
