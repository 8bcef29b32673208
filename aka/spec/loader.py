"""Load problems in every format into a ``ProblemSpec`` (ARCHITECTURE.md §2).

Formats: a directory with ``reference.py`` + ``shapes.json`` is Atrex-Bench; ``*.yaml``/``*.yml``
is op.yaml v1; any other ``*.py`` is KernelBench. Owns detection, file reading and every
consistency check that can be made from the text alone (``ast``). Never imports problem code.
Every problem found is reported at once, each with file, field and fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from aka.core.errors import SpecError
from aka.spec.expr import evaluate_quantity
from aka.spec.holdout import holdout_rule_errors
from aka.spec.problem import OpYamlSpec, ProblemSpec, ShapeCase
from aka.spec.pysource import Signature, SourceFacts, read_source_facts
from aka.spec.vocab import Phase, ProblemFormat, Split

__all__ = ["detect_format", "load_problem", "parse_op_yaml_text"]

_INPUT_FNS = ("_make_inputs", "make_inputs")


def detect_format(path: Path) -> ProblemFormat:
    """Tell the format of ``path`` from its shape on disk.

    Raises:
        SpecError: ``path`` does not exist or matches no format.
    """
    if not path.exists():
        raise SpecError("no such file or directory; check the path", file=str(path))
    if path.is_dir():
        if (path / "reference.py").is_file() and (path / "shapes.json").is_file():
            return ProblemFormat.ATREX
        raise SpecError(
            "a problem directory needs reference.py and shapes.json (Atrex-Bench layout)",
            file=str(path),
        )
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return ProblemFormat.OP_YAML
    if suffix == ".py":
        return ProblemFormat.KERNELBENCH
    raise SpecError(
        "unknown problem format: use an op.yaml (*.yaml), a KernelBench *.py, or an Atrex-Bench "
        "directory, or pass --format",
        file=str(path),
    )


def load_problem(path: str | Path, format: ProblemFormat | str | None = None) -> ProblemSpec:
    """Load and validate a problem.

    Args:
        path: An op.yaml file, a KernelBench ``.py`` file or an Atrex-Bench directory.
        format: Force a format instead of detecting it.

    Returns:
        The self-contained problem (code carried as text).

    Raises:
        SpecError: Anything is missing or inconsistent; the message names file, field and fix.
    """
    p = Path(path)
    fmt = _parse_format(format, p) if format is not None else detect_format(p)
    if not p.exists():
        raise SpecError("no such file or directory; check the path", file=str(p))
    if fmt is ProblemFormat.OP_YAML:
        return parse_op_yaml_text(_read_text(p), base_dir=p.parent, source=str(p))
    if fmt is ProblemFormat.ATREX:
        return _load_atrex(p)
    return _load_kernelbench(p)


def _parse_format(format: ProblemFormat | str, path: Path) -> ProblemFormat:
    try:
        return ProblemFormat(format)
    except ValueError as err:
        choices = ", ".join(f.value for f in ProblemFormat)
        raise SpecError(
            f"unknown format {format!r}; use one of {choices}", file=str(path), field="--format"
        ) from err


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"cannot read: {err}", file=str(path)) from err


def _validation_lines(err: ValidationError, raw: Any = None) -> list[str]:
    """One line per pydantic error: the field, what is wrong, the value and the fix."""
    lines = []
    for e in err.errors():
        field = f"field '{'.'.join(str(p) for p in e['loc']) or '<top>'}'"
        field += _shape_label(raw, e["loc"])
        if e["type"] == "extra_forbidden":
            fix = "remove it or check its spelling against docs/op-yaml.md"
            lines.append(f"{field}: unknown key; {fix}")
        elif e["type"] == "missing":
            lines.append(f"{field}: required; add it (see docs/op-yaml.md)")
        else:
            lines.append(
                f"{field}: {e['msg']} (got {e.get('input')!r:.60}); "
                "fix the value (see docs/op-yaml.md)"
            )
    return lines


def _shape_label(raw: Any, loc: tuple[int | str, ...]) -> str:
    """Name the shape an error is in (``shapes.cases.3`` says little in a long list)."""
    if not (isinstance(raw, dict) and len(loc) >= 3 and loc[:2] == ("shapes", "cases")):
        return ""
    cases, index = (raw.get("shapes") or {}).get("cases"), loc[2]
    if isinstance(cases, list) and isinstance(index, int) and index < len(cases):
        case = cases[index]
        if isinstance(case, dict) and "id" in case:
            return f" (shape {case['id']!r})"
    return ""


def parse_op_yaml_text(text: str, *, base_dir: Path | None, source: str) -> ProblemSpec:
    """Parse op.yaml v1 text (a file, or a self-contained body from the REST API).

    Args:
        text: The YAML.
        base_dir: Directory that relative ``path`` entries resolve against; None forbids paths.
        source: Name used in error messages.

    Raises:
        SpecError: The YAML is invalid or inconsistent.
    """
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SpecError(
            f"not valid YAML: {_yaml_problem(err)}; fix the syntax", file=source
        ) from err
    if not isinstance(raw, dict):
        raise SpecError(
            "top level must be a mapping with 'name', 'reference', 'shapes'; "
            f"got {type(raw).__name__}",
            file=source,
        )
    try:
        spec = OpYamlSpec.model_validate(raw)
    except ValidationError as err:
        raise SpecError("; ".join(_validation_lines(err, raw)), file=source) from err

    origins: dict[str, _Origin] = {}
    reference_code, origins["reference"] = _resolve_code(
        spec.reference.path, spec.reference.code, base_dir, source, "reference"
    )
    inputs_code = None
    if spec.inputs is not None:
        inputs_code, origins["inputs"] = _resolve_code(
            spec.inputs.path, spec.inputs.code, base_dir, source, "inputs"
        )
    library_code = None
    if spec.library is not None:
        library_code, origins["library"] = _resolve_code(
            spec.library.path, spec.library.code, base_dir, source, "library"
        )
    if spec.shapes.cases is not None:
        shapes = list(spec.shapes.cases)
    else:
        shapes_path = _resolve_path(spec.shapes.path or "", base_dir, source, "shapes.path")
        shapes = _read_shapes_file(shapes_path)
    guards = spec.model_dump(include=set(_GUARD_FIELDS))
    problem = ProblemSpec(
        name=spec.name,
        format=ProblemFormat.OP_YAML,
        source_path=source,
        op_family=spec.op_family,
        description=spec.description,
        reference_code=reference_code,
        inputs_code=inputs_code,
        library_code=library_code,
        input_fn="_make_inputs",
        shapes=shapes,
        **guards,
    )
    return _check_kwargs_problem(problem, source, origins)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """Say where and what in one line (PyYAML's own message spans several)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    if mark is None:
        return str(problem)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


_GUARD_FIELDS = (
    "dsl",
    "baselines",
    "dtype_policy",
    "tolerance",
    "roofline",
    "screen_allow",
    "engagement_min",
    "in_place",
    "fp8_scales",
    "holdout",
)


def _resolve_path(rel: str, base_dir: Path | None, source: str, field: str) -> Path:
    if base_dir is None:
        raise SpecError(
            "a self-contained spec cannot use 'path'; inline it as 'code'/'cases'",
            file=source,
            field=field,
        )
    path = (base_dir / rel).resolve()
    if not path.is_file():
        raise SpecError(
            f"file {rel!r} not found (looked at {path}); fix the path", file=source, field=field
        )
    return path


@dataclass(frozen=True)
class _Origin:
    """Where a piece of code came from, for error messages about it."""

    file: str
    field: str | None = None
    label: str = ""


def _resolve_code(
    rel: str | None, code: str | None, base_dir: Path | None, source: str, field: str
) -> tuple[str, _Origin]:
    if code is not None:
        return code, _Origin(source, f"{field}.code", " of the inline code")
    path = _resolve_path(rel or "", base_dir, source, f"{field}.path")
    return _read_text(path), _Origin(source, f"{field}.path", f" of {path}")


def _read_shapes_file(path: Path, defaults: dict[str, Any] | None = None) -> list[ShapeCase]:
    text = _read_text(path)
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise SpecError(f"cannot parse shapes: {err}; fix the JSON", file=str(path)) from err
    except yaml.YAMLError as err:
        raise SpecError(
            f"cannot parse shapes: {_yaml_problem(err)}; fix the YAML", file=str(path)
        ) from err
    return _shapes_from_raw(raw, str(path), defaults)


def _shapes_from_raw(
    raw: Any, source: str, defaults: dict[str, Any] | None = None
) -> list[ShapeCase]:
    """Accept ``{id: {init_kwargs, input_kwargs, ...}}`` (Atrex-Bench) or a list of cases."""
    if isinstance(raw, dict):
        items: list[Any] = [
            {"id": str(k), **v} if isinstance(v, dict) else v for k, v in raw.items()
        ]
        labels = [f"shape {str(k)!r}" for k in raw]
    elif isinstance(raw, list):
        items = raw
        labels = [
            f"shape #{i}"
            + (f" ({item['id']!r})" if isinstance(item, dict) and "id" in item else "")
            for i, item in enumerate(raw)
        ]
    else:
        raise SpecError(
            f"shapes must be a mapping id -> case or a list of cases; got {type(raw).__name__}",
            file=source,
        )
    cases: list[ShapeCase] = []
    errors: list[str] = []
    for label, item in zip(labels, items, strict=True):
        if not isinstance(item, dict):
            errors.append(
                f"{label}: must be a mapping with init_kwargs and input_kwargs, got {item!r:.40}"
            )
            continue
        try:
            cases.append(ShapeCase.model_validate({**(defaults or {}), **item}))
        except ValidationError as err:
            errors += [f"{label}: {line}" for line in _validation_lines(err)]
    if errors:
        raise SpecError("; ".join(errors), file=source)
    return cases


def _load_atrex(directory: Path) -> ProblemSpec:
    source = str(directory)
    reference_code = _read_text(directory / "reference.py")
    input_path = directory / "input.py"
    inputs_code = _read_text(input_path) if input_path.is_file() else None
    meta: Any = {}
    meta_path = directory / "metadata.json"
    if meta_path.is_file():
        try:
            meta = json.loads(_read_text(meta_path))
        except json.JSONDecodeError as err:
            raise SpecError(f"cannot parse: {err}; fix the JSON", file=str(meta_path)) from err
        if not isinstance(meta, dict):
            raise SpecError("must be a JSON object (with 'phase')", file=str(meta_path))
    phase = {"prefill": Phase.PREFILL, "decode": Phase.DECODE}.get(
        str(meta.get("phase")), Phase.MIXED
    )
    shapes = _read_shapes_file(directory / "shapes.json", {"phase": phase.value})
    problem = ProblemSpec(
        name=directory.name,
        format=ProblemFormat.ATREX,
        source_path=source,
        reference_code=reference_code,
        inputs_code=inputs_code,
        input_fn="_make_inputs",
        shapes=shapes,
    )
    origins = {
        "reference": _Origin(str(directory / "reference.py")),
        "inputs": _Origin(str(input_path)),
    }
    return _check_kwargs_problem(problem, source, origins)


def _facts(code: str, origin: _Origin) -> SourceFacts:
    try:
        return read_source_facts(code, filename=origin.file)
    except SyntaxError as err:
        raise SpecError(
            f"Python syntax error at line {err.lineno}{origin.label}: {err.msg}; fix the code",
            file=origin.file,
            field=origin.field,
        ) from err
    except ValueError as err:  # null bytes in the source (Python 3.11)
        raise SpecError(
            f"not Python source{origin.label}: {err}", file=origin.file, field=origin.field
        ) from err


def _model_methods(facts: SourceFacts, source: str, errors: list[str]) -> dict[str, Signature]:
    methods = facts.classes.get("Model")
    if methods is None:
        errors.append("reference: defines no 'class Model(torch.nn.Module)'; add it")
        return {}
    if "forward" not in methods:
        errors.append("reference: class Model has no forward(); add one")
    return methods


def _check_kwargs(
    kind: str,
    shape: ShapeCase,
    given: dict[str, Any],
    sig: Signature,
    fn_name: str,
    skip: tuple[str, ...] = (),
) -> list[str]:
    errs = [
        f"shapes[{shape.id}].{kind}: {fn_name} takes no parameter {k!r} "
        f"(it takes {list(sig.params)}); rename or remove it"
        for k in given
        if not sig.accepts(k)
    ]
    errs += [
        f"shapes[{shape.id}].{kind}: {fn_name} needs {r!r}; add it"
        for r in sig.required
        if r not in given and r not in skip
    ]
    return errs


def _check_kwargs_problem(
    problem: ProblemSpec, source: str, origins: dict[str, _Origin]
) -> ProblemSpec:
    """Validate a kwargs-style problem against its reference and input code."""
    errors: list[str] = []
    ref = _facts(problem.reference_code, origins["reference"])
    methods = _model_methods(ref, source, errors)
    # The worker imports the input function from the inputs code when there is one, else from
    # the reference; look where it will.
    fns = ref.functions
    where = "the reference"
    if problem.inputs_code is not None:
        fns = _facts(problem.inputs_code, origins["inputs"]).functions
        origin = origins["inputs"]
        where = "the inputs code" + (origin.label or f" of {origin.file}")
    input_fn = next((n for n in _INPUT_FNS if n in fns), None)
    if input_fn is None:
        errors.append(
            f"inputs: no _make_inputs(**input_kwargs) (or make_inputs) in {where}; "
            "define one returning a dict keyed by forward's parameters"
        )
    init_sig = methods.get("__init__", Signature((), (), False, False))
    seen: set[str] = set()
    for shape in problem.shapes:
        if shape.id in seen:
            errors.append(f"shapes: id {shape.id!r} appears twice; make ids unique")
        seen.add(shape.id)
        if input_fn is not None:
            errors += _check_kwargs(
                "input_kwargs", shape, shape.input_kwargs, fns[input_fn], input_fn, skip=("device",)
            )
        errors += _check_kwargs("init_kwargs", shape, shape.init_kwargs, init_sig, "Model.__init__")
    forward = methods.get("forward")
    errors += _check_common(problem, forward)
    errors += holdout_rule_errors(problem)
    if problem.library_code is not None:
        errors += _check_library(problem.library_code, origins["library"], source, forward)
    if not problem.shapes:
        errors.append("shapes: none given; add at least one case")
    if errors:
        raise SpecError("; ".join(errors), file=source)
    takes_device = (
        input_fn is not None
        and fns[input_fn].accepts("device")
        and not fns[input_fn].has_var_kwargs
    )
    return problem.model_copy(
        update={
            "input_fn": input_fn or "_make_inputs",
            "inputs_take_device": takes_device,
            "forward_params": list(forward.params) if forward else [],
            "init_params": list(init_sig.params),
        }
    )


def _check_library(code: str, origin: _Origin, source: str, forward: Signature | None) -> list[str]:
    """The library baseline must be a Model whose forward takes the reference's parameters."""
    errors: list[str] = []
    methods = _model_methods(_facts(code, origin), source, errors)
    errors = [e.replace("reference:", "library:", 1) for e in errors]
    mine = methods.get("forward")
    if mine is not None and forward is not None and list(mine.params) != list(forward.params):
        errors.append(
            f"library: Model.forward takes {list(mine.params)}, the reference's takes "
            f"{list(forward.params)}; give it the reference's parameters"
        )
    return errors


def _check_common(problem: ProblemSpec, forward: Signature | None) -> list[str]:
    errors: list[str] = []
    if forward is not None and not forward.has_var_kwargs:
        errors += [
            f"in_place: {name!r} is not a parameter of Model.forward {list(forward.params)}; "
            "name one of them or remove it"
            for name in problem.in_place
            if name not in forward.params
        ]
    ids = {s.id for s in problem.shapes}
    for i, override in enumerate(problem.roofline):
        for sid in override.shapes:
            if sid != "*" and sid not in ids:
                errors.append(
                    f"roofline[{i}].shapes: unknown shape id {sid!r}; use ids from shapes or '*'"
                )
        for shape in problem.shapes:
            if not override.applies_to(shape.id):
                continue
            names = {**shape.init_kwargs, **shape.input_kwargs}
            values = [
                override.bytes_read,
                override.bytes_written,
                *(override.flops_by_unit or {}).values(),
            ]
            for value in values:
                if value is None:
                    continue
                try:
                    evaluate_quantity(value, names)
                except (ValueError, ArithmeticError) as err:
                    errors.append(f"roofline[{i}] on shape {shape.id!r}: {err}")
    return errors


def _load_kernelbench(path: Path) -> ProblemSpec:
    source = str(path)
    code = _read_text(path)
    facts = _facts(code, _Origin(source))
    errors: list[str] = []
    methods = _model_methods(facts, source, errors)
    for fn in ("get_inputs", "get_init_inputs"):
        if fn not in facts.functions:
            errors.append(f"reference: KernelBench problems define {fn}(); add it")
    if errors:
        raise SpecError("; ".join(errors), file=source)
    forward = methods.get("forward")
    init_sig = methods.get("__init__", Signature((), (), False, False))
    return ProblemSpec(
        name=path.stem,
        format=ProblemFormat.KERNELBENCH,
        source_path=source,
        reference_code=code,
        input_fn="get_inputs",
        input_style="kernelbench",
        forward_params=list(forward.params) if forward else [],
        init_params=list(init_sig.params),
        shapes=[ShapeCase(id="default", split=Split.TUNE)],
    )
