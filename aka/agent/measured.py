"""The scorer's evidence on reference kernels: which problems accept them, and their ``measured:``.

A reference kernel counts once the scorer accepts it on a problem (issue #7); the 60 most important
carry ``measured:`` entries (device, shape, dtype, time, SOL fraction) that the scorer wrote, never
a person. This module owns the three steps between them, all text-level on the kernel files:

- ``candidate_problems``: the problems a kernel is tried on: the same operator family, or a
  problem whose name the kernel's id contains (``fused_moe_token_loop`` on ``fused_moe``);
- ``measured_entries``: one entry per accepted, timed shape of an ``EvalResult`` (``shape_entries``
  is the loop, shared with the agent's report of its own kernel);
- ``write_measured``: replace the entries of one device in a kernel file's header, keeping the
  rest of the file byte for byte, and re-validate the header.

The sweep itself (adapt, score, write) is ``benchmarks/kb_acceptance.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from aka.bench.result import EvalResult, Verdict
from aka.core import SpecError
from aka.spec import KernelMeta, ProblemSpec, kernel_header

__all__ = ["candidate_problems", "measured_entries", "shape_entries", "write_measured"]

_MEASURED = re.compile(r"^measured:.*?(?=^\S|\Z)", re.MULTILINE | re.DOTALL)


def candidate_problems(meta: KernelMeta, problems: Iterable[ProblemSpec]) -> list[ProblemSpec]:
    """The problems worth adapting ``meta``'s kernel to, in the given order."""
    return [
        p
        for p in problems
        if (p.op_family is not None and p.op_family.value == meta.op_family.value)
        or p.name in meta.id
    ]


def measured_entries(
    result: EvalResult,
    dtype: str,
    *,
    date: str | None = None,
    dtypes: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One ``measured:`` entry per accepted shape the scorer timed (none for a CPU result).

    Shapes are named ``<problem>/<shape id>``: a kernel serves several problems.

    Args:
        result: The scorer's result for the adapted kernel on one problem.
        dtype: The problem's main input dtype (``bf16``...), recorded with each entry.
        date: ``YYYY-MM-DD``; default: the result's creation date.
        dtypes: Per shape id, a dtype that overrides ``dtype`` (a problem whose shapes run at
            several dtypes, such as a kernel's own problem).
    """
    if not result.accepted or not result.performance_measured:
        return []
    return shape_entries(
        result,
        device=result.manifest.device or "unknown GPU",
        dtype_of=lambda sid: (dtypes or {}).get(sid, dtype),
        shape_name=lambda sid: f"{result.manifest.problem_name}/{sid}",
        date=date,
    )


def shape_entries(
    result: EvalResult,
    *,
    device: str,
    dtype_of: Callable[[str], str],
    shape_name: Callable[[str], str] = str,
    date: str | None = None,
) -> list[dict[str, Any]]:
    """The entries of ``result``'s accepted, timed shapes (the caller checks it was timed)."""
    when = date or result.manifest.created_at[:10] or None
    entries: list[dict[str, Any]] = []
    for s in result.shapes:
        if s.verdict is not Verdict.ACCEPTED or s.latency_us is None or s.latency_us.median <= 0:
            continue
        entry: dict[str, Any] = {
            "device": device,
            "shape": shape_name(s.shape_id),
            "dtype": dtype_of(s.shape_id),
            "latency_us": round(s.latency_us.median, 4),
        }
        if s.sol_fraction is not None:
            entry["sol_fraction"] = round(min(max(s.sol_fraction, 0.0), 1.0), 4)
        if when:
            entry["date"] = when
        entries.append(entry)
    return entries


def write_measured(path: Path, entries: list[dict[str, Any]]) -> KernelMeta:
    """Put ``entries`` into the header of the kernel file at ``path``; return the new header.

    Entries already there for the same device and shape are replaced; others stay. Only the
    ``measured:`` block of the front matter changes.

    Raises:
        SpecError: The file has no valid header, or the new header would not validate.
    """
    text = path.read_text(encoding="utf-8")
    meta_dict, _ = kernel_header(text, source=str(path))
    old = KernelMeta.model_validate(meta_dict)
    keep = [
        e.model_dump(mode="json", exclude_none=True)
        for e in old.measured
        if (e.device, e.shape) not in {(n["device"], n["shape"]) for n in entries}
    ]
    merged = keep + entries
    block = "measured:" + (
        " []\n" if not merged else "\n" + "".join(f"  - {_flow(e)}\n" for e in merged)
    )
    start = text.index("---")
    end = text.index("\n---", start + 3)
    front = text[start:end]
    if not _MEASURED.search(front):
        new_front = front.rstrip("\n") + "\n" + block.rstrip("\n")
    else:
        new_front = _MEASURED.sub(lambda _: block, front, count=1).rstrip("\n")
    new_text = text[:start] + new_front + text[end:]
    meta_dict, _ = kernel_header(new_text, source=str(path))
    try:
        meta = KernelMeta.model_validate(meta_dict)
    except ValueError as err:
        raise SpecError(f"the measured entries do not validate: {err}", file=str(path)) from err
    path.write_text(new_text, encoding="utf-8")
    return meta


def _flow(entry: dict[str, Any]) -> str:
    """One entry as a YAML flow mapping on one line."""
    return yaml.safe_dump(entry, default_flow_style=True, sort_keys=False, width=1000).strip()
