"""Write a suite from a profile: the last step of ``aka trace import``.

Owns turning a ``TraceProfile`` into ``DIR/suite.yaml`` plus one self-contained problem directory
per covered operator: the built-in problem's code files and op.yaml fields, the imported shapes
(weighted by their share of the operator's time, phase from the problem's rule, split ``tune``)
and the built-in smoke shapes, so the suite also runs on a CPU. Work that maps to no problem is
listed in ``suite.yaml``'s ``uncovered`` with its share and reason. Reads and writes files; never
runs problem code.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from aka.bench.trace import TraceProfile, read_trace
from aka.bench.trace_map import OP_MAP, MappedShape, map_call
from aka.core.errors import SpecError
from aka.spec.suite import SuiteSpec, UncoveredOp, load_suite
from aka.spec.vocab import Phase, Split

__all__ = ["ImportedOperator", "TraceImportResult", "import_trace"]

#: Uncovered ops listed one by one: at most this many, each at least this share of the total.
MAX_UNCOVERED, MIN_UNCOVERED_SHARE = 50, 5e-4
_BASIS_WORDS = {"gpu": "GPU time", "cpu_self": "CPU self time"}


class ImportedOperator(BaseModel):
    """One operator of an imported suite, as the import summary reports it."""

    name: str
    weight: float = Field(description="Share of the covered time (weights sum to 1).")
    share: float = Field(description="Share of the profile's total time.")
    time_us: float
    calls: int
    phase: str
    shapes: int = Field(description="Imported (tune) shapes written.")
    phases: dict[str, int] = Field(description="Imported shapes per phase.")
    shapes_dropped: int = Field(description="Lighter shapes left out by --top.")
    smoke_shapes: int = Field(description="The built-in problem's smoke shapes, copied.")


class TraceImportResult(BaseModel):
    """What ``import_trace`` wrote and what the profile held."""

    directory: Path
    trace: str
    format: str
    basis: str = Field(description="gpu (GPU time) or cpu_self (CPU self time).")
    total_time_us: float
    covered_share: float
    operators: list[ImportedOperator]
    uncovered: list[UncoveredOp]


@dataclass
class _Shape:
    mapped: MappedShape
    time_us: float = 0.0
    calls: int = 0


@dataclass
class _Uncovered:
    time_us: float = 0.0
    calls: int = 0
    reasons: dict[str, float] = field(default_factory=dict)


def import_trace(
    trace: str | Path,
    out_dir: str | Path,
    *,
    suite: str = "atrex30",
    top: int = 32,
    force: bool = False,
) -> TraceImportResult:
    """Import a profile as a suite of ``suite``'s problems, written to ``out_dir``.

    Args:
        trace: A Chrome trace or key_averages JSON (see ``aka.spec.read_trace``).
        out_dir: The suite directory to write; it must be empty unless ``force``.
        suite: The built-in suite whose problems the ops map to.
        top: Keep the ``top`` heaviest shapes per operator.
        force: Write into a non-empty ``out_dir`` (files of the same name are replaced).

    Returns:
        The summary of what was written.

    Raises:
        SpecError: Bad arguments, a bad trace, an occupied ``out_dir``, or nothing to cover.
    """
    out = Path(out_dir)
    if top < 1:
        raise SpecError(f"--top must be at least 1, got {top}", field="--top")
    if out.exists() and not out.is_dir():
        raise SpecError("--out names a file, not a directory; choose a directory", file=str(out))
    if out.is_dir() and any(out.iterdir()) and not force:
        raise SpecError(
            "the output directory is not empty; choose a new --out or pass --force", file=str(out)
        )
    base = load_suite(suite)
    profile = read_trace(trace, OP_MAP.keys())
    covered, uncovered = _classify(profile, {op.name for op in base.operators}, base.name)
    if not covered:
        heaviest = ", ".join(f"{n} ({u.time_us / profile.total_us:.1%})" for n, u in uncovered[:5])
        raise SpecError(
            f"no operator of the profile maps to a {base.name} problem (heaviest: {heaviest}); "
            "see docs/trace-import.md for the ops that map",
            file=str(trace),
        )
    out.mkdir(parents=True, exist_ok=True)
    operators = _write_operators(base, covered, profile, out, top)
    listed = _uncovered_list(uncovered, profile.total_us)
    covered_us = sum(op.time_us for op in operators)
    _write_suite_yaml(out, profile, base.name, operators, listed, covered_us, top)
    written = load_suite(out)  # the loader validates every problem's kwargs: fail here, not later
    for op in written.operators:
        written.problem(op.name)
    return TraceImportResult(
        directory=out,
        trace=str(trace),
        format=profile.format,
        basis=profile.basis,
        total_time_us=profile.total_us,
        covered_share=covered_us / profile.total_us,
        operators=operators,
        uncovered=listed,
    )


def _classify(
    profile: TraceProfile, problems: set[str], suite: str
) -> tuple[dict[str, dict[str, _Shape]], list[tuple[str, _Uncovered]]]:
    """Split the profile's work into problem shapes (deduplicated) and uncovered ops."""
    covered: dict[str, dict[str, _Shape]] = {}
    uncovered: dict[str, _Uncovered] = {}
    for work in profile.work:
        mapped = map_call(work.call)
        if isinstance(mapped, MappedShape) and mapped.problem not in problems:
            mapped = f"suite {suite} has no problem {mapped.problem!r}"
        if isinstance(mapped, str):
            entry = uncovered.setdefault(work.call.name, _Uncovered())
            entry.time_us += work.time_us
            entry.calls += work.calls
            entry.reasons[mapped] = entry.reasons.get(mapped, 0.0) + work.time_us
            continue
        key = json.dumps([mapped.init_kwargs, mapped.input_kwargs], sort_keys=True)
        shape = covered.setdefault(mapped.problem, {}).setdefault(key, _Shape(mapped))
        shape.time_us += work.time_us
        shape.calls += work.calls
    ranked = sorted(uncovered.items(), key=lambda item: -item[1].time_us)
    return covered, ranked


def _write_operators(
    base: SuiteSpec,
    covered: dict[str, dict[str, _Shape]],
    profile: TraceProfile,
    out: Path,
    top: int,
) -> list[ImportedOperator]:
    """Write each covered problem's directory; return the operators, heaviest first."""
    covered_us = sum(s.time_us for shapes in covered.values() for s in shapes.values())
    operators = []
    for problem, by_key in covered.items():
        shapes = sorted(by_key.values(), key=lambda s: -s.time_us)
        op_us = sum(s.time_us for s in shapes)
        kept = shapes[:top]
        cases = [
            {
                "id": f"t{i}",
                "init_kwargs": s.mapped.init_kwargs,
                "input_kwargs": s.mapped.input_kwargs,
                "weight": round(s.time_us / op_us, 6),
                "phase": s.mapped.phase.value,
                "split": Split.TUNE.value,
            }
            for i, s in enumerate(kept)
        ]
        smoke = _write_problem(base, problem, cases, out / problem, profile.path)
        phases = [Phase.PREFILL.value, Phase.DECODE.value]
        counts = {p: n for p in phases if (n := sum(c["phase"] == p for c in cases))}
        operators.append(
            ImportedOperator(
                name=problem,
                weight=round(op_us / covered_us, 6),
                share=round(op_us / profile.total_us, 6),
                time_us=round(op_us, 3),
                calls=sum(s.calls for s in shapes),
                phase="/".join(counts) or Phase.MIXED.value,
                shapes=len(kept),
                phases=counts,
                shapes_dropped=len(shapes) - len(kept),
                smoke_shapes=smoke,
            )
        )
    return sorted(operators, key=lambda op: -op.time_us)


def _write_problem(
    base: SuiteSpec, problem: str, cases: list[dict[str, Any]], dest: Path, trace: Path
) -> int:
    """Copy the built-in problem's files and op.yaml fields; write the shapes (smoke count)."""
    op_yaml = base.directory / base.operator(problem).problem
    try:
        spec = yaml.safe_load(op_yaml.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise SpecError(f"cannot read the built-in problem: {err}", file=str(op_yaml)) from err
    dest.mkdir(parents=True, exist_ok=True)
    for key in ("reference", "inputs", "library"):
        ref = spec.get(key)
        if isinstance(ref, dict) and isinstance(ref.get("path"), str):
            target = dest / ref["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(op_yaml.parent / ref["path"], target)
    # Overrides naming built-in shape ids have no shape here; those for every shape still apply.
    spec["roofline"] = [o for o in spec.get("roofline", []) if "*" in o.get("shapes", ["*"])]
    if not spec["roofline"]:
        del spec["roofline"]
    spec["shapes"] = {"path": "shapes.yaml"}
    smoke = [
        s.model_dump(mode="json") for s in base.problem(problem).shapes if s.split is Split.SMOKE
    ]
    header = (
        f"# Written by `aka trace import` from {trace.name}; the code and fields are "
        f"{base.name}'s {problem}.\n"
    )
    (dest / "op.yaml").write_text(header + _dump(spec), encoding="utf-8")
    (dest / "shapes.yaml").write_text(header + _dump(cases + smoke), encoding="utf-8")
    return len(smoke)


def _uncovered_list(ranked: list[tuple[str, _Uncovered]], total_us: float) -> list[UncoveredOp]:
    listed: list[UncoveredOp] = []
    rest = _Uncovered()
    rest_names = 0
    for name, entry in ranked:
        share = entry.time_us / total_us
        if len(listed) < MAX_UNCOVERED and share >= MIN_UNCOVERED_SHARE:
            reasons = sorted(entry.reasons, key=lambda r: -entry.reasons[r])
            reason = "; ".join(reasons[:2]) + (
                f" (+{len(reasons) - 2} more)" if reasons[2:] else ""
            )
            listed.append(
                UncoveredOp(name=name, share=round(share, 6), calls=entry.calls, reason=reason)
            )
        else:
            rest.time_us += entry.time_us
            rest.calls += entry.calls
            rest_names += 1
    if rest_names:
        listed.append(
            UncoveredOp(
                name=f"({rest_names} more ops)",
                share=round(rest.time_us / total_us, 6),
                calls=rest.calls,
                reason=f"each under {MIN_UNCOVERED_SHARE:.2%} of the time or past the first "
                f"{MAX_UNCOVERED}",
            )
        )
    return listed


def _write_suite_yaml(
    out: Path,
    profile: TraceProfile,
    base_name: str,
    operators: list[ImportedOperator],
    uncovered: list[UncoveredOp],
    covered_us: float,
    top: int,
) -> None:
    basis = _BASIS_WORDS[profile.basis]
    share = covered_us / profile.total_us
    source = {
        "trace": str(profile.path),
        "sha256": hashlib.sha256(profile.path.read_bytes()).hexdigest(),
        "imported": datetime.now(UTC).isoformat(timespec="seconds"),
        "format": profile.format,
        "time_basis": profile.basis,
        "total_time_us": round(profile.total_us, 3),
        "covered_time_us": round(covered_us, 3),
        "covered_share": round(share, 6),
        "mapped_to": base_name,
        "top_shapes": top,
    }
    suite = {
        "name": out.resolve().name or "imported",
        "description": f"Imported from {profile.path.name}: {len(operators)} {base_name} "
        f"operators covering {share:.1%} of the profile's {basis}.",
        "source": source,
        "weights": f"each operator's share of the covered {basis} (time attributed to the "
        "outermost mapped op that launched it), normalised to sum to 1; a shape's weight is its "
        "share of its operator's time",
        "operators": [
            {
                "name": op.name,
                "problem": f"{op.name}/op.yaml",
                "weight": op.weight,
                "phase": op.phase,
                "tune_shapes": op.shapes,
                "phases": op.phases,
                "smoke_shapes": op.smoke_shapes,
            }
            for op in operators
        ],
        "uncovered": [u.model_dump(mode="json") for u in uncovered],
    }
    header = "# Written by `aka trace import`; re-run it rather than editing by hand.\n"
    (out / "suite.yaml").write_text(header + _dump(suite), encoding="utf-8")


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, width=100, default_flow_style=None)
