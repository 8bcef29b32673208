"""The problem contract (ARCHITECTURE.md §2).

Holds op.yaml v1 as a person writes it, and the resolved ``ProblemSpec`` every format loads into.

Owns the pydantic models and their validation. Must not import or run problem code: code travels
as text to the scorer's workers.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from aka.spec.holdout import HoldoutSpec
from aka.spec.vocab import ComputeUnit, Dsl, OpFamily, Phase, ProblemFormat, Split

__all__ = [
    "CodeRef",
    "DtypePolicySpec",
    "InputStyle",
    "OpYamlSpec",
    "ProblemSpec",
    "RooflineOverrideSpec",
    "ShapeCase",
    "ShapesRef",
    "ToleranceSpec",
]

Number = float | int
#: A roofline quantity: a number, or an arithmetic expression over the shape's kwargs
#: (``"2 * tokens * hidden * 2"``), evaluated by ``aka.spec.expr`` without ``eval``.
Quantity = Annotated[Number | str, Field(union_mode="left_to_right")]
InputStyle = Literal["kwargs", "kernelbench"]
#: ``library``: the problem's ``library`` module (the best path PyTorch has: SDPA, cuBLAS,
#: ``torch._scaled_mm``, fused norms), timed and scored like the others.
Baseline = Literal["eager", "torch_compile", "library"]
_DEFAULT_BASELINES: tuple[Baseline, ...] = ("eager", "torch_compile")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ShapeCase(_Strict):
    """One shape of a problem: how to build the model and its inputs, and who may see it."""

    id: str = Field(min_length=1, description="Unique within the problem.")
    init_kwargs: dict[str, JsonValue] = Field(
        default_factory=dict, description="Model(**init_kwargs)."
    )
    input_kwargs: dict[str, JsonValue] = Field(
        default_factory=dict, description="_make_inputs(**input_kwargs)."
    )
    weight: float = Field(default=1.0, ge=0, description="Relative importance within the problem.")
    phase: Phase | None = Field(default=None, description="prefill, decode or mixed.")
    split: Split = Field(default=Split.TUNE, description="tune, holdout or smoke.")


class CodeRef(_Strict):
    """Python code given by file path (relative to the op.yaml) or inline."""

    path: str | None = Field(default=None, description="File relative to the op.yaml.")
    code: str | None = Field(default=None, description="Inline source (self-contained specs).")

    @model_validator(mode="after")
    def _one_of(self) -> CodeRef:
        if (self.path is None) == (self.code is None):
            raise ValueError("give exactly one of 'path' or 'code'")
        return self


class ShapesRef(_Strict):
    """Shapes given by a JSON/YAML file (relative to the op.yaml) or inline cases."""

    path: str | None = Field(default=None, description="shapes.json-style file.")
    cases: list[ShapeCase] | None = Field(default=None, description="Inline shape cases.")

    @model_validator(mode="after")
    def _one_of(self) -> ShapesRef:
        if (self.path is None) == (self.cases is None):
            raise ValueError("give exactly one of 'path' or 'cases'")
        return self


class ToleranceSpec(_Strict):
    """Per-problem override of the scorer's tolerance table (applies to every float output)."""

    atol: float | None = Field(default=None, ge=0, description="Absolute tolerance.")
    rtol: float | None = Field(default=None, ge=0, description="Relative (and norm) tolerance.")
    atol_scale: Literal["absolute", "rms"] = Field(
        default="absolute",
        description="rms: atol is a share of the reference output's RMS (errors that scale with "
        "the operands, as fp8 or tf32 tensor-core accumulation).",
    )
    reason: str = Field(min_length=1, description="Why the default table does not fit.")


class DtypePolicySpec(_Strict):
    """What precision a candidate may compute in."""

    match_output_dtype: bool = Field(default=True, description="Outputs keep reference dtypes.")
    allow_tf32: bool = Field(
        default=False,
        description="fp32 matmuls may run as tf32: widens the fp32 tolerance to tf32's and "
        "prices those FLOPs at the tf32 tensor-core rate.",
    )


class RooflineOverrideSpec(_Strict):
    """Replace counted FLOPs or bytes for some shapes, with the reason."""

    shapes: list[str] = Field(default_factory=lambda: ["*"], description="Shape ids, or '*'.")
    flops_by_unit: dict[ComputeUnit, Quantity] | None = Field(default=None)
    bytes_read: Quantity | None = Field(default=None)
    bytes_written: Quantity | None = Field(default=None)
    reason: str = Field(min_length=1, description="Why counting gets this wrong.")

    def applies_to(self, shape_id: str) -> bool:
        """Return whether this override covers ``shape_id``."""
        return "*" in self.shapes or shape_id in self.shapes


class _GuardFields(_Strict):
    dsl: list[Dsl] = Field(default_factory=lambda: [Dsl.TRITON, Dsl.CUDA])
    baselines: list[Baseline] = Field(default_factory=lambda: list(_DEFAULT_BASELINES))
    dtype_policy: DtypePolicySpec = Field(default_factory=DtypePolicySpec)
    tolerance: ToleranceSpec | None = Field(default=None)
    roofline: list[RooflineOverrideSpec] = Field(default_factory=list)
    screen_allow: list[str] = Field(
        default_factory=list, description="Screen rule ids (or rule:name) allowed for this problem."
    )
    engagement_min: float = Field(
        default=0.9, ge=0, le=1, description="Share of device time the candidate's kernels need."
    )
    in_place: list[str] = Field(
        default_factory=list, description="Inputs the operator legitimately updates."
    )
    fp8_scales: dict[str, str] = Field(
        default_factory=dict,
        description="fp8 output -> the output holding its scales (keys: tuple index or dict key); "
        "fp8 outputs are compared after dequantisation. "
        "Default for a 2-tuple (fp8, fp32): {'0': '1'}.",
    )
    holdout: HoldoutSpec | None = Field(
        default=None,
        description="Rules for generated holdout shapes (docs/suites.md, 'Holdout shapes').",
    )


class OpYamlSpec(_GuardFields):
    """An op.yaml v1 file, as written by a person (see docs/op-yaml.md)."""

    version: Literal[1] = Field(default=1, description="Format version.")
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    op_family: OpFamily | None = Field(default=None)
    description: str | None = Field(default=None)
    reference: CodeRef = Field(description="The PyTorch reference: class Model(nn.Module).")
    inputs: CodeRef | None = Field(
        default=None, description="Defines _make_inputs; default: found in the reference."
    )
    shapes: ShapesRef
    library: CodeRef | None = Field(
        default=None,
        description="A trusted baseline: class Model with the reference's signatures, computed "
        "with the best library path PyTorch has (its docstring names it); timed as the "
        "'library' baseline, checked against the reference first.",
    )

    @model_validator(mode="after")
    def _library_given(self) -> OpYamlSpec:
        if "library" in self.baselines and self.library is None:
            raise ValueError("baselines lists 'library' but no 'library' module is given")
        return self


class ProblemSpec(_GuardFields):
    """A loaded problem in any format, self-contained (code as text), ready for the scorer."""

    name: str
    format: ProblemFormat
    source_path: str | None = Field(default=None, description="Where it was loaded from.")
    op_family: OpFamily | None = None
    description: str | None = None
    reference_code: str
    inputs_code: str | None = Field(default=None, description="None: inputs live in reference.")
    library_code: str | None = Field(default=None, description="The 'library' baseline's module.")
    input_fn: str = Field(description="_make_inputs, make_inputs or get_inputs.")
    input_style: InputStyle = "kwargs"
    inputs_take_device: bool = False
    forward_params: list[str] = Field(default_factory=list)
    init_params: list[str] = Field(default_factory=list)
    shapes: list[ShapeCase]

    def problem_hash(self) -> str:
        """Return a stable sha256 of everything that defines the problem."""
        payload = self.model_dump(mode="json", exclude={"source_path"})
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    def shapes_in(
        self, splits: set[Split] | None = None, ids: list[str] | None = None
    ) -> list[ShapeCase]:
        """Select shapes by id (in the given order) or by split."""
        if ids:
            by_id = {s.id: s for s in self.shapes}
            return [by_id[i] for i in ids]
        return [s for s in self.shapes if splits is None or s.split in splits]

    def roofline_overrides_for(self, shape_id: str) -> list[RooflineOverrideSpec]:
        """Return the roofline overrides that cover ``shape_id`` in file order."""
        return [o for o in self.roofline if o.applies_to(shape_id)]

    def to_worker_json(self) -> dict[str, Any]:
        """Serialize for a worker process."""
        return self.model_dump(mode="json")
