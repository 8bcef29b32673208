"""``aka.kb.latest_acceptance``: the counts ``aka kb stats`` reports from committed results."""

from __future__ import annotations

import json
from pathlib import Path

from aka.kb import latest_acceptance

REPO = Path(__file__).resolve().parents[2]


def _write(root: Path, name: str, rows: list[dict[str, str]]) -> None:
    results = root / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / name).write_text(json.dumps({"date": name[14:24], "rows": rows}))


def test_the_newest_file_per_device_is_counted_per_problem_kind(tmp_path: Path) -> None:
    old = [{"kernel": "a", "problem": "atrex30/p", "verdict": "accepted"}]
    new = [
        {"kernel": "a", "problem": "atrex30/p", "verdict": "accepted"},
        {"kernel": "a", "problem": "own/kernel.a", "problem_kind": "own", "verdict": "accepted"},
        {"kernel": "b", "problem": "own/kernel.b", "problem_kind": "own", "verdict": "accepted"},
        {"kernel": "c", "problem": "examples/q", "verdict": "wrong_output"},
    ]
    _write(tmp_path, "kb_acceptance_2026-12-03_cpu.json", old)
    _write(tmp_path, "kb_acceptance_2026-12-04_cpu.json", new)
    _write(tmp_path, "kb_acceptance_2026-12-04_cpu_partial.json", [])  # not a results file
    _write(tmp_path, "kb_acceptance_2026-12-03_cuda.json", old)
    cpu, cuda = latest_acceptance(tmp_path)
    assert (cpu.device, cpu.file) == ("cpu", "benchmarks/results/kb_acceptance_2026-12-04_cpu.json")
    assert (cpu.scored, cpu.accepted_on_a_problem) == (3, 2)
    assert cpu.accepted_by_kind == {"atrex30": 1, "examples": 0, "own": 2}
    assert (cuda.device, cuda.accepted_on_a_problem) == ("cuda", 1)


def test_no_results_folder_means_no_counts(tmp_path: Path) -> None:
    assert latest_acceptance(tmp_path) == []


def test_the_committed_cpu_results_are_read() -> None:
    by_device = {c.device: c for c in latest_acceptance(REPO)}
    assert by_device["cpu"].accepted_on_a_problem > 100
