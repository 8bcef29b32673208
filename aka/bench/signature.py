"""The input signature of a problem: what its reference is called with and what it returns.

Owns ``InputSignature`` (the agent's adapter maps reference kernels onto it), the worker role
``signature`` (``describe_reference`` builds the reference ``Model`` for one shape, draws its
inputs, calls it once and records names, kinds, shapes, dtypes and scalar values) and its parent
side (``signature_from_worker``, behind ``Scorer.input_signature``). Problem code only ever runs in
a scorer worker; the parent receives facts, never tensors. torch is imported inside the
worker-side functions only.
"""

from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aka.core import SpecError
from aka.spec import TORCH_DTYPE_NAMES, ProblemSpec, ShapeCase, Split

if TYPE_CHECKING:
    from pathlib import Path

    from aka.bench.pipeline import Scorer
    from aka.bench.problem_runtime import ProblemRuntime

__all__ = [
    "ArgInfo",
    "InputSignature",
    "TensorInfo",
    "describe_reference",
    "dtype_name",
    "run_signature_worker",
    "signature_from_worker",
]

ScalarValue = int | float | bool | str | None
#: A list or tuple of plain scalars (``mrope_section=[16, 24, 24]``), kept as a list.
SequenceValue = list[int | float | bool | str]
ArgKind = Literal["tensor", "scalar", "sequence", "none", "other"]

#: torch dtype (as ``str(dtype)`` without ``torch.``) -> the short names of ``aka.spec.DType``.
_DTYPE_NAMES = {torch_name: dtype.value for dtype, torch_name in TORCH_DTYPE_NAMES.items()}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TensorInfo(_Model):
    """One tensor: a model parameter/buffer or a reference output."""

    name: str = Field(description="State-dict key, or output key ('0', '1', ... for tuples).")
    shape: list[int]
    dtype: str = Field(description="Short dtype name (bf16, fp32, fp8_e4m3fn, int64, ...).")
    kind: Literal["parameter", "buffer", "output"] = "output"


class ArgInfo(_Model):
    """One argument of ``forward`` or one parameter of ``Model.__init__``."""

    name: str
    kind: ArgKind = Field(
        description="tensor, scalar (int/float/bool/str), sequence (a list or tuple of "
        "scalars), none, or other."
    )
    shape: list[int] | None = Field(default=None, description="Tensors: the shape.")
    dtype: str | None = Field(default=None, description="Tensors: short dtype name.")
    stride: list[int] | None = Field(default=None, description="Tensors: strides in elements.")
    value: ScalarValue | SequenceValue = Field(
        default=None, description="Scalars: the value; sequences: the items, as a list."
    )
    type_name: str = Field(default="", description="Python type of the value.")
    provided: bool = Field(
        default=True, description="False when the value is the signature's default."
    )
    has_default: bool = Field(default=False, description="The parameter has a default value.")


class InputSignature(_Model):
    """How a problem's reference is called for one shape, as the agent's adapter needs it."""

    problem_name: str
    shape_id: str = Field(description="The shape the facts were taken from.")
    device: str = Field(description="Where the reference ran (cpu or cuda).")
    forward_args: list[ArgInfo] = Field(description="forward's parameters, in order.")
    init_args: list[ArgInfo] = Field(
        description="Model.__init__'s parameters, in order, with the values the model was built "
        "with (the model's attribute of the same name when it has one)."
    )
    forward_params_text: str = Field(
        description="forward's parameter list as source, without annotations: 'self, x, weight'."
    )
    init_params_text: str = Field(
        description="__init__'s parameter list as source, without annotations: 'self, eps=1e-06'."
    )
    parameters: list[TensorInfo] = Field(
        default_factory=list, description="The model's state_dict entries (weights, buffers)."
    )
    output_kind: Literal["tensor", "tuple", "dict"]
    outputs: list[TensorInfo] = Field(description="The reference outputs, in order.")
    in_place: list[str] = Field(
        default_factory=list,
        description="The problem's in_place inputs: those its operator legitimately updates.",
    )

    def forward_arg(self, name: str) -> ArgInfo | None:
        """Return forward's argument called ``name``, if any."""
        return next((a for a in self.forward_args if a.name == name), None)


def dtype_name(dtype: Any) -> str:
    """Return the short name of a torch dtype (``torch.bfloat16`` -> ``bf16``)."""
    text = str(dtype).removeprefix("torch.")
    return _DTYPE_NAMES.get(text, text)


def _is_plain_scalar(value: Any) -> bool:
    return isinstance(value, bool | int | str) or (
        isinstance(value, float) and math.isfinite(value)
    )


def _is_plain_sequence(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(_is_plain_scalar(v) for v in value)


def _describe_value(name: str, value: Any, *, provided: bool, has_default: bool) -> ArgInfo:
    import torch

    common: dict[str, Any] = {
        "name": name,
        "type_name": type(value).__name__,
        "provided": provided,
        "has_default": has_default,
    }
    if isinstance(value, torch.Tensor):
        return ArgInfo(
            kind="tensor",
            shape=list(value.shape),
            dtype=dtype_name(value.dtype),
            stride=list(value.stride()),
            **common,
        )
    if value is None:
        return ArgInfo(kind="none", **common)
    if _is_plain_scalar(value):
        return ArgInfo(kind="scalar", value=value, **common)
    if _is_plain_sequence(value):  # section sizes, strides: the adapter may pass or index them
        return ArgInfo(kind="sequence", value=list(value), **common)
    return ArgInfo(kind="other", **common)


def _params_text(fn: Any) -> str:
    """The parameter list of ``fn`` as source, annotations dropped (defaults kept as repr)."""
    sig = inspect.signature(fn)
    plain = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    return str(sig.replace(parameters=plain, return_annotation=inspect.Signature.empty))[1:-1]


def _init_args(rt: ProblemRuntime, model: Any, shape: dict[str, Any]) -> list[ArgInfo]:
    cls = rt.reference.Model
    params = [p for p in inspect.signature(cls.__init__).parameters.values()][1:]
    if rt.kernelbench:
        positional = list(rt.reference.get_init_inputs())
        given = {p.name: v for p, v in zip(params, positional, strict=False)}
    else:
        given = dict(shape.get("init_kwargs") or {})
    out = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        has_default = p.default is not p.empty
        value = given.get(p.name, p.default if has_default else None)
        attr = getattr(model, p.name, None)
        if isinstance(attr, bool | int | float | str) or _is_plain_sequence(attr):
            value = attr  # what the model really kept (it may have normalised the argument)
        out.append(
            _describe_value(p.name, value, provided=p.name in given, has_default=has_default)
        )
    return out


def _forward_args(model: Any, named: dict[str, Any]) -> list[ArgInfo]:
    out = []
    for p in inspect.signature(model.forward).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        has_default = p.default is not p.empty
        provided = p.name in named
        value = named[p.name] if provided else (p.default if has_default else None)
        out.append(_describe_value(p.name, value, provided=provided, has_default=has_default))
    return out


def _state(model: Any) -> list[TensorInfo]:
    if not hasattr(model, "state_dict"):
        return []
    param_names = {n for n, _ in model.named_parameters()}
    return [
        TensorInfo(
            name=name,
            shape=list(t.shape),
            dtype=dtype_name(t.dtype),
            kind="parameter" if name in param_names else "buffer",
        )
        for name, t in model.state_dict().items()
    ]


def describe_reference(rt: ProblemRuntime, shape: dict[str, Any], seed: int) -> dict[str, Any]:
    """Build the reference for ``shape``, call it once and describe the call (worker side).

    Args:
        rt: The problem loaded in the worker.
        shape: One shape case (JSON).
        seed: The seed inputs and weights are drawn under.

    Returns:
        An ``InputSignature`` as JSON.
    """
    import torch

    from aka.bench.problem_runtime import flatten_outputs, named_inputs

    model = rt.build_model(rt.reference.Model, shape, seed)
    args, kwargs = rt.make_inputs(shape, seed)
    named = named_inputs(args, kwargs, rt.problem["forward_params"])
    with torch.no_grad():
        out = model(*args, **kwargs)
    structure, tensors = flatten_outputs(out)
    signature = InputSignature(
        problem_name=str(rt.problem["name"]),
        shape_id=str(shape["id"]),
        device=rt.device,
        forward_args=_forward_args(model, named),
        init_args=_init_args(rt, model, shape),
        forward_params_text=_params_text(type(model).forward),
        init_params_text=_params_text(type(model).__init__),
        parameters=_state(model),
        output_kind=structure["kind"],
        outputs=[
            TensorInfo(name=k, shape=list(t.shape), dtype=dtype_name(t.dtype))
            for k, t in tensors.items()
        ],
        in_place=list(rt.problem.get("in_place") or []),
    )
    return signature.model_dump(mode="json")


def run_signature_worker(
    task: dict[str, Any], rt: ProblemRuntime, ev: Any, workdir: Path
) -> dict[str, Any]:
    """The worker role ``signature``: describe the reference's call on the task's first shape."""
    shape = task["shapes"][0]
    ev.emit("signature", shape_id=shape["id"], done=0, total=1)
    return {"ok": True, "signature": describe_reference(rt, shape, int(task["seeds"][0]))}


def _pick_shape(scorer: Scorer, problem: ProblemSpec, shape_id: str | None) -> ShapeCase:
    chosen, _ = scorer.select_shapes(problem, [shape_id] if shape_id else None)
    if not chosen:
        raise SpecError(
            f"problem '{problem.name}' has no shape to describe; add shape cases",
            file=problem.source_path,
            field="shapes",
        )
    if shape_id is None and not scorer.cpu:
        tune = [s for s in chosen if s.split is Split.TUNE]
        return (tune or chosen)[0]
    return chosen[0]


def signature_from_worker(
    scorer: Scorer, problem: ProblemSpec, shape_id: str | None = None
) -> InputSignature:
    """Run the ``signature`` role in a fresh reference worker and parse its answer (parent side).

    Raises:
        SpecError: An unknown shape id, or no shape to run.
        BaselineError: The reference fails to build, draw inputs or run.
        SandboxError: The worker could not be started.
    """
    shape = _pick_shape(scorer, problem, shape_id)
    task = scorer._task("signature", problem, [shape])
    what = f"the reference of '{problem.name}', describing shape '{shape.id}',"
    with scorer.trusted_worker(task, what, None, 1) as (result, _):
        return InputSignature.model_validate(result["signature"])
