"""``KernelMeta``: the header of every file under ``reference_kernels/`` (STYLE R2).

Owns the schema, including the declared tuning space the agent's offline search explores and the
launcher the search calls. Validates text only; never imports kernel code.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aka.spec.vocab import Arch, Dsl, DType, OpFamily, Vendor

__all__ = ["KernelMeta", "KernelSource", "MeasuredEntry"]

_ID = re.compile(r"^[a-z][a-z0-9_]*$")
TuningValue = int | float | str | bool


class KernelSource(BaseModel):
    """Where upstream-derived code came from."""

    model_config = ConfigDict(extra="forbid")

    url: str
    commit: str | None = None
    license: str


class MeasuredEntry(BaseModel):
    """One measurement written by the scorer (never by hand)."""

    model_config = ConfigDict(extra="forbid")

    device: str
    shape: str
    dtype: DType
    latency_us: float = Field(gt=0)
    sol_fraction: float | None = Field(default=None, ge=0, le=1)
    date: str | None = None


class KernelMeta(BaseModel):
    """A reference kernel's header (YAML front matter of its module docstring)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="snake_case; equals the file stem.")
    title: str = Field(min_length=3, max_length=120, description="One line: what the kernel is.")
    op_family: OpFamily
    dsl: Dsl
    vendor: Vendor = Vendor.NVIDIA
    arch: list[Arch] = Field(min_length=1)
    dtypes: list[DType] = Field(min_length=1)
    bound: Literal["memory", "compute", "latency"]
    techniques: list[str] = Field(default_factory=list)
    status: Literal["reference", "tuned", "experimental", "candidate"] = "reference"
    source: KernelSource | None = None
    launcher: str = Field(description="The public launcher function (a name defined in the file).")
    tuning: dict[str, list[TuningValue]] = Field(
        default_factory=dict,
        description="Tuning space: launcher meta-parameter -> candidate values (first = default).",
    )
    measured: list[MeasuredEntry] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _snake(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError(f"{value!r} is not snake_case (a-z, 0-9, _)")
        return value

    @field_validator("tuning")
    @classmethod
    def _non_empty(cls, value: dict[str, list[TuningValue]]) -> dict[str, list[TuningValue]]:
        empty = [k for k, v in value.items() if not v]
        if empty:
            raise ValueError(f"tuning parameters {empty} have no candidate values")
        return value
