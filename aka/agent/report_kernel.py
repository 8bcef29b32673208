"""``kernel.py``: the incumbent's source with a KernelMeta header, and the dtypes it names.

Owns dtype inference (``normalize_dtype``, ``problem_dtypes``: read from the problem with ``ast``,
nothing runs), splitting a candidate's old module docstring from its code, assembling the header
fields from the record (arch from the device's datasheet entry, bound, techniques, ``measured:``)
and writing the header back as a docstring that reads back as ``KernelMeta``.
"""

from __future__ import annotations

import ast
import logging
import re
import textwrap
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from aka.agent.records import CandidateRecord, RunRecord
from aka.agent.report_data import (
    _ANCHOR_IDS,
    _final_shapes,
    _finals,
    _incumbent,
    _measured,
    _pct,
    _plural,
)
from aka.bench import ShapeResult
from aka.core.errors import AgentError, SpecError
from aka.core.pyparse import parse_module
from aka.hardware import match_profile
from aka.spec import (
    Arch,
    DType,
    KernelMeta,
    KernelSource,
    OpFamily,
    ProblemSpec,
    Vendor,
    kernel_header,
    load_problem,
    split_front_matter,
)

__all__ = ["build_kernel_file", "normalize_dtype", "problem_dtypes"]

logger = logging.getLogger(__name__)

_PROVENANCE = "Produced by aka run"
_BOUNDS = ("memory", "compute", "latency")
_COMPUTE_FAMILIES = {OpFamily.GEMM.value, OpFamily.ATTENTION.value, OpFamily.CONV.value}
_DTYPE_ALIASES: dict[str, DType] = {
    "bf16": DType.BF16,
    "bfloat16": DType.BF16,
    "fp16": DType.FP16,
    "float16": DType.FP16,
    "half": DType.FP16,
    "fp32": DType.FP32,
    "float32": DType.FP32,
    "float": DType.FP32,
    "fp64": DType.FP64,
    "float64": DType.FP64,
    "double": DType.FP64,
    "fp8_e4m3fn": DType.FP8_E4M3FN,
    "float8_e4m3fn": DType.FP8_E4M3FN,
    "fp8": DType.FP8_E4M3FN,
    "fp8_e5m2": DType.FP8_E5M2,
    "float8_e5m2": DType.FP8_E5M2,
    "int64": DType.INT64,
    "long": DType.INT64,
    "int32": DType.INT32,
    "int": DType.INT32,
    "int16": DType.INT16,
    "short": DType.INT16,
    "int8": DType.INT8,
    "uint8": DType.UINT8,
    "bool": DType.BOOL,
}
_TORCH_DTYPE = re.compile(r"\btorch\.(bfloat16|float16|half|float32|float64|float8_\w+|u?int8)\b")
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=]")


def normalize_dtype(name: str) -> DType | None:
    """Map a dtype spelling (``bf16``, ``bfloat16``, ``torch.bfloat16``) to ``DType``; else None."""
    key = name.strip().lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(key)


def _expr_dtype(node: ast.expr | None) -> DType | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return normalize_dtype(node.value)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return normalize_dtype(node.attr) if node.value.id == "torch" else None
    return None


def _find_function(code: str, name: str) -> ast.FunctionDef | None:
    """The top-level function ``name`` in ``code``; None when absent or ``code`` does not parse."""
    try:
        tree = parse_module(code)
    except SyntaxError:
        return None
    return next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name),
        None,
    )


def _parameter_dtype(fn: ast.FunctionDef) -> DType | None:
    """The default of ``fn``'s ``dtype`` parameter, if it names a dtype."""
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    pairs = list(zip(positional, defaults, strict=True))
    pairs += list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
    for arg, default in pairs:
        if arg.arg == "dtype":
            found = _expr_dtype(default)
            if found is not None:
                return found
    return None


def _body_dtype(fn: ast.FunctionDef) -> DType | None:
    """The dtype ``fn``'s body casts to, preferring a narrow float over fp32."""
    seen: list[DType] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.keyword) and node.arg == "dtype":
            found = _expr_dtype(node.value)
            if found is not None:
                seen.append(found)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            found = normalize_dtype(node.func.attr) if node.func.attr in _DTYPE_ALIASES else None
            if found in (DType.BF16, DType.FP16, DType.FP64):
                seen.append(found)
    narrow = [d for d in seen if d is not DType.FP32]
    return narrow[0] if narrow else (seen[0] if seen else None)


def _function_dtype(code: str, name: str) -> DType | None:
    """The dtype an input function produces by default, read from its source with ``ast``.

    A ``dtype`` parameter's default wins; otherwise the ``dtype=`` keywords and ``.half()`` style
    casts in its body, preferring a narrow float (fp32 there is often only the generator's type).
    """
    fn = _find_function(code, name)
    if fn is None:
        return None
    found = _parameter_dtype(fn)
    return found if found is not None else _body_dtype(fn)


def problem_dtypes(problem: ProblemSpec) -> dict[str, str]:
    """Return shape id -> input dtype name for every shape of ``problem``.

    A shape's ``input_kwargs['dtype']`` wins; otherwise the input function's default (read with
    ``ast``, nothing runs); otherwise fp32, torch's default. Shapes whose dtype cannot be named
    are left out.
    """
    code = problem.inputs_code or problem.reference_code
    default = _function_dtype(code, problem.input_fn) or DType.FP32
    out: dict[str, str] = {}
    for shape in problem.shapes:
        given = shape.input_kwargs.get("dtype")
        found = normalize_dtype(given) if isinstance(given, str) else default
        if found is not None:
            out[shape.id] = found.value
    return out


def _record_problem_dtypes(record: RunRecord) -> dict[str, str]:
    """Shape dtypes from the record's problem file, if it is still the problem that ran."""
    path = Path(record.problem_path)
    if not path.exists():
        return {}
    try:
        problem = load_problem(path)
    except (SpecError, OSError) as err:
        logger.debug("cannot reload %s for dtypes: %s", path, err)
        return {}
    if problem.problem_hash() != record.problem_sha256:
        logger.debug("%s changed since run %s; dtypes not taken from it", path, record.run_id)
        return {}
    return problem_dtypes(problem)


def _snake_id(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    if not slug or not slug[0].isalpha():
        slug = f"k_{slug}".rstrip("_")
    return slug


def _parse_kernel(source: str) -> ast.Module:
    try:
        return parse_module(source)
    except SyntaxError as err:
        raise AgentError(
            f"kernel source does not parse (line {err.lineno}: {err.msg}); only a candidate the "
            "scorer accepted can become kernel.py"
        ) from err


def _leading_lines(lines: list[str]) -> int:
    """How many of the first lines are a shebang or an encoding line (they must stay first)."""
    keep = 0
    while keep < min(2, len(lines)) and (
        lines[keep].startswith("#!") or _CODING.match(lines[keep])
    ):
        keep += 1
    return keep


def _split_docstring(source: str) -> tuple[dict[str, Any], str, str, str]:
    """Split a candidate into (old front matter, old prose, text before, code after docstring)."""
    tree = _parse_kernel(source)
    lines = source.splitlines(keepends=True)
    first = tree.body[0] if tree.body else None
    if not (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        keep = _leading_lines(lines)
        return {}, "", "".join(lines[:keep]), "".join(lines[keep:])
    doc = first.value.value
    end_line = (first.end_lineno or first.lineno) - 1
    end_col = first.end_col_offset or 0
    before = "".join(lines[: first.lineno - 1])
    rest_of_line = lines[end_line].encode("utf-8")[end_col:].decode("utf-8").lstrip(" \t;")
    after = rest_of_line + "".join(lines[end_line + 1 :])
    try:
        old, prose = split_front_matter(doc, source="kernel source")
    except SpecError:
        old, prose = {}, doc.strip()
    return old, prose.strip(), before, after


def _member(value: object, vocab: type[StrEnum]) -> str | None:
    """Return ``value`` if it is one of ``vocab``'s values (text from a header is untrusted)."""
    return value if isinstance(value, str) and value in {m.value for m in vocab} else None


def _most_common(values: list[tuple[str, float]]) -> str | None:
    totals: dict[str, float] = {}
    for value, weight in values:
        totals[value] = totals.get(value, 0.0) + weight
    return max(totals, key=lambda v: totals[v]) if totals else None


def _header_dtypes(
    shapes: list[ShapeResult], source: str, old: dict[str, Any], dtype_map: Mapping[str, str]
) -> tuple[dict[str, str], list[str], str]:
    """Return (shape id -> dtype, the header's dtypes, the dtype of a shape the map lacks).

    The evaluated shapes' dtypes win, then every shape's in the map, then the old header's, then
    the ``torch.<dtype>`` names in the source, then fp32 (torch's default: nothing says otherwise).
    """
    by_shape = {k: d.value for k, v in dtype_map.items() if (d := normalize_dtype(v))}
    evaluated = [by_shape[s.shape_id] for s in shapes if s.shape_id in by_shape]
    known = evaluated or list(by_shape.values())
    dtypes = sorted(set(known))
    old_dtypes = old.get("dtypes")
    if not dtypes and isinstance(old_dtypes, list):
        named = [normalize_dtype(str(d)) for d in old_dtypes]
        dtypes = [d.value for d in named if d is not None] if all(named) else []
    if not dtypes:
        dtypes = sorted(
            {d.value for m in _TORCH_DTYPE.findall(source) if (d := normalize_dtype(m))}
        )
    dtypes = dtypes or [DType.FP32.value]
    fallback = _most_common([(d, 1.0) for d in known]) or dtypes[0]
    return by_shape, dtypes, fallback


def _measured_entries(
    record: RunRecord, dtypes_by_shape: Mapping[str, str], fallback_dtype: str
) -> list[dict[str, Any]]:
    """One ``measured:`` entry per accepted, timed shape of the final evaluations (GPU only)."""
    from aka.agent.measured import shape_entries

    measured: list[dict[str, Any]] = []
    for _, result in _finals(record):
        if result.performance_measured:
            measured += shape_entries(
                result,
                device=result.manifest.device or record.device or "unknown GPU",
                dtype_of=lambda sid: dtypes_by_shape.get(sid, fallback_dtype),
            )
    return measured


def _header_target(record: RunRecord, old: dict[str, Any]) -> tuple[str, str, list[str]]:
    """Return (op family, vendor, arch): the record's, else the old header's, else defaults."""
    op_family = _member(record.op_family, OpFamily) or _member(old.get("op_family"), OpFamily)
    op_family = op_family or OpFamily.OTHER.value
    profile = match_profile(record.device) if record.device else None
    vendor = profile.vendor.value if profile else _member(old.get("vendor"), Vendor)
    vendor = vendor or Vendor.NVIDIA.value
    arch = [a] if profile and (a := _member(profile.arch, Arch)) else []
    old_arch = old.get("arch")
    if not arch and isinstance(old_arch, list):
        named = [_member(a, Arch) for a in old_arch]
        arch = [a for a in named if a] if all(named) else []
    return op_family, vendor, arch or [Arch.ANY.value]


def _header_bound(
    shapes: list[ShapeResult],
    incumbent: CandidateRecord | None,
    old: dict[str, Any],
    op_family: str,
) -> str:
    """The final shapes' weighted majority bound, else the incumbent's, the old one, a default."""
    bound = _most_common([(s.bound, s.weight) for s in shapes if s.bound])
    if bound is None and incumbent is not None:
        bound = _most_common([(s.bound, 1.0) for s in incumbent.shapes if s.bound in _BOUNDS])
    if bound is None and old.get("bound") in _BOUNDS:
        bound = str(old["bound"])
    if bound is None:
        bound = "compute" if op_family in _COMPUTE_FAMILIES else "memory"
    return bound


def _header_techniques(old: dict[str, Any], family: str | None) -> list[str]:
    """The old header's techniques plus the incumbent's design family (anchors left out)."""
    techniques = [str(t) for t in old.get("techniques", []) or [] if isinstance(t, str)]
    if family and family not in _ANCHOR_IDS:
        tech = family.replace("_", "-")
        if tech not in techniques:
            techniques.append(tech)
    return techniques


def _header_title(record: RunRecord, cid: str, family: str | None) -> str:
    title = f"{record.problem_name} candidate {cid}"
    if family:
        title += f" ({family})"
    title += f", aka run {record.run_id}"
    return title[:119] + "…" if len(title) > 120 else title


def _old_source(old: dict[str, Any]) -> dict[str, Any] | None:
    """The old header's ``source:`` if it validates as ``KernelSource``; else None."""
    if not isinstance(old.get("source"), dict):
        return None
    try:
        return KernelSource.model_validate(old["source"]).model_dump(exclude_none=True)
    except ValidationError:
        logger.debug("dropping the old header's invalid source: %r", old["source"])
        return None


def _header(
    record: RunRecord,
    source: str,
    old: dict[str, Any],
    dtype_map: Mapping[str, str],
) -> dict[str, Any]:
    """Assemble the KernelMeta fields, in the order a person reads them."""
    incumbent = _incumbent(record)
    cid = record.incumbent_id or "kernel"
    family = incumbent.family if incumbent else None
    shapes = _final_shapes(record)
    op_family, vendor, arch = _header_target(record, old)
    dtypes_by_shape, dtypes, fallback_dtype = _header_dtypes(shapes, source, old, dtype_map)
    header: dict[str, Any] = {
        "id": _snake_id(f"{record.problem_name}_{cid}"),
        "title": _header_title(record, cid, family),
        "op_family": op_family,
        "dsl": record.dsl,
        "vendor": vendor,
        "arch": arch,
        "dtypes": dtypes,
        "bound": _header_bound(shapes, incumbent, old, op_family),
        "techniques": _header_techniques(old, family),
        "status": "candidate",
    }
    old_source = _old_source(old)
    if old_source is not None:
        header["source"] = old_source
    header["launcher"] = "ModelNew"
    header["measured"] = _measured_entries(record, dtypes_by_shape, fallback_dtype)
    return header


def _provenance(record: RunRecord) -> str:
    incumbent = _incumbent(record)
    cid = record.incumbent_id or "kernel"
    text = f"{_PROVENANCE} {record.run_id} for {record.problem_name}: candidate {cid}"
    if incumbent is not None:
        text += f" of design {incumbent.family} ({incumbent.origin}), round {incumbent.round}"
        if incumbent.params:
            params = ", ".join(f"{k}={v}" for k, v in sorted(incumbent.params.items()))
            text += f", parameters {params}"
    text += "."
    tune = next((r for w, r in _finals(record) if w == "final_tune"), None)
    if _measured(record) and tune is not None and tune.score is not None:
        text += (
            f" On {record.device or 'the GPU'} it reaches {_pct(tune.score)} % SOL (geometric mean "
            f"over {_plural(len(tune.shapes), 'tune shape')}); the measured entries above are per "
            "shape."
        )
    elif _measured(record):
        text += " The run recorded no final timing of it."
    else:
        text += " It was checked for correctness only; performance was not measured."
    return textwrap.fill(text, width=99)


def _docstring_literal(text: str) -> str:
    """Return a triple-quoted literal whose value is exactly ``text``."""
    escaped = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    escaped = escaped.replace("\r", "\\r").replace("\x00", "\\x00")
    if escaped.endswith('"'):
        escaped = escaped[:-1] + '\\"'
    return f'"""{escaped}"""'


def build_kernel_file(
    record: RunRecord, source: str, *, dtypes: Mapping[str, str] | None = None
) -> str:
    """Return the incumbent's source with a KernelMeta header as its module docstring.

    The header has ``status: candidate`` and ``launcher: ModelNew``; id, title, op family, DSL,
    arch (from the device's datasheet entry), dtypes, bound (the weighted majority of the final
    shapes' bounds) and techniques come from the record, and ``measured:`` holds one entry per
    accepted shape of the final GPU evaluations (none on the CPU). An existing module docstring is
    replaced; its prose (after any front matter), its techniques and its ``source:`` are kept, and
    a line on where the kernel came from is added.

    Args:
        record: The finished run.
        source: The incumbent's file.
        dtypes: Shape id -> dtype name (``problem_dtypes(problem)``). When None, they are read
            from ``record.problem_path`` if that file still hashes to ``record.problem_sha256``,
            else from the source's ``torch.<dtype>`` names, else fp32.

    Returns:
        The file text; it parses and its header validates as ``KernelMeta``.

    Raises:
        AgentError: ``source`` does not parse.
    """
    old, prose, before, after = _split_docstring(source)
    dtype_map = dict(dtypes) if dtypes is not None else _record_problem_dtypes(record)
    header = _header(record, source, old, dtype_map)
    KernelMeta.model_validate(header)  # our own output: a failure here is a bug, not bad input
    front = yaml.safe_dump(
        header, sort_keys=False, default_flow_style=None, width=10_000, allow_unicode=True
    )
    kept = "\n\n".join(
        p for p in re.split(r"\n\s*\n", prose) if p.strip() and not p.startswith(_PROVENANCE)
    )
    body = (kept + "\n\n" if kept else "") + _provenance(record)
    doc = _docstring_literal(f"\n---\n{front}---\n{body}\n")
    text = f"{before}{doc}\n"
    if after.strip():
        text += "\n" + after.lstrip("\n")
    try:
        kernel_header(text, source="kernel.py")
    except SpecError as err:  # pragma: no cover - guards the escaping above
        raise AgentError(f"generated kernel.py header does not read back: {err}") from err
    return text
