"""Fixtures for scorer tests: a CPU scorer (Triton interpreter workers) and candidate sources."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from aka.bench import Scorer
from aka.core import BenchConfig
from aka.spec import ProblemSpec, load_problem

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "examples"
CANDIDATES = REPO / "tests" / "fixtures" / "candidates"
RMS_NORM_RETURN = "        return rms_norm(x, weight, self.eps)\n"


@pytest.fixture(scope="session")
def cpu_scorer(tmp_path_factory: pytest.TempPathFactory) -> Scorer:
    """One CPU scorer for the session, so reference outputs are computed once per problem."""
    config = BenchConfig(worker_timeout_s=120.0)
    return Scorer(config, tmp_path_factory.mktemp("cache"), device="cpu")


@pytest.fixture(scope="session")
def runtime_scorer(cpu_scorer: Scorer) -> Scorer:
    """The CPU scorer with the static screen skipped: for candidates that misbehave at runtime in
    ways the screen would already reject (ctypes, subprocess, writes to an input...)."""
    return Scorer(cpu_scorer.config, cpu_scorer.cache_dir, device="cpu", static_screen=False)


@pytest.fixture(scope="session")
def rms_norm() -> ProblemSpec:
    return load_problem(EXAMPLES / "rms_norm" / "op.yaml")


@pytest.fixture(scope="session")
def rms_norm_candidate() -> str:
    return (EXAMPLES / "rms_norm" / "candidate.py").read_text()


@pytest.fixture
def inject(rms_norm_candidate: str) -> Callable[[str], str]:
    """Return the correct rms_norm candidate with ``lines`` run at the start of forward."""

    def make(lines: str) -> str:
        assert RMS_NORM_RETURN in rms_norm_candidate
        body = "".join(f"        {line}\n" for line in lines.strip("\n").splitlines())
        return rms_norm_candidate.replace(RMS_NORM_RETURN, body + RMS_NORM_RETURN)

    return make


def fixture_candidate(name: str) -> str:
    return (CANDIDATES / name).read_text()
