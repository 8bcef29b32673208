"""Benchmark suites: a ``suite.yaml`` naming weighted operators, each an op.yaml problem.

A suite is a directory holding ``suite.yaml`` and one problem per operator (for the built-in
``atrex30``: ``configs/suites/atrex30/``, derived by ``scripts/build_atrex30.py``). ``load_suite``
takes a built-in name, a suite directory or a ``suite.yaml`` path. Like the rest of ``aka.spec``
it reads files only; it never runs problem code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aka.core import SpecError
from aka.spec.loader import load_problem
from aka.spec.problem import ProblemSpec

__all__ = ["SuiteOperator", "SuiteSpec", "UncoveredOp", "builtin_suites", "load_suite"]

#: Where the built-in suites live (next to the package in a checkout or an editable install).
BUILTIN_DIR = Path(__file__).resolve().parents[2] / "configs" / "suites"


class SuiteOperator(BaseModel):
    """One operator of a suite: its problem file and its weight in the suite's score."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    problem: str = Field(description="The operator's op.yaml, relative to the suite directory.")
    weight: float = Field(ge=0, description="Share of the suite's score (weights sum to 1).")
    importance_score: float | None = Field(default=None, description="The upstream raw score.")
    phase: str = Field(description="prefill, decode or prefill/decode.")
    tune_shapes: int = Field(ge=0)
    phases: dict[str, int] = Field(default_factory=dict, description="Tune shapes per phase.")
    smoke_shapes: int = Field(ge=0)


class UncoveredOp(BaseModel):
    """Work in the source profile of an imported suite that no operator of the suite covers."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="The profiled op (or kernel) name.")
    share: float = Field(ge=0, le=1, description="Its share of the profile's total time.")
    calls: int = Field(ge=0, description="Calls of the op in the profile.")
    reason: str = Field(description="Why it is not covered.")


class SuiteSpec(BaseModel):
    """A loaded suite."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    source: dict[str, Any] = Field(default_factory=dict)
    weights: str = Field(default="", description="How the weights were derived.")
    operators: list[SuiteOperator]
    uncovered: list[UncoveredOp] = Field(
        default_factory=list,
        description="Profiled work outside the suite (suites written by `aka trace import`).",
    )
    directory: Path = Field(exclude=True, description="The suite's directory.")

    def operator(self, name: str) -> SuiteOperator:
        """Return the operator called ``name``.

        Raises:
            SpecError: No such operator (the message lists them).
        """
        for op in self.operators:
            if op.name == name:
                return op
        raise SpecError(
            f"suite {self.name!r} has no operator {name!r}; it has "
            f"{', '.join(o.name for o in self.operators)}",
            file=str(self.directory / "suite.yaml"),
        )

    def problem(self, name: str) -> ProblemSpec:
        """Load the problem of operator ``name``."""
        return load_problem(self.directory / self.operator(name).problem)


def builtin_suites() -> list[str]:
    """Names of the built-in suites."""
    if not BUILTIN_DIR.is_dir():
        return []
    return sorted(p.parent.name for p in BUILTIN_DIR.glob("*/suite.yaml"))


def _suite_file(name_or_path: str | Path) -> Path:
    path = Path(name_or_path)
    if path.is_file():
        return path
    if (path / "suite.yaml").is_file():
        return path / "suite.yaml"
    builtin = BUILTIN_DIR / str(name_or_path) / "suite.yaml"
    if builtin.is_file():
        return builtin
    known = ", ".join(builtin_suites()) or "none found"
    raise SpecError(
        f"no suite {str(name_or_path)!r}: give a built-in name ({known}), a suite directory or "
        "a suite.yaml path"
    )


def load_suite(name_or_path: str | Path) -> SuiteSpec:
    """Load a suite by built-in name, directory or ``suite.yaml`` path.

    Raises:
        SpecError: The suite does not exist or its ``suite.yaml`` is invalid (file and field named).
    """
    path = _suite_file(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise SpecError(f"cannot read the suite: {err}", file=str(path)) from err
    if not isinstance(raw, dict):
        raise SpecError("suite.yaml must be a mapping with name and operators", file=str(path))
    try:
        suite = SuiteSpec.model_validate({**raw, "directory": path.parent})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SpecError(f"{first['msg']}", file=str(path), field=where) from err
    missing = [o.problem for o in suite.operators if not (path.parent / o.problem).is_file()]
    if missing:
        raise SpecError(f"operators' problem files are missing: {missing}", file=str(path))
    return suite
