"""How many reference kernels the latest committed acceptance results accepted (issue #7).

``benchmarks/kb_acceptance.py`` scores every kernel on its family's problems and on its own
problem and commits ``benchmarks/results/kb_acceptance_<date>_<device>.json``; ``aka kb stats``
reports the counts of the newest file per device next to the kernel counts. This reads the file
as data (JSON) and imports nothing from ``aka.bench``; a checkout without ``benchmarks/`` (a wheel
install) has no counts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AcceptanceCounts", "latest_acceptance"]

_KINDS = ("atrex30", "examples", "own")
_NAME = re.compile(r"^kb_acceptance_(\d{4}-\d{2}-\d{2})_([a-z0-9]+)$")


class AcceptanceCounts(BaseModel):
    """Kernels accepted on a problem, per problem kind, in one committed results file."""

    model_config = ConfigDict(frozen=True)

    file: str = Field(description="The results file, relative to the project root.")
    device: str
    date: str
    scored: int = Field(description="Kernels with at least one scored pair.")
    accepted_on_a_problem: int
    accepted_by_kind: dict[str, int] = Field(
        description="Kernels accepted on a problem of each kind (atrex30, examples, own)."
    )


def _count(record: dict[str, object]) -> tuple[int, int, dict[str, int]]:
    rows = record.get("rows")
    if not isinstance(rows, list):
        return 0, 0, {}
    scored = {r["kernel"] for r in rows}
    accepted: dict[str, set[str]] = {kind: set() for kind in _KINDS}
    for r in rows:
        kind = r.get("problem_kind") or str(r["problem"]).partition("/")[0]
        if r["verdict"] == "accepted" and kind in accepted:
            accepted[kind].add(r["kernel"])
    anywhere = set().union(*accepted.values())
    return len(scored), len(anywhere), {k: len(v) for k, v in accepted.items()}


def latest_acceptance(root: Path) -> list[AcceptanceCounts]:
    """The newest ``kb_acceptance_<date>_<device>.json`` per device under ``root``'s results."""
    results = root / "benchmarks" / "results"
    newest: dict[str, Path] = {}
    for path in sorted(results.glob("kb_acceptance_*.json")) if results.is_dir() else []:
        match = _NAME.match(path.stem)
        if match:  # sorted by name: the ISO date orders them
            newest[match.group(2)] = path
    counts = []
    for device, path in sorted(newest.items()):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        scored, anywhere, by_kind = _count(record)
        counts.append(
            AcceptanceCounts(
                file=str(path.relative_to(root)),
                device=device,
                date=str(record.get("date", "")),
                scored=scored,
                accepted_on_a_problem=anywhere,
                accepted_by_kind=by_kind,
            )
        )
    return counts
