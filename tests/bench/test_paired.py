"""The paired re-measurement: noise estimator, ratio math, ABAB orchestration, the CPU path."""

from __future__ import annotations

import math
import statistics
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

from aka.bench import PairedComparison, PairedShape, Scorer
from aka.bench.paired import (
    PairClient,
    batch_stage,
    command_file,
    paired_noise,
    paired_shape,
    run_pairs,
    summarize_pairs,
)
from aka.core import ConfigError, ProgressEvent
from aka.spec import ProblemSpec, ShapeCase


def _shape(sid: str, weight: float = 1.0) -> ShapeCase:
    return ShapeCase(id=sid, weight=weight)


# ------------------------------------------------------------------------------------ statistics
def test_paired_noise_is_scaled_mad_of_log_ratios() -> None:
    ratios = [1.0, 1.02, 0.98]
    logs = [math.log(r) for r in ratios]
    # the median's own zero residual is left out for an odd count
    residuals = sorted(abs(x - statistics.median(logs)) for x in logs)[1:]
    expected = math.exp(1.4826 * statistics.median(residuals)) - 1

    assert paired_noise([ratios]) == pytest.approx(expected)
    assert 0.025 < paired_noise([ratios]) < 0.035  # type: ignore[operator]


def test_paired_noise_ignores_one_wild_pair() -> None:
    steady = paired_noise([[1.0, 1.01, 0.99, 1.0, 1.0]])
    wild = paired_noise([[1.0, 1.01, 0.99, 1.0, 3.0]])

    assert steady is not None and wild is not None
    assert wild < 0.03  # a range-based spread would read ~200% here
    assert wild >= steady


def test_paired_noise_pools_shapes_and_is_zero_for_identical_pairs() -> None:
    assert paired_noise([[1.1, 1.1, 1.1], [0.9, 0.9, 0.9]]) == 0.0
    # a shape's level does not count as noise: only the spread around each shape's median
    shifted = paired_noise([[2.0, 2.04, 1.96], [0.5, 0.51, 0.49]])
    alone = paired_noise([[1.0, 1.02, 0.98]])
    assert shifted == pytest.approx(alone, rel=0.05)


def test_paired_noise_needs_two_pairs_and_positive_ratios() -> None:
    assert paired_noise([[1.2]]) is None
    assert paired_noise([]) is None
    with pytest.raises(ValueError, match="positive"):
        paired_noise([[1.0, 0.0, 1.0]])


def test_paired_shape_ratio_is_a_over_b_and_median() -> None:
    row = paired_shape("s", [10.0, 12.0, 11.0], [5.0, 12.0, 10.0])

    assert row.ratios == pytest.approx([2.0, 1.0, 1.1])
    assert row.ratio == pytest.approx(1.1)


def test_summarize_pairs_weighted_geomean_of_shape_medians() -> None:
    fast = PairedShape(shape_id="a", a_us=[], b_us=[], ratios=[2.0, 2.0, 2.0], ratio=2.0, weight=3)
    slow = PairedShape(shape_id="b", a_us=[], b_us=[], ratios=[0.5] * 3, ratio=0.5, weight=1)

    ratio, noise = summarize_pairs([fast, slow])

    assert ratio == pytest.approx(math.exp((3 * math.log(2) + math.log(0.5)) / 4))
    assert noise == 0.0
    assert summarize_pairs([]) == (None, None)


# ------------------------------------------------------------------------------------ orchestration
def test_run_pairs_alternates_a_and_b_per_shape() -> None:
    calls: list[tuple[str, str]] = []
    times = {"A": 10.0, "B": 8.0}

    def batch(label: str, shape_id: str) -> float:
        calls.append((label, shape_id))
        return times[label] + len(calls) * 0.001  # drift: both sides of a pair see it

    events: list[ProgressEvent] = []
    rows, failed = run_pairs(batch, [_shape("x"), _shape("y", 2.0)], 3, events.append)

    assert failed is None
    assert [c[0] for c in calls] == ["A", "B"] * 6
    assert [c[1] for c in calls] == ["x"] * 6 + ["y"] * 6
    assert [r.shape_id for r in rows] == ["x", "y"] and rows[1].weight == 2.0
    assert all(len(r.a_us) == len(r.b_us) == 3 for r in rows)
    assert all(1.24 < r < 1.26 for row in rows for r in row.ratios)
    assert [e.done for e in events] == [1, 2, 3, 4, 5, 6] and events[-1].total == 6


def test_run_pairs_stops_at_a_failed_worker() -> None:
    calls: list[str] = []

    def batch(label: str, shape_id: str) -> float | None:
        calls.append(label)
        return None if shape_id == "y" and label == "B" else 1.0

    rows, failed = run_pairs(batch, [_shape("x"), _shape("y"), _shape("z")], 3, None)

    assert [r.shape_id for r in rows] == ["x"]
    assert failed is not None and failed[0] == "B" and "pair 1 of shape y" in failed[1]
    assert len(calls) == 8  # nothing ran after the failure


class FakeHandle:
    """Answers batch commands like a pair worker would (or dies after ``dies_after``)."""

    def __init__(self, samples: list[Any], dies_after: int | None = None) -> None:
        self.samples, self.dies_after = samples, dies_after
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self._events: list[dict[str, Any]] = []

    @property
    def events(self) -> list[dict[str, Any]]:
        return list(self._events)

    def send(self, name: str, payload: dict[str, Any]) -> None:
        self.sent.append((name, payload))
        seq = len(self.sent) - 1
        if payload["op"] == "batch" and (self.dies_after is None or seq < self.dies_after):
            self._events.append({"stage": batch_stage(seq), "stream_us": self.samples})

    def wait_for_stage(self, stage: str) -> bool:
        return any(e["stage"] == stage for e in self._events)


def test_pair_client_numbers_commands_and_reads_the_median() -> None:
    handle = FakeHandle([3.0, 1.0, 2.0, 100.0, 2.5])
    client = PairClient(handle)

    assert client.batch("s1") == 2.5
    assert client.batch("s2") == 2.5
    client.stop()

    assert [n for n, _ in handle.sent] == [command_file(0), command_file(1), command_file(2)]
    assert [p["op"] for _, p in handle.sent] == ["batch", "batch", "stop"]
    assert handle.sent[1][1]["shape_id"] == "s2"


@pytest.mark.parametrize("samples", [[], [1.0, -2.0], ["x"], None])
def test_pair_client_rejects_bad_samples(samples: Any) -> None:
    assert PairClient(FakeHandle(samples)).batch("s") is None


def test_pair_client_reports_a_dead_worker() -> None:
    client = PairClient(FakeHandle([1.0], dies_after=1))

    assert client.batch("s") == 1.0
    assert client.batch("s") is None


# ------------------------------------------------------------------------------------ CPU path
def test_compare_on_cpu_is_not_measured_at_once(
    cpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    started = time.monotonic()
    result = cpu_scorer.compare(rms_norm, rms_norm_candidate, rms_norm_candidate)

    assert isinstance(result, PairedComparison)
    assert result.measured is False and result.ratio is None and result.shapes == []
    assert any("not measured" in n for n in result.notes)
    assert time.monotonic() - started < 1.0  # no worker was started


def test_compare_needs_three_pairs(
    cpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    with pytest.raises(ConfigError, match="at least 3"):
        cpu_scorer.compare(rms_norm, rms_norm_candidate, rms_norm_candidate, pairs=2)


class _FakeSession:
    """Stands in for the worker's ``TimingSession`` (CUDA-only): times nothing, calls ``fn``."""

    def __init__(self) -> None:
        self.called: list[int] = []

    def _sample(self, fn: Any) -> dict[str, list[float]]:
        fn(0)
        n = len(self.called)
        return {"stream_us": [10.0 + n, 11.0 + n, 12.0 + n], "device_us": [13.0, 14.0, 15.0]}


def test_pair_protocol_round_trip_through_the_worker_directory(tmp_path: Path) -> None:
    """The parent's ``PairClient`` drives the worker's batch loop through real files and events."""
    from aka.bench.paired import _serve_batches
    from aka.bench.sandbox import WorkerHandle
    from aka.bench.worker import EventLog

    session = _FakeSession()
    builds: list[str] = []

    def build() -> Any:
        builds.append("s")
        return session.called.append

    builders = {"s": build}
    task = {"command_timeout_s": 10.0}
    served: list[int] = []
    ev = EventLog(tmp_path / "events.jsonl")
    loop = threading.Thread(
        target=lambda: served.append(_serve_batches(task, builders, session, ev, tmp_path))
    )
    loop.start()
    handle = WorkerHandle(
        proc=types.SimpleNamespace(poll=lambda: None, pid=-1),  # type: ignore[arg-type]
        workdir=tmp_path,
        started=time.monotonic(),
        timeout_s=10.0,
        on_event=None,
    )
    client = PairClient(handle)

    assert client.batch("s") == 12.0  # median of the first batch's samples
    assert client.batch("s") == 13.0
    client.stop()
    loop.join(timeout=10)
    ev._fh.close()

    assert served == [2] and session.called == [0, 0]
    assert builds == ["s", "s"]  # every batch builds its model and inputs afresh
    assert [e["stage"] for e in handle.events] == [batch_stage(0), batch_stage(1)]
    assert handle.events[1]["device_us"] == [13.0, 14.0, 15.0]


def test_place_copies_to_a_random_aligned_offset() -> None:
    import random

    import torch

    from aka.bench.paired import place

    rng = random.Random(0)
    x = torch.arange(24, dtype=torch.bfloat16).reshape(4, 6)
    placed = [place(x, rng) for _ in range(8)]

    for p in placed:
        assert torch.equal(p, x) and p.dtype == x.dtype and p.is_contiguous()
        assert p.storage_offset() * p.element_size() % 256 == 0
    assert len({p.storage_offset() for p in placed}) > 4  # placements differ
    # what cannot be re-placed passes through untouched
    strided = x.t()
    assert place(strided, rng) is strided and place(3, rng) == 3
    grad = torch.ones(3, requires_grad=True)
    assert place(grad, rng) is grad
