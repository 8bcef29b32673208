"""``KernelMeta``: the header of every file under ``reference_kernels/`` (STYLE R2).

Owns the schema, including the declared tuning space the agent's offline search explores, the
launcher the search calls, and the launcher's *contract*: what each parameter is (``args``), what it
returns (``returns``) and which symbolic dimensions a problem's scalars may give (``dims``). The
agent's adapter (``aka.agent.adapt``) matches a problem's inputs to that contract by unifying the
symbolic shapes with real ones. Validates text only; never imports kernel code.

Symbolic shapes are lists of dimension tokens:

- ``N`` (a symbol): any size, the same wherever ``N`` appears in the contract;
- ``2*D``: a multiple of a symbol (``D`` is then half the size);
- ``128``: exactly that size; ``?``: any size, unchecked;
- ``...`` (first position only): any number of leading dimensions, the same for every parameter and
  output that has them (like einsum's ellipsis);
- any other text is an arithmetic expression over the symbols and the scalar parameters
  (``ceil(K / 128)``), checked once everything else is bound.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    Tag,
    field_validator,
    model_validator,
)

from aka.spec.vocab import Arch, Dsl, DType, OpFamily, Vendor

__all__ = [
    "DIM_ELLIPSIS",
    "DIM_WILDCARD",
    "KernelMeta",
    "KernelProblem",
    "KernelSource",
    "LauncherArg",
    "MeasuredEntry",
    "OutputSpec",
    "ScalarArgSpec",
    "TensorArgSpec",
    "dim_symbols",
    "parse_dim",
]

_ID = re.compile(r"^[a-z][a-z0-9_]*$")
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MULTIPLE = re.compile(r"^(\d+)\s*\*\s*([A-Za-z_][A-Za-z0-9_]*)$")
_NAMES = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FUNCTIONS = frozenset({"ceil", "floor", "min", "max", "log2", "sqrt"})
TuningValue = int | float | str | bool
DimToken = int | str
#: Dtype classes a tensor parameter may name besides the ``DType`` values.
DTYPE_CLASSES = ("float", "int", "any")
DIM_ELLIPSIS = "..."
DIM_WILDCARD = "?"


def parse_dim(token: DimToken) -> tuple[str, int, str]:
    """Classify one dimension token.

    Returns:
        ``(kind, factor, name)``: kind is ``"int"`` (factor = the size), ``"symbol"`` (``factor *
        name``; factor 1 for a bare symbol), ``"ellipsis"``, ``"wildcard"`` or ``"expr"`` (name =
        the expression text).
    """
    if isinstance(token, bool):
        return "expr", 0, str(token)
    if isinstance(token, int):
        return "int", token, ""
    text = token.strip()
    if text == DIM_ELLIPSIS:
        return "ellipsis", 0, ""
    if text == DIM_WILDCARD:
        return "wildcard", 0, ""
    if text.isdigit():
        return "int", int(text), ""
    if _SYMBOL.match(text):
        return "symbol", 1, text
    multiple = _MULTIPLE.match(text)
    if multiple:
        return "symbol", int(multiple.group(1)), multiple.group(2)
    return "expr", 0, text


def dim_symbols(shape: list[DimToken]) -> set[str]:
    """Every name a shape mentions (symbols, and names inside expressions)."""
    names: set[str] = set()
    for token in shape:
        kind, _, name = parse_dim(token)
        if kind == "symbol":
            names.add(name)
        elif kind == "expr":
            names |= {n for n in _NAMES.findall(name) if n not in _FUNCTIONS}
    return names


def _check_shape(shape: list[DimToken]) -> list[DimToken]:
    for i, token in enumerate(shape):
        kind, factor, _ = parse_dim(token)
        if kind == "ellipsis" and i != 0:
            raise ValueError(f"'...' may only open a shape, found at position {i} in {shape}")
        if kind in ("int", "symbol") and factor <= 0:
            raise ValueError(f"dimension {token!r} in {shape} must be positive")
    return shape


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TensorArgSpec(_Strict):
    """A launcher parameter that takes a tensor."""

    kind: Literal["tensor"] = "tensor"
    shape: list[DimToken] = Field(
        description="Symbolic shape, e.g. ['...', 'N'], ['M', 'K'], ['T', 'H', 'D']."
    )
    dtypes: list[str] = Field(
        default_factory=lambda: ["any"],
        description="Allowed dtypes: DType names, or the classes 'float', 'int', 'any'.",
    )
    like: str | None = Field(
        default=None, description="Must have the same dtype as this other tensor parameter."
    )
    layout: Literal["rows", "contiguous", "any"] = Field(
        default="rows",
        description="What the launcher needs: 'rows' (last dim contiguous), 'contiguous', or "
        "'any' strides (the adapter may then pass a transposed view).",
    )
    optional: bool = Field(default=False, description="None is accepted (the launcher default).")
    flattened: bool = Field(
        default=False,
        description="A problem may pass it with adjacent dims merged, e.g. (T, H*D) for "
        "[T, H, D]; the adapter splits them back with a view (the other factors must be known).",
    )
    aliases: list[str] = Field(
        default_factory=list, description="Other names a problem may give this input."
    )

    @field_validator("shape")
    @classmethod
    def _valid_shape(cls, value: list[DimToken]) -> list[DimToken]:
        return _check_shape(value)

    @field_validator("dtypes")
    @classmethod
    def _valid_dtypes(cls, value: list[str]) -> list[str]:
        known = {d.value for d in DType} | set(DTYPE_CLASSES)
        unknown = [d for d in value if d not in known]
        if unknown:
            raise ValueError(f"unknown dtypes {unknown}; use {sorted(known)}")
        return value


ScalarType = Literal["float", "int", "bool", "str", "list[int]", "list[float]"]


class ScalarArgSpec(_Strict):
    """A launcher parameter that takes a Python scalar, or a list of them (section sizes)."""

    kind: Literal["scalar"] = "scalar"
    type: ScalarType | list[ScalarType] = Field(
        description="The value's Python type, or the types it may have ([list[int], str] for "
        "'str | Sequence[int]'); list[int]/list[float] take a problem's list or tuple argument "
        "whole."
    )

    default: TuningValue | None = Field(
        default=None,
        description="The launcher's default (used when the problem has no counterpart); "
        "a parameter without a default in the launcher must be matched.",
    )
    aliases: list[str] = Field(
        default_factory=list,
        description="Other names a problem may use, e.g. [epsilon, variance_epsilon] for eps; "
        "'name[i]' takes item i of a problem's list argument (mrope_section[0]).",
    )

    @property
    def types(self) -> list[ScalarType]:
        """The accepted types, as a list."""
        return list(self.type) if isinstance(self.type, list) else [self.type]


def _arg_kind(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("kind") or ("tensor" if "shape" in value else "scalar"))
    return str(getattr(value, "kind", "scalar"))


LauncherArg = Annotated[
    Annotated[TensorArgSpec, Tag("tensor")] | Annotated[ScalarArgSpec, Tag("scalar")],
    Discriminator(_arg_kind),
]


class OutputSpec(_Strict):
    """One tensor the launcher returns."""

    name: str | None = Field(default=None, description="What it is (documentation).")
    shape: list[DimToken] | None = Field(
        default=None, description="Symbolic shape over the inputs' symbols and scalars."
    )
    dtype: str | None = Field(
        default=None,
        description="A DType name, or the name of a tensor parameter whose dtype it has.",
    )
    alias: str | None = Field(
        default=None,
        description="The output is this tensor parameter itself, updated in place.",
    )
    requires: str | None = Field(
        default=None,
        description="Returned only when this optional tensor parameter is given (else None).",
    )

    @field_validator("shape")
    @classmethod
    def _valid_shape(cls, value: list[DimToken] | None) -> list[DimToken] | None:
        return None if value is None else _check_shape(value)

    @model_validator(mode="after")
    def _alias_or_shape(self) -> OutputSpec:
        if self.alias is None and (self.shape is None or self.dtype is None):
            raise ValueError("give 'shape' and 'dtype', or 'alias' (an in-place output)")
        if self.alias is not None and (self.shape is not None or self.dtype is not None):
            raise ValueError("an 'alias' output takes its shape and dtype from that parameter")
        return self


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


#: Names the generated problem's ``_make_inputs`` uses itself; a shape key may not take them.
PROBLEM_RESERVED_KEYS = frozenset({"dtype", "device"})


class KernelProblem(_Strict):
    """The kernel's own-reference problem: its ``reference()`` scored on these smoke cases.

    ``aka.kb.kernel_problem`` turns it into an op.yaml problem: ``Model.forward`` calls the file's
    ``reference``, ``_make_inputs`` calls its ``make_inputs(shape, dtype)``; the cases are
    ``shapes`` x ``dtypes``, all ``split: smoke`` (small, for the CPU interpreter).
    """

    shapes: list[dict[str, JsonValue]] = Field(
        min_length=1,
        max_length=3,
        description="Shape dicts for make_inputs(shape, ...), small enough for the interpreter "
        "(taken from the kernel's tests).",
    )
    dtypes: list[DType] = Field(
        default_factory=list,
        max_length=3,
        description="make_inputs' dtype per case; empty: its default (no dtype passed).",
    )
    atol: float | None = Field(
        default=None, ge=0, description="Tolerance override (the tests'); None: scorer table."
    )
    rtol: float | None = Field(
        default=None, ge=0, description="Tolerance override (the tests'); None: scorer table."
    )
    in_place: list[str] = Field(
        default_factory=list,
        description="reference() parameters it updates in place (compared after the call).",
    )
    allow_tf32: bool = Field(
        default=False,
        description="The kernel's fp32 path multiplies with tl.dot on TF32 tensor cores on the "
        "GPU (Triton's default; the interpreter multiplies exactly): the problem allows tf32, "
        "so fp32 outputs are judged with tf32's tolerance and those FLOPs priced at its rate.",
    )

    @field_validator("shapes")
    @classmethod
    def _valid_shapes(cls, value: list[dict[str, JsonValue]]) -> list[dict[str, JsonValue]]:
        for i, shape in enumerate(value):
            bad = sorted(k for k in shape if not k.isidentifier() or k in PROBLEM_RESERVED_KEYS)
            if bad:
                raise ValueError(
                    f"shapes[{i}] has keys {bad}: keys must be identifiers other than "
                    f"{sorted(PROBLEM_RESERVED_KEYS)}"
                )
        keys = [tuple(sorted(s.items(), key=lambda kv: kv[0])) for s in value]
        if len({repr(k) for k in keys}) != len(keys):
            raise ValueError("shapes repeat; give each shape once")
        return value

    @field_validator("dtypes")
    @classmethod
    def _unique_dtypes(cls, value: list[DType]) -> list[DType]:
        if len(set(value)) != len(value):
            raise ValueError(f"dtypes repeat: {[d.value for d in value]}")
        return value


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
    args: dict[str, LauncherArg] = Field(
        default_factory=dict,
        description="The launcher's non-tuning parameters, in order: tensors with symbolic "
        "shapes, or scalars. The adapter maps a problem's inputs onto them.",
    )
    returns: list[OutputSpec] = Field(
        default_factory=list,
        description="What the launcher returns: one entry = one tensor; several = a tuple.",
    )
    dims: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Symbol -> names of problem scalars that give its size, e.g. "
        "{D: [head_dim, head_size]} when a problem passes q flattened as (T, H*D).",
    )
    problem: KernelProblem | None = Field(
        default=None,
        description="Smoke cases of the kernel's own-reference problem (aka.kb.kernel_problem): "
        "shapes for make_inputs, dtypes, optional atol/rtol and in_place.",
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

    @model_validator(mode="after")
    def _contract_consistent(self) -> KernelMeta:
        tensors = {k for k, v in self.args.items() if isinstance(v, TensorArgSpec)}
        scalars = {k for k, v in self.args.items() if isinstance(v, ScalarArgSpec)}
        both = sorted(set(self.args) & set(self.tuning))
        if both:
            raise ValueError(f"{both} are both in 'args' and in 'tuning'; keep each in one")
        if self.returns and not self.args:
            raise ValueError("'returns' needs 'args' (the launcher's parameters)")
        symbols: set[str] = set()
        for name, spec in self.args.items():
            if isinstance(spec, TensorArgSpec):
                symbols |= dim_symbols(spec.shape)
                if spec.like is not None and spec.like not in tensors - {name}:
                    raise ValueError(f"args.{name}.like: {spec.like!r} is not another tensor arg")
        names = symbols | scalars
        for i, out in enumerate(self.returns):
            if out.alias is not None and out.alias not in tensors:
                raise ValueError(f"returns[{i}].alias: {out.alias!r} is not a tensor arg")
            if out.requires is not None and out.requires not in tensors:
                raise ValueError(f"returns[{i}].requires: {out.requires!r} is not a tensor arg")
            if out.dtype is not None and out.dtype not in tensors | {d.value for d in DType}:
                raise ValueError(
                    f"returns[{i}].dtype: {out.dtype!r} is neither a DType nor a tensor arg"
                )
            unknown = dim_symbols(out.shape or []) - names
            if unknown:
                raise ValueError(
                    f"returns[{i}].shape names {sorted(unknown)}, which no input shape or scalar "
                    "arg defines"
                )
        stray = sorted(set(self.dims) - symbols)
        if stray:
            raise ValueError(f"dims {stray} appear in no tensor arg's shape")
        return self

    @property
    def adaptable(self) -> bool:
        """Whether the header declares a contract the agent's adapter can map problems onto."""
        return bool(self.args) and bool(self.returns)
