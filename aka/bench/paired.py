"""The paired re-measurement behind the agent's promotion rule (ARCHITECTURE.md §5, "decide").

Incumbent (A) and candidate (B) each run in a fresh sandboxed worker (role ``pair``) on the same
GPU. Both load their candidate, build inputs and warm up, then wait. The parent owns the protocol:
it sends numbered ``batch`` commands and alternates A, B, A, B... for ``pairs`` pairs per shape;
each batch is ``k`` samples timed exactly as the scorer times (``sample_windows``: L2 flush, host
lead, stream and device-wide windows, rotating input sets). Workers return raw samples only; the
parent takes each batch's median, forms the paired ratio ``a / b`` (> 1: B is faster), and
decides nothing itself: the agent's ``decide`` compares the ratio with the noise computed here.

Noise estimator: per shape, the log-ratios of the pairs are centred on their median; the absolute
residuals of all shapes are pooled (for an odd number of pairs, each shape's own median residual,
always 0, is left out) and ``noise = exp(1.4826 x median(residuals)) - 1``. That is a robust
estimate of the spread of *one* pair's ratio (about 1.0-1.25 standard deviations for 3-7 pairs of
normal noise), not of the median's standard error: deliberately conservative, so one lucky pair
or a drifting clock on a shared machine cannot carry a promotion.

Placement: on an H200 two workers timing the *same* kernel with fixed inputs differed by up to 9%
per shape (A/A geomean 0.978-1.035) while each worker's own batches agreed within ~0.5%: where a
worker's tensors sit in memory biases it for its whole life, and the pairs' spread cannot see that.
So every batch rebuilds the model and re-places each input at a random 256-byte-aligned offset
(``place``), turning placement into batch-to-batch spread that the noise above measures.

Owns both sides of that protocol (the worker side runs in the sandbox, the parent side in
``Scorer.compare``). Must not decide promotions (``aka.agent.decide`` does) and never runs on the
CPU interpreter, where nothing is timed.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from aka.bench.stats import geomean, median
from aka.core import ConfigError, ProgressCallback, ProgressEvent, emit
from aka.spec import ProblemSpec, ShapeCase, Split

if TYPE_CHECKING:
    from aka.bench.pipeline import Scorer
    from aka.bench.problem_runtime import ProblemRuntime
    from aka.bench.sandbox import WorkerHandle
    from aka.bench.worker import EventLog

__all__ = [
    "PairClient",
    "PairedComparison",
    "PairedShape",
    "batch_stage",
    "command_file",
    "compare_paired",
    "paired_noise",
    "paired_shape",
    "place",
    "run_pair_worker",
    "run_pairs",
    "summarize_pairs",
]

#: 1 / Phi^-1(3/4): scales a median absolute deviation to a normal standard deviation.
_MAD_TO_SIGMA = 1.4826
_MIN_PAIRS = 3
_COMMAND_POLL_S = 0.005
_PLACEMENT_SPAN_BYTES = 2 << 20
_PLACEMENT_ALIGN_BYTES = 256  # keeps every alignment a kernel may specialise on (Triton: 16)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PairedShape(_Model):
    """One shape's interleaved batches: per-batch medians of A and B and their ratios."""

    shape_id: str
    a_us: list[float] = Field(description="Median stream window of each A batch, microseconds.")
    b_us: list[float] = Field(description="Median stream window of each B batch, microseconds.")
    ratios: list[float] = Field(description="a / b per pair (> 1: B faster).")
    ratio: float | None = Field(default=None, description="Median of ``ratios``.")
    weight: float = Field(default=1.0, description="The shape's weight in the geomean.")


class PairedComparison(_Model):
    """The outcome of ``Scorer.compare``: A (incumbent) vs B (candidate), paired batch by batch."""

    measured: bool = Field(description="False on the CPU interpreter or when a worker failed.")
    shapes: list[PairedShape] = Field(default_factory=list)
    ratio: float | None = Field(
        default=None, description="Weighted geomean over shapes of each shape's median ratio."
    )
    noise: float | None = Field(
        default=None,
        description="Relative spread of one pair's ratio (robust MAD of log-ratios, see module).",
    )
    pairs: int = Field(default=0, description="Pairs per shape asked for.")
    samples_per_batch: int = Field(default=0, description="Timed calls per batch (at most).")
    notes: list[str] = Field(default_factory=list)
    wall_s: float = 0.0


# ------------------------------------------------------------------------------------ statistics
def paired_noise(ratios_by_shape: Sequence[Sequence[float]]) -> float | None:
    """Return the relative noise of one pair's ratio, pooled over shapes (estimator: module doc).

    Args:
        ratios_by_shape: Each shape's per-pair ratios (positive).

    Returns:
        ``exp(1.4826 x median |log r - median log r|) - 1``; None when no shape has 2+ pairs.

    Raises:
        ValueError: A ratio is not positive.
    """
    residuals: list[float] = []
    for ratios in ratios_by_shape:
        if any(r <= 0 for r in ratios):
            raise ValueError(f"paired ratios must be positive, got {list(ratios)}")
        if len(ratios) < 2:
            continue
        logs = [math.log(r) for r in ratios]
        centre = statistics.median(logs)
        spread = sorted(abs(x - centre) for x in logs)
        residuals.extend(spread[1:] if len(spread) % 2 else spread)
    if not residuals:
        return None
    return math.exp(_MAD_TO_SIGMA * statistics.median(residuals)) - 1.0


def paired_shape(
    shape_id: str, a_us: list[float], b_us: list[float], weight: float = 1.0
) -> PairedShape:
    """Build one shape's row from its per-batch medians (ratio a / b per pair, then the median)."""
    ratios = [a / b for a, b in zip(a_us, b_us, strict=True)]
    return PairedShape(
        shape_id=shape_id,
        a_us=a_us,
        b_us=b_us,
        ratios=ratios,
        ratio=median(ratios) if ratios else None,
        weight=weight,
    )


def summarize_pairs(shapes: Sequence[PairedShape]) -> tuple[float | None, float | None]:
    """Return (weighted geomean of the shapes' median ratios, pooled noise) of measured shapes."""
    rated = [s for s in shapes if s.ratio is not None]
    if not rated:
        return None, None
    ratio = geomean([s.ratio or 0.0 for s in rated], [max(s.weight, 1e-12) for s in rated])
    return ratio, paired_noise([s.ratios for s in rated])


# ------------------------------------------------------------------------------------ parent side
class _Handle(Protocol):
    """What the parent needs from a running worker (``WorkerHandle``, or a fake in tests)."""

    @property
    def events(self) -> list[dict[str, Any]]: ...

    def send(self, name: str, payload: dict[str, Any]) -> None: ...

    def wait_for_stage(self, stage: str) -> bool: ...


def command_file(seq: int) -> str:
    """Name of the parent's ``seq``-th command file in a pair worker's directory."""
    return f"pair_cmd_{seq}.json"


def batch_stage(seq: int) -> str:
    """Stage a pair worker announces when its ``seq``-th batch is done."""
    return f"pair_batch_{seq}"


class PairClient:
    """The parent's side of one pair worker: numbered commands out, raw samples back."""

    def __init__(self, handle: _Handle) -> None:
        self.handle = handle
        self.seq = 0

    def batch(self, shape_id: str) -> float | None:
        """Run one batch on ``shape_id``; return its median window (None: the worker died)."""
        seq = self.seq
        self.seq += 1
        self.handle.send(command_file(seq), {"op": "batch", "shape_id": shape_id})
        if not self.handle.wait_for_stage(batch_stage(seq)):
            return None
        event = next(e for e in reversed(self.handle.events) if e.get("stage") == batch_stage(seq))
        samples = event.get("stream_us")
        if not isinstance(samples, list) or not samples:
            return None
        values = [float(x) for x in samples if isinstance(x, int | float) and x > 0]
        return median(values) if len(values) == len(samples) else None

    def stop(self) -> None:
        """Tell the worker no batch follows (it then checks its fingerprints and exits)."""
        self.handle.send(command_file(self.seq), {"op": "stop"})


def run_pairs(
    batch: Callable[[str, str], float | None],
    shapes: Sequence[ShapeCase],
    pairs: int,
    progress: ProgressCallback | None = None,
) -> tuple[list[PairedShape], tuple[str, str] | None]:
    """Alternate A and B batches, ``pairs`` pairs per shape, in the order A, B, A, B...

    Args:
        batch: ``batch(label, shape_id)`` runs one batch on worker ``"A"`` or ``"B"`` and returns
            its median (None when the worker failed).
        shapes: The shapes, in order.
        pairs: Pairs per shape.
        progress: Receives one event per finished pair.

    Returns:
        The finished shapes' rows, and (label, what failed) when a worker failed (the rest was
        not run).
    """
    rows: list[PairedShape] = []
    total, done = len(shapes) * pairs, 0
    for shape in shapes:
        a_us: list[float] = []
        b_us: list[float] = []
        for i in range(pairs):
            for label, sink in (("A", a_us), ("B", b_us)):
                value = batch(label, shape.id)
                if value is None:
                    return rows, (
                        label,
                        f"worker {label} failed in pair {i + 1} of shape {shape.id}",
                    )
                sink.append(value)
            done += 1
            emit(progress, ProgressEvent("bench", "pair", shape.id, done, total, {"pair": i + 1}))
        rows.append(paired_shape(shape.id, a_us, b_us, shape.weight))
    return rows, None


def _compare_shapes(
    scorer: Scorer, problem: ProblemSpec, shape_ids: list[str] | None
) -> list[ShapeCase]:
    """Named shapes, else the tune shapes (holdout stays unseen by the agent), else the default."""
    if shape_ids:
        return scorer.select_shapes(problem, shape_ids)[0]
    return problem.shapes_in({Split.TUNE}) or scorer.select_shapes(problem, None)[0]


def compare_paired(
    scorer: Scorer,
    problem: ProblemSpec,
    a_source: str,
    b_source: str,
    *,
    shape_ids: list[str] | None = None,
    pairs: int = _MIN_PAIRS,
    samples_per_batch: int | None = None,
    progress: ProgressCallback | None = None,
) -> PairedComparison:
    """Re-measure A and B in two fresh workers, interleaved under the parent's control.

    See ``Scorer.compare`` for the arguments.

    Raises:
        ConfigError: ``pairs`` < 3 or ``samples_per_batch`` < 1.
        SpecError: An unknown shape id.
        SandboxError: A worker could not be started.
    """
    started = time.monotonic()
    if pairs < _MIN_PAIRS:
        raise ConfigError(
            f"pairs={pairs}: the paired re-measurement needs at least 3; raise agent.pairs"
        )
    k = samples_per_batch or scorer.config.min_samples
    if k < 1:
        raise ConfigError(f"samples_per_batch={k} must be >= 1")
    result = PairedComparison(measured=False, pairs=pairs, samples_per_batch=k)

    def unmeasured(note: str) -> PairedComparison:
        result.notes.append(note)
        result.wall_s = round(time.monotonic() - started, 3)
        return result

    if scorer.cpu:
        return unmeasured(
            "CPU interpreter: performance is not measured, so A and B were not compared"
        )
    shapes = _compare_shapes(scorer, problem, shape_ids)
    entries: dict[str, str] = {}
    for label, source in (("A", a_source), ("B", b_source)):
        entry, why = scorer._entry_class(problem, source)
        if entry is None:
            return unmeasured(f"{label} cannot run: {why}")
        entries[label] = entry
    handles: dict[str, WorkerHandle] = {}
    try:
        for label, source in (("A", a_source), ("B", b_source)):
            handles[label] = _start_pair_worker(scorer, problem, shapes, source, entries[label], k)
        for label, handle in handles.items():
            if not handle.wait_for_stage("pair_ready"):
                return unmeasured(f"worker {label} never got ready: {handle.finish().describe()}")
        clients = {label: PairClient(h) for label, h in handles.items()}
        rows, failed = run_pairs(lambda lb, sid: clients[lb].batch(sid), shapes, pairs, progress)
        result.shapes = rows
        if failed is not None:
            label, what = failed
            return unmeasured(f"{what}: {handles[label].finish().describe()}")
        for client in clients.values():
            client.stop()
        for label, handle in handles.items():
            outcome = handle.finish()
            if not (outcome.result or {}).get("ok"):
                return unmeasured(
                    f"worker {label} failed after its batches: {handle.finish().describe()}"
                )
    finally:
        for handle in handles.values():
            handle.cleanup()
    result.ratio, result.noise = summarize_pairs(result.shapes)
    result.measured = result.ratio is not None
    result.wall_s = round(time.monotonic() - started, 3)
    return result


def _start_pair_worker(
    scorer: Scorer,
    problem: ProblemSpec,
    shapes: list[ShapeCase],
    source: str,
    entry_class: str,
    k: int,
) -> WorkerHandle:
    from aka.bench.sandbox import start_worker

    c = scorer.config
    task = scorer._task("pair", problem, shapes) | {
        "candidate_file": "candidate.py",
        "entry_class": entry_class,
        "command_timeout_s": c.worker_timeout_s,
        "timing": {
            "enabled": True,
            "warmup_ms": c.warmup_ms,
            "min_samples": min(k, 10),
            "max_samples": k,
            "sample_budget_s": c.sample_budget_s,
            "l2_flush_factor": c.l2_flush_factor,
            "l2_flush_mode": c.l2_flush_mode,
            "rotating_sets": c.rotating_sets,
            "host_lead_us": c.host_lead_us,
            "baselines": [],
            "skip_compile": [],
        },
    }
    return start_worker(
        task,
        {"candidate.py": source},
        config=c,
        interpret=False,
        gpu_index=scorer.gpu_index,
        timeout_s=c.worker_timeout_s,
    )


# ------------------------------------------------------------------------------------ worker side
def run_pair_worker(
    task: dict[str, Any], rt: ProblemRuntime, ev: EventLog, workdir: Path
) -> dict[str, Any]:
    """Worker role ``pair``: load the candidate, warm every shape, then time batches on command.

    Runs inside the sandbox. Timer and reference objects are fingerprinted before the candidate is
    imported and checked after the import and after the last batch (a change is ``tampered``).
    """
    import torch

    from aka.bench.problem_runtime import load_module
    from aka.bench.worker import WorkerFailure, _classify, _load_weights, _versions
    from aka.bench.worker_timing import TimingSession

    session = TimingSession(rt, task, ev)
    session.fingerprints = session._fingerprint()
    ev.emit("compile")
    try:
        module = load_module("candidate", workdir / task["candidate_file"])
        cls = getattr(module, task["entry_class"])
    except BaseException as err:  # a candidate's import failing is its verdict, not ours
        raise WorkerFailure(
            _classify(err, "compile"), f"{type(err).__name__}: {err}", "compile"
        ) from err
    session.check_fingerprints("after import")
    rng = random.Random()  # each worker draws its own placements
    seed = task["seeds"][0]

    def builder(shape: dict[str, Any]) -> Callable[[], Callable[[int], None]]:
        def build() -> Callable[[int], None]:
            model = rt.build_model(cls, shape, seed)
            _load_weights(model, rt.build_model(rt.reference.Model, shape, seed))
            sets = [
                ([place(a, rng) for a in args], {k: place(v, rng) for k, v in kwargs.items()})
                for args, kwargs in session._input_sets(shape, task["seeds"])
            ]

            def call(j: int) -> None:
                k = j % len(sets)
                model(*sets[k][0], **sets[k][1])

            return call

        return build

    builders = {shape["id"]: builder(shape) for shape in task["shapes"]}
    for shape in task["shapes"]:
        try:
            with torch.no_grad():
                builders[shape["id"]]()(0)  # JIT compile outside every batch
            torch.cuda.synchronize()
        except BaseException as err:
            raise WorkerFailure(
                _classify(err, "compile"), f"{type(err).__name__}: {err}", "pair", shape["id"]
            ) from err
    ev.emit("pair_ready", shapes=list(builders))
    batches = _serve_batches(task, builders, session, ev, workdir)
    session.check_fingerprints("after the paired batches")
    return {"ok": True, "batches": batches, "versions": _versions()}


def place(value: Any, rng: random.Random) -> Any:
    """Copy a contiguous tensor to a fresh allocation at a random offset (256-byte aligned).

    Each batch re-draws where its inputs sit in memory (page and cache-set alignment), so an
    effect of one placement lands in the spread of the pairs instead of biasing one worker for
    its whole life. Other values, and tensors that need grad or are not contiguous, pass as-is.

    Args:
        value: An input value.
        rng: Draws the offset, up to 2 MiB (one large page).
    """
    import torch

    if (
        not isinstance(value, torch.Tensor)
        or not value.is_contiguous()
        or value.requires_grad
        or value.numel() == 0
    ):
        return value
    nbytes = value.numel() * value.element_size()
    offset = rng.randrange(0, _PLACEMENT_SPAN_BYTES, _PLACEMENT_ALIGN_BYTES)
    buffer = torch.empty(nbytes + offset, dtype=torch.uint8, device=value.device)
    placed = buffer[offset : offset + nbytes].view(value.dtype).view(value.shape)
    placed.copy_(value)
    return placed


def _serve_batches(
    task: dict[str, Any],
    builders: dict[str, Callable[[], Callable[[int], None]]],
    session: Any,
    ev: EventLog,
    workdir: Path,
) -> int:
    """Answer numbered commands until ``stop`` (or silence); return the batches timed.

    Every batch builds its model and inputs afresh (``place``) while the previous batch's are
    still alive, so no two consecutive batches share addresses.
    """
    import torch

    from aka.bench.worker import WorkerFailure

    seq = 0
    current: Callable[[int], None] | None = None
    while True:
        command = _wait_for_command(workdir / command_file(seq), float(task["command_timeout_s"]))
        if command is None or command.get("op") != "batch":
            return seq
        shape_id = str(command.get("shape_id"))
        if shape_id not in builders:
            raise WorkerFailure("harness", f"batch for unknown shape {shape_id!r}", "pair")
        try:
            with torch.no_grad():
                fresh = builders[shape_id]()
                current = fresh  # the previous batch's tensors are freed only now
                got = session._sample(current)
        except BaseException as err:
            raise WorkerFailure(
                "runtime_error", f"{type(err).__name__}: {err}", "pair", shape_id
            ) from err
        ev.emit(batch_stage(seq), shape_id=shape_id, **got)
        seq += 1


def _wait_for_command(path: Path, timeout_s: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            data = json.loads(path.read_text())
            return data if isinstance(data, dict) else None
        time.sleep(_COMMAND_POLL_S)
    return None
