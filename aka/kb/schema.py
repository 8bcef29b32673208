"""Knowledge-base schemas: ``DocMeta``, the layers, and the kind-to-layer table.

``DocMeta`` is the front matter of ``knowledge_base/**.md``; the one table that maps document kinds
to layers lives here too (ARCHITECTURE.md §6, STYLE §12).

Must not import chromadb or sentence-transformers.
"""

from __future__ import annotations

import datetime as dt
import re
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aka.spec import Arch, Dsl, OpFamily

__all__ = ["KIND_TO_LAYER", "DocKind", "DocMeta", "Evidence", "Layer"]

_KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class Layer(StrEnum):
    """Knowledge layers, from the metal up; a query names the layers it touches."""

    HARDWARE = "hardware"
    API = "api"
    TECHNIQUES = "techniques"
    PITFALLS = "pitfalls"
    PLAYBOOKS = "playbooks"
    KERNELS = "kernels"
    UPSTREAM = "upstream"


class DocKind(StrEnum):
    """What a knowledge document is."""

    TECHNIQUE = "technique"
    PITFALL = "pitfall"
    SYMPTOM = "symptom"
    HARDWARE = "hardware"
    PLAYBOOK = "playbook"
    API = "api"
    GUIDE = "guide"
    REPORT = "report"


#: The one table from document kind to layer.
KIND_TO_LAYER: dict[DocKind, Layer] = {
    DocKind.HARDWARE: Layer.HARDWARE,
    DocKind.API: Layer.API,
    DocKind.TECHNIQUE: Layer.TECHNIQUES,
    DocKind.GUIDE: Layer.TECHNIQUES,
    DocKind.PITFALL: Layer.PITFALLS,
    DocKind.SYMPTOM: Layer.PITFALLS,
    DocKind.PLAYBOOK: Layer.PLAYBOOKS,
    DocKind.REPORT: Layer.PLAYBOOKS,
}


class Evidence(BaseModel):
    """What a claim rests on."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["measurement", "upstream-doc", "upstream-code", "paper", "datasheet", "reasoning"]
    ref: str = Field(min_length=3)


class DocMeta(BaseModel):
    """Front matter of a knowledge document (STYLE Q2)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="kebab-case; equals the file stem; never reused.")
    title: str = Field(min_length=3, max_length=120)
    kind: DocKind
    summary: str = Field(min_length=10, max_length=200)
    vendor: Literal["nvidia", "amd", "any"] = "any"
    arch: list[Arch] = Field(default_factory=lambda: [Arch.ANY], min_length=1)
    dsl: Dsl = Dsl.ANY
    op_family: list[OpFamily] = Field(default_factory=list)
    symptoms: list[str] = Field(default_factory=list)
    techniques: list[str] = Field(default_factory=list)
    confidence: Literal["proven", "measured", "provisional", "cautionary"] = "provisional"
    evidence: list[Evidence] = Field(default_factory=list)
    related: list[str] = Field(default_factory=list)
    updated: dt.date

    @field_validator("id")
    @classmethod
    def _kebab(cls, value: str) -> str:
        if not _KEBAB.match(value):
            raise ValueError(f"{value!r} is not kebab-case (a-z, 0-9, single '-')")
        return value

    @property
    def layer(self) -> Layer:
        """The layer this document is indexed in."""
        return KIND_TO_LAYER[self.kind]
