"""Scorers for agent tests.

``TimedCPUScorer`` wraps the real ``aka.bench.Scorer`` in CPU-interpreter mode: the real screen,
sandboxed workers and correctness checks decide every verdict; only the timing, which the CPU
cannot measure, comes from a ``# fake-latency-us: N`` comment in the candidate. That keeps the
loop tests on the real scoring path while making promotions deterministic.

``SyntheticScorer`` never runs code: verdict and latency both come from comments
(``# fake-verdict: wrong_output``). It is for graph unit tests only (routing, budgets, dropout).
``DeviceFakeScorer`` is a ``SyntheticScorer`` standing for one GPU: each evaluation takes the time a
``# fake-seconds: S`` comment asks for and is logged with its interval and thread (scheduling
tests); ``# fake-harness-error`` makes it raise ``SandboxError`` as a broken harness would.
"""

from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aka.bench import EvalResult, Failure, LatencyStats, Manifest, ShapeResult, Verdict
from aka.core import ProgressEvent, SandboxError
from aka.spec import ProblemSpec

T_SOL_US = 10.0
_LAT = re.compile(r"#\s*fake-latency-us:\s*([0-9.]+)")
_VERDICT = re.compile(r"#\s*fake-verdict:\s*([a-z_]+)")
_SECONDS = re.compile(r"#\s*fake-seconds:\s*([0-9.]+)")
_TAG = re.compile(r"#\s*tag:\s*(\S+)")


def fake_latency(source: str) -> float | None:
    """Return the latency a source declares, if any."""
    m = _LAT.search(source)
    return float(m.group(1)) if m else None


@dataclass
class PairedShapeFake:
    shape_id: str
    a_us: list[float]
    b_us: list[float]
    ratios: list[float]

    def model_dump(self, mode: str = "json") -> dict[str, Any]:
        return {"shape_id": self.shape_id, "a_us": self.a_us, "b_us": self.b_us,
                "ratios": self.ratios}  # fmt: skip


@dataclass
class ComparisonFake:
    measured: bool
    ratio: float | None
    noise: float | None
    shapes: list[PairedShapeFake] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _with_timing(result: EvalResult, latency: float) -> EvalResult:
    rows = []
    for row in result.shapes:
        sol = min(1.0, T_SOL_US / latency)
        rows.append(
            row.model_copy(
                update={
                    "latency_us": LatencyStats(median=latency, iqr=latency * 0.01, n=100),
                    "t_sol_us": T_SOL_US,
                    "sol_fraction": sol,
                    "bound": "memory",
                    "baselines_us": {"eager": LatencyStats(median=100.0, iqr=1.0, n=100)},
                    "speedup_vs": {"eager": 100.0 / latency, "torch_compile": 60.0 / latency},
                }
            )
        )
    score = math.exp(sum(math.log(r.sol_fraction or 1e-9) for r in rows) / max(len(rows), 1))
    return result.model_copy(update={"shapes": rows, "score": score, "performance_measured": True})


class _CompareMixin:
    calls: list[str]

    def compare(
        self,
        problem: ProblemSpec,
        a_source: str,
        b_source: str,
        *,
        shape_ids: list[str] | None = None,
        pairs: int = 3,
        progress: Any = None,
    ) -> ComparisonFake:
        self.calls.append("compare")
        a, b = fake_latency(a_source), fake_latency(b_source)
        if a is None or b is None:
            return ComparisonFake(False, None, None, notes=["no declared latency"])
        shape = PairedShapeFake("s", [a] * pairs, [b] * pairs, [a / b] * pairs)
        return ComparisonFake(True, a / b, 0.02, shapes=[shape])


class TimedCPUScorer(_CompareMixin):
    """The real CPU scorer for verdicts, declared latencies for timing."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.mode = "gpu"
        self.calls: list[str] = []

    @property
    def cpu(self) -> bool:
        return False

    @property
    def wants_cold_recheck(self) -> bool:
        return False  # the real scorer runs on the CPU here: nothing timed to reproduce

    def evaluate(
        self,
        problem: ProblemSpec,
        candidate_source: str,
        *,
        shape_ids: list[str] | None = None,
        progress: Any = None,
        cold_recheck: bool = False,
    ) -> EvalResult:
        self.calls.append("evaluate")
        smoke = [s.id for s in problem.shapes if s.split.value == "smoke"]
        result: EvalResult = self.real.evaluate(problem, candidate_source, shape_ids=smoke)
        latency = fake_latency(candidate_source)
        if result.accepted and latency is not None:
            return _with_timing(result, latency)
        return result

    def input_signature(self, problem: ProblemSpec, shape_id: str | None = None) -> Any:
        return self.real.input_signature(problem, shape_id)


class SyntheticScorer(_CompareMixin):
    """Verdicts and latencies from comments; runs nothing (graph unit tests)."""

    def __init__(self, *, cpu: bool = False) -> None:
        self._cpu = cpu
        self.mode = "cpu_interpreter" if cpu else "gpu"
        self.calls: list[str] = []

    @property
    def cpu(self) -> bool:
        return self._cpu

    @property
    def wants_cold_recheck(self) -> bool:
        return False

    def evaluate(
        self,
        problem: ProblemSpec,
        candidate_source: str,
        *,
        shape_ids: list[str] | None = None,
        progress: Any = None,
        cold_recheck: bool = False,
    ) -> EvalResult:
        ids = shape_ids or [s.id for s in problem.shapes]
        by_id = {s.id: s for s in problem.shapes}
        holdout = all(by_id[i].split.value == "holdout" for i in ids)
        self.calls.append("holdout" if holdout else "evaluate")
        m = _VERDICT.search(candidate_source)
        verdict = Verdict(m.group(1)) if m else Verdict.ACCEPTED
        rows = [ShapeResult(shape_id=i, split=by_id[i].split, verdict=verdict) for i in ids]
        failure = None if verdict is Verdict.ACCEPTED else Failure(kind=verdict, message="bad")
        result = EvalResult(
            verdict=verdict,
            failure=failure,
            performance_measured=False,
            shapes=rows,
            score=None if verdict is Verdict.ACCEPTED else 0.0,
            manifest=Manifest(
                source_sha256="x",
                problem_sha256="y",
                problem_name=problem.name,
                mode="cpu_interpreter" if self._cpu else "gpu",
                created_at="now",
            ),  # fmt: skip
        )
        latency = fake_latency(candidate_source)
        if not self._cpu and result.accepted and latency is not None:
            return _with_timing(result, latency)
        return result


@dataclass(frozen=True)
class Busy:
    """One evaluation a ``DeviceFakeScorer`` ran: which source (its ``# tag:``), when, where."""

    tag: str
    start: float
    end: float
    thread: str
    holdout: bool = False


class DeviceFakeScorer(SyntheticScorer):
    """A ``SyntheticScorer`` standing for one GPU, logging when it is busy (scheduling tests)."""

    def __init__(self, gpu: str) -> None:
        super().__init__(cpu=False)
        self.gpu = gpu
        self.busy: list[Busy] = []
        self._lock = threading.Lock()

    def evaluate(
        self,
        problem: ProblemSpec,
        candidate_source: str,
        *,
        shape_ids: list[str] | None = None,
        progress: Any = None,
        cold_recheck: bool = False,
    ) -> EvalResult:
        start = time.monotonic()
        if progress is not None:
            progress(ProgressEvent("bench", "timing", self.gpu, data={"shape_id": "s"}))
        m = _SECONDS.search(candidate_source)
        time.sleep(float(m.group(1)) if m else 0.0)
        tag = _TAG.search(candidate_source)
        splits = {s.id: s.split.value for s in problem.shapes}
        holdout = all(splits[i] == "holdout" for i in shape_ids or list(splits))
        with self._lock:
            self.busy.append(Busy(tag.group(1) if tag else "?", start, time.monotonic(),
                                  threading.current_thread().name, holdout))  # fmt: skip
        if "# fake-harness-error" in candidate_source:
            raise SandboxError(f"the worker on fake GPU {self.gpu} could not start")
        return super().evaluate(
            problem, candidate_source, shape_ids=shape_ids, progress=progress,
            cold_recheck=cold_recheck,
        )  # fmt: skip
