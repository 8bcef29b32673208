"""The scorer's pipeline of gates (ARCHITECTURE.md §4).

Stages: screen -> compile -> correctness -> [engagement, a later issue] -> performance -> score.

Owns the order of the stages, the workers' lifecycle and every verdict. Reference outputs are held
here, in the parent (in memory only: never on disk where a candidate could read them); the
candidate's worker never receives them. A candidate's failure is a verdict; only failures of the
harness or of the problem itself raise.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from aka.bench.correctness import CheckOutcome, Tolerance, compare_outputs, tolerance_for
from aka.bench.engagement import EngagementOutcome
from aka.bench.guard_judge import judge_guards
from aka.bench.result import Engagement, EvalResult, Failure, Manifest, ShapeResult, Verdict
from aka.bench.run_state import (
    _default_fp8_scales,
    _load_tensors,
    _output_bytes,
    _Reference,
    _Run,
    candidate_file_limit_mb,
)
from aka.bench.sandbox import WorkerOutcome, start_worker
from aka.bench.score import confirm_suspicious
from aka.bench.screen import screen_source
from aka.bench.signature import InputSignature
from aka.core import (
    BaselineError,
    BenchConfig,
    ProgressCallback,
    ProgressEvent,
    SpecError,
    emit,
)
from aka.spec import ProblemFormat, ProblemSpec, ShapeCase, Split

if TYPE_CHECKING:
    from aka.bench.paired import PairedComparison
    from aka.bench.profile import ProfileData

__all__ = ["Scorer"]

logger = logging.getLogger(__name__)

_FAILURE_KINDS = {v.value: v for v in Verdict}
_CRASH_SIGNALS = {4, 6, 7, 8, 11}  # SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV
_SIGKILL, _SIGXCPU = 9, 24
_MAX_POISON_BYTES = 1 << 30
#: RLIMIT_FSIZE of workers that run trusted problem code only (the reference, the baselines).
_TRUSTED_FILE_LIMIT_MB = 1 << 20


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Scorer:
    """The embedded scorer: evaluates candidate files against problems, each in fresh workers.

    Args:
        config: Bench settings.
        cache_dir: Where measured ceilings and torch.compile baseline times are cached.
        device: ``auto`` (GPU when CUDA is available), ``cpu`` (interpreter) or ``cuda``.
        gpu_index: The GPU the workers see.
        static_screen: False skips stage 1's findings (the entry-class and kernel-kind facts are
            still read), so that the runtime guards alone can be tested against the exploit
            corpus. Never turn it off to score real candidates.
        extra_env: Variables added to every worker's environment (the cold re-check's).
    """

    def __init__(
        self,
        config: BenchConfig,
        cache_dir: Path,
        *,
        device: Literal["auto", "cpu", "cuda"] = "auto",
        gpu_index: int = 0,
        static_screen: bool = True,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.config = config
        self.cache_dir = cache_dir
        self.gpu_index = gpu_index
        self.static_screen = static_screen
        self.extra_env = dict(extra_env or {})
        self.mode: Literal["gpu", "cpu_interpreter"] = self._pick_mode(device)
        self._references: dict[str, _Reference] = {}

    @staticmethod
    def _pick_mode(device: str) -> Literal["gpu", "cpu_interpreter"]:
        if device == "cpu":
            return "cpu_interpreter"
        import torch

        if torch.cuda.is_available():
            return "gpu"
        if device == "cuda":
            from aka.core import UnsupportedHardwareError

            raise UnsupportedHardwareError(
                "--device cuda was asked for but torch sees no CUDA device; "
                "drop --device to run the CPU interpreter"
            )
        return "cpu_interpreter"

    @property
    def wants_cold_recheck(self) -> bool:
        """Whether final results should be re-checked cold (``bench.cold_recheck``)."""
        mode = self.config.cold_recheck
        return mode == "always" or (mode == "gpu" and not self.cpu)

    @property
    def cpu(self) -> bool:
        """Whether this scorer runs Triton's interpreter on the CPU (no timing)."""
        return self.mode == "cpu_interpreter"

    # ---------------------------------------------------------------- selection
    def select_shapes(
        self, problem: ProblemSpec, shape_ids: list[str] | None
    ) -> tuple[list[ShapeCase], list[str]]:
        """Pick the shapes to run: named ones, else smoke on the CPU and non-smoke on a GPU.

        Raises:
            SpecError: A named shape does not exist, or the CPU has no smoke shape to run.
        """
        known = [s.id for s in problem.shapes]
        if shape_ids:
            unknown = [i for i in shape_ids if i not in known]
            if unknown:
                raise SpecError(
                    f"unknown shape id(s) {unknown}; the problem has {known}",
                    file=problem.source_path,
                    field="--shapes",
                )
            chosen = problem.shapes_in(ids=shape_ids)
        elif self.cpu:
            chosen = problem.shapes_in({Split.SMOKE})
            if not chosen:
                raise SpecError(
                    "no 'smoke' shapes to run on the CPU interpreter; add cases with "
                    f"split: smoke or pass --shapes (ids: {known})",
                    file=problem.source_path,
                )
        else:
            chosen = problem.shapes_in({Split.TUNE, Split.HOLDOUT})
        ids = {s.id for s in chosen}
        return chosen, [i for i in known if i not in ids]

    # ---------------------------------------------------------------- signature
    def input_signature(self, problem: ProblemSpec, shape_id: str | None = None) -> InputSignature:
        """Describe how the reference is called: forward's arguments, init values, outputs.

        The reference runs once in a fresh reference worker (never in this process).

        Args:
            problem: The loaded problem.
            shape_id: The shape to describe (default: the first smoke shape on the CPU, the first
                tune shape on a GPU).

        Returns:
            The signature the agent's adapter maps kernels onto.

        Raises:
            SpecError: An unknown shape id, or no shape to run.
            BaselineError: The reference itself fails.
            SandboxError: The worker could not be started.
        """
        from aka.bench.signature import signature_from_worker

        return signature_from_worker(self, problem, shape_id)

    # ---------------------------------------------------------------- evaluate
    def evaluate(
        self,
        problem: ProblemSpec,
        candidate_source: str,
        *,
        shape_ids: list[str] | None = None,
        progress: ProgressCallback | None = None,
        cold_recheck: bool = False,
    ) -> EvalResult:
        """Score one candidate on one problem.

        Args:
            problem: The loaded problem.
            candidate_source: The candidate file's text.
            shape_ids: Shapes to run (default: smoke on the CPU, tune + holdout on a GPU).
            progress: Receives ``ProgressEvent``s.
            cold_recheck: Re-check an accepted result in cold workers (fresh random seeds, empty
                compiler caches) before returning it (``aka.bench.cold``): for final results.

        Returns:
            The result; a rejected candidate is a verdict, not an exception.

        Raises:
            SpecError: Bad shape selection.
            BaselineError: The reference itself fails.
            SandboxError: The harness failed.
        """
        result = self._evaluate_once(problem, candidate_source, shape_ids, progress)
        suspicious = [r.shape_id for r in result.shapes if "suspicious" in r.flags]
        if suspicious and result.accepted:
            # Faster than the roofline allows: time those shapes again in a second fresh worker.
            second = self._evaluate_once(problem, candidate_source, suspicious, progress)
            result = confirm_suspicious(result, second)
        if cold_recheck and result.accepted:
            from aka.bench.cold import recheck_cold

            result = recheck_cold(self, problem, candidate_source, result, progress)
        return result

    def _evaluate_once(
        self,
        problem: ProblemSpec,
        candidate_source: str,
        shape_ids: list[str] | None,
        progress: ProgressCallback | None,
    ) -> EvalResult:
        shapes, skipped = self.select_shapes(problem, shape_ids)
        run = _Run(
            problem=problem, source=candidate_source, shapes=shapes, skipped=skipped, mode=self.mode
        )
        if self.cpu:
            run.notes.append(
                "CPU interpreter (TRITON_INTERPRET=1): performance was not measured; "
                "bf16 arithmetic and ~3% of fp8 casts are approximate there; GPU verdicts "
                "are authoritative."
            )
        emit(progress, ProgressEvent("bench", "screen", "static screen", 0, 1))
        early = self._screen(run)
        if early is not None:
            return early
        ref = self._reference(problem, shapes, progress)
        run.device, run.versions = ref.device, ref.versions
        return self._run_candidate(run, ref, progress)

    def _finish(
        self,
        run: _Run,
        verdict: Verdict,
        failure: Failure | None,
        *,
        measured: bool = False,
        score: float | None = None,
        extra: dict[str, Any] | None = None,
    ) -> EvalResult:
        extra = extra or {}
        device = run.device or {}
        manifest = Manifest(
            source_sha256=_sha256(run.source),
            problem_sha256=run.problem.problem_hash(),
            problem_name=run.problem.name,
            device=device.get("name"),
            device_key=extra.get("device_key"),
            driver=device.get("driver_version"),
            clocks=extra.get("clocks", {}),
            versions=run.versions,
            seeds=list(self.config.seeds),
            weights_mode=run.weights_mode,
            mode=run.mode,
            sandbox=run.sandbox,
            ceilings=extra.get("ceilings", {}),
            raw_samples_us=extra.get("raw", {}),
            created_at=_now(),
        )
        rows = [run.rows[s.id] for s in run.shapes if s.id in run.rows]
        if verdict is not Verdict.ACCEPTED:
            score = 0.0
        engagement = _engagement_summary(run)
        return EvalResult(
            verdict=verdict,
            failure=failure,
            performance_measured=measured,
            notes=run.notes,
            shapes=rows,
            skipped_shapes=run.skipped,
            score=score,
            fallback_ratio=engagement.fallback_ratio if engagement else None,
            engagement=engagement,
            manifest=manifest,
        )

    def _screen(self, run: _Run) -> EvalResult | None:
        try:
            report = screen_source(
                run.source,
                allow=run.problem.screen_allow,
                allow_tf32=run.problem.dtype_policy.allow_tf32,
            )
        except SyntaxError as err:
            return self._finish(
                run,
                Verdict.COMPILE_ERROR,
                Failure(
                    kind=Verdict.COMPILE_ERROR,
                    message=f"syntax error at line {err.lineno}: {err.msg}",
                ),
            )
        if not report.passed and self.static_screen:
            lines = "; ".join(f"[{f.rule}] line {f.line}: {f.message}" for f in report.findings[:5])
            return self._finish(
                run,
                Verdict.SCREEN_REJECTED,
                Failure(kind=Verdict.SCREEN_REJECTED, message=lines, findings=report.findings),
            )
        if self.cpu and "cuda" in report.kernel_kinds:
            return self._finish(
                run,
                Verdict.NOT_RUN,
                Failure(
                    kind=Verdict.NOT_RUN,
                    message="CUDA C++ candidates need a CUDA device; run on a GPU machine",
                ),
            )
        allowed = {d.value for d in run.problem.dsl}
        if self.static_screen and "any" not in allowed and not ({*report.kernel_kinds} & allowed):
            return self._finish(
                run,
                Verdict.SCREEN_REJECTED,
                Failure(
                    kind=Verdict.SCREEN_REJECTED,
                    message=f"kernels in {list(report.kernel_kinds)}; "
                    f"the problem allows {sorted(allowed)}",
                ),
            )
        if report.entry_class == "Model" and run.problem.format is not ProblemFormat.ATREX:
            return self._finish(
                run,
                Verdict.SCREEN_REJECTED,
                Failure(
                    kind=Verdict.SCREEN_REJECTED,
                    message="the candidate class must be named ModelNew",
                ),
            )
        run.sandbox["entry_class"] = report.entry_class
        return None

    # ---------------------------------------------------------------- compare and profile
    def compare(
        self,
        problem: ProblemSpec,
        a_source: str,
        b_source: str,
        *,
        shape_ids: list[str] | None = None,
        pairs: int = 3,
        samples_per_batch: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> PairedComparison:
        """Re-measure A (incumbent) and B (candidate) interleaved, ABAB, in two fresh workers.

        Both should be accepted candidates already: this times, it does not check outputs.

        Args:
            problem: The loaded problem.
            a_source: The incumbent's file text.
            b_source: The candidate's file text.
            shape_ids: Shapes to compare (default: the tune shapes).
            pairs: A/B pairs per shape (at least 3).
            samples_per_batch: Timed calls per batch (default: ``min_samples``).
            progress: Receives one ``ProgressEvent`` per pair.

        Returns:
            The comparison; ``measured=False`` with a note on the CPU or when a worker fails.

        Raises:
            ConfigError: ``pairs`` < 3.
            SpecError: An unknown shape id.
            SandboxError: A worker could not be started.
        """
        from aka.bench.paired import compare_paired

        return compare_paired(
            self,
            problem,
            a_source,
            b_source,
            shape_ids=shape_ids,
            pairs=pairs,
            samples_per_batch=samples_per_batch,
            progress=progress,
        )

    def profile(
        self,
        problem: ProblemSpec,
        source: str,
        *,
        shape_id: str | None = None,
        ncu: bool | None = None,
    ) -> ProfileData:
        """Run a candidate once on one shape and collect compiler facts and ncu metrics.

        Args:
            problem: The loaded problem.
            source: The candidate file's text.
            shape_id: The shape (default: the first tune shape; on the CPU the first smoke one).
            ncu: None runs Nsight Compute when ``ncu`` is on the PATH, False never does.

        Returns:
            The facts; on the CPU interpreter none, with a note. Failures are notes too.

        Raises:
            SpecError: An unknown shape id.
            SandboxError: A worker could not be started.
        """
        from aka.bench.profile import profile_candidate

        return profile_candidate(self, problem, source, shape_id=shape_id, ncu=ncu)

    def _entry_class(self, problem: ProblemSpec, source: str) -> tuple[str | None, str]:
        """Screen ``source``; return its entry class, or None and why it cannot run."""
        run = _Run(problem=problem, source=source, shapes=[], skipped=[], mode=self.mode)
        early = self._screen(run)
        if early is not None:
            return None, early.failure.message if early.failure else early.verdict.value
        return str(run.sandbox["entry_class"]), ""

    # ---------------------------------------------------------------- workers
    def _task(self, role: str, problem: ProblemSpec, shapes: list[ShapeCase]) -> dict[str, Any]:
        return {
            "role": role,
            "problem": problem.to_worker_json(),
            "shapes": [s.model_dump(mode="json") for s in shapes],
            "seeds": list(self.config.seeds),
            "device": "cpu" if self.cpu else "cuda",
            "describe_device": not self.cpu,
        }

    def _start(
        self,
        task: dict[str, Any],
        files: dict[str, str],
        timeout_s: float,
        progress: ProgressCallback | None,
        total: int,
        *,
        file_limit_mb: int | None = None,
    ) -> Any:
        def relay(event: dict[str, Any]) -> None:
            if "shape_id" in event:
                emit(
                    progress,
                    ProgressEvent(
                        "bench",
                        str(event["stage"]),
                        str(event["shape_id"]),
                        event.get("done"),
                        total,
                        {"shape_id": event["shape_id"]},
                    ),
                )

        config = self.config
        if file_limit_mb is not None:
            config = config.model_copy(update={"file_size_limit_mb": file_limit_mb})
        return start_worker(
            task,
            files,
            config=config,
            interpret=self.cpu,
            gpu_index=None if self.cpu else self.gpu_index,
            timeout_s=timeout_s,
            on_event=relay,
            extra_env=self.extra_env,
        )

    def _reference(
        self, problem: ProblemSpec, shapes: list[ShapeCase], progress: ProgressCallback | None
    ) -> _Reference:
        key = _sha256(
            f"{problem.problem_hash()}|{[s.id for s in shapes]}|{self.config.seeds}|{self.mode}"
        )
        if key in self._references:
            return self._references[key]
        task = self._task("reference", problem, shapes) | {"count_costs": not self.cpu}
        what = f"the reference of '{problem.name}'"
        with self.trusted_worker(task, what, progress, len(shapes)) as (result, outcome):
            outputs = {}
            for row in result["shapes"]:
                for seed, name in row["files"].items():
                    outputs[(row["shape_id"], int(seed))] = _load_tensors(outcome.workdir / name)
            ref = _Reference(
                outputs=outputs,
                rows={r["shape_id"]: r for r in result["shapes"]},
                versions=result.get("versions", {}),
                device=result.get("device"),
            )
        self._references[key] = ref
        return ref

    @contextmanager
    def trusted_worker(
        self,
        task: dict[str, Any],
        what: str,
        progress: ProgressCallback | None,
        total: int,
    ) -> Iterator[tuple[dict[str, Any], WorkerOutcome]]:
        """Run a worker on trusted problem code only; yield its result and outcome, then clean up.

        Raises:
            BaselineError: The worker reports a failure (``what`` failed, with its traceback).
            SandboxError: The worker could not be started.
        """
        # Trusted code writes the reference's tensors for every shape and seed: a holdout shape
        # can legitimately pass the untrusted workers' file-size limit (RLIMIT_FSIZE).
        handle = self._start(
            task,
            {},
            self.config.worker_timeout_s,
            progress,
            total,
            file_limit_mb=_TRUSTED_FILE_LIMIT_MB,
        )
        try:
            outcome = handle.finish()
            result = outcome.result or {}
            if not result.get("ok"):
                err = result.get("error") or {}
                raise BaselineError(
                    f"{what} failed ({self._exit_text(outcome)}): "
                    f"{err.get('message', 'no result')}\n"
                    f"{err.get('traceback', '') or outcome.log_tail[-1500:]}"
                )
            yield result, outcome
        finally:
            handle.cleanup()

    @staticmethod
    def _exit_text(outcome: WorkerOutcome) -> str:
        if outcome.timed_out:
            return f"timed out after {outcome.wall_s:.0f} s"
        if outcome.signal:
            return f"killed by signal {outcome.signal}"
        return f"exit code {outcome.returncode}"

    def _run_candidate(
        self, run: _Run, ref: _Reference, progress: ProgressCallback | None
    ) -> EvalResult:
        task = self._task("candidate", run.problem, run.shapes) | {
            "candidate_file": "candidate.py",
            "entry_class": run.sandbox["entry_class"],
            "poison_bytes": {
                sid: min(_MAX_POISON_BYTES, 2 * _output_bytes(ref, sid, self.config.seeds[0]))
                for sid in (s.id for s in run.shapes)
            },
            "timing": None if self.cpu else self._timing_task(run),
        }
        handle = self._start(
            task,
            {"candidate.py": run.source},
            self.config.worker_timeout_s,
            progress,
            len(run.shapes),
            file_limit_mb=candidate_file_limit_mb(self.config.file_size_limit_mb, ref, run),
        )
        try:
            handle.wait_for_stage("correctness_done")
            verdict = self._judge_correctness(run, ref, handle)
            if not self.cpu:
                handle.send("go.json", {"time": verdict is Verdict.ACCEPTED})
            outcome = handle.finish()
            run.sandbox.update(
                {
                    "network_isolated": (outcome.result or {}).get("network_isolated"),
                    "worker_wall_s": round(outcome.wall_s, 3),
                }
            )
            failure = self._worker_failure(run, outcome)
            if failure is not None:
                return self._finish(run, failure.kind, failure)
            if verdict is not Verdict.ACCEPTED:
                first = next(r for r in run.rows.values() if r.verdict is not Verdict.ACCEPTED)
                return self._finish(run, verdict, first.failure)
            run.weights_mode = (outcome.result or {}).get("weights_mode")
            if self.cpu:
                return self._finish(run, Verdict.ACCEPTED, None)
            from aka.bench.performance import judge_performance

            return judge_performance(self, run, ref, outcome, progress)
        finally:
            handle.cleanup()

    def _timing_task(self, run: _Run) -> dict[str, Any]:
        from aka.bench.performance import cached_compile_shapes

        baselines = [
            b
            for b in run.problem.baselines
            if b != "torch_compile" or self.config.torch_compile_baseline
        ]
        return self.timing_config(baselines) | {"skip_compile": cached_compile_shapes(self, run)}

    def timing_config(self, baselines: Sequence[str]) -> dict[str, Any]:
        """The worker's timing settings (``bench``'s sampling knobs) and the baselines to time."""
        c = self.config
        return {
            "enabled": True,
            "warmup_ms": c.warmup_ms,
            "min_samples": c.min_samples,
            "max_samples": c.max_samples,
            "sample_budget_s": c.sample_budget_s,
            "l2_flush_factor": c.l2_flush_factor,
            "rotating_sets": c.rotating_sets,
            "baselines": list(baselines),
            "host_lead_us": c.host_lead_us,
            "l2_flush_mode": c.l2_flush_mode,
        }

    def _judge_correctness(self, run: _Run, ref: _Reference, handle: Any) -> Verdict:
        """Compare every saved candidate output with the reference; fill ``run.rows``."""
        done = next((e for e in handle.events if e.get("stage") == "correctness_done"), None)
        if done is None:
            return Verdict.ACCEPTED  # the worker ended early: its exit tells why
        override = self._override(run)
        overall = Verdict.ACCEPTED
        for row in done["shapes"]:
            shape = next(s for s in run.shapes if s.id == row["shape_id"])
            outcome = self._check_shape(run, ref, handle.workdir, row, override)
            run.rows[shape.id] = ShapeResult(
                shape_id=shape.id,
                split=shape.split,
                phase=shape.phase,
                weight=shape.weight,
                verdict=outcome.verdict,
                flags=outcome.flags,
                max_abs_err=outcome.max_abs_err,
                rel_l2_err=outcome.rel_l2_err,
                fallback_ratio=_ratio(run.engagement.get(shape.id)),
                failure=None
                if outcome.ok
                else Failure(kind=outcome.verdict, message=f"shape {shape.id}: {outcome.message}"),
            )
            if not outcome.ok and overall is Verdict.ACCEPTED:
                overall = outcome.verdict
        return overall

    @staticmethod
    def _override(run: _Run) -> Tolerance | None:
        """The problem's tolerance override; an unset half keeps the table's value for fp32."""
        tol = run.problem.tolerance
        if tol is None:
            return None
        base = tolerance_for("float32")
        return Tolerance(
            tol.atol if tol.atol is not None else base.atol,
            tol.rtol if tol.rtol is not None else base.rtol,
            tol.atol_scale,
        )

    def _check_shape(
        self,
        run: _Run,
        ref: _Reference,
        workdir: Path,
        row: dict[str, Any],
        override: Tolerance | None,
    ) -> CheckOutcome:
        if row["mutated"]:
            return CheckOutcome(
                Verdict.MUTATED_INPUT,
                f"inputs {row['mutated']} changed; only "
                f"{run.problem.in_place or 'none'} may (in_place)",
            )
        if row.get("aliased"):
            return CheckOutcome(
                Verdict.ALIASED_OUTPUT,
                f"outputs {row['aliased']} share memory with an input or a weight; "
                "return freshly allocated tensors",
            )
        worst = CheckOutcome(Verdict.ACCEPTED)
        for seed, name in row["files"].items():
            try:
                cand = _load_tensors(workdir / name)
            except Exception as err:  # noqa: BLE001 - an unreadable output is the candidate's failure
                return CheckOutcome(Verdict.BAD_STRUCTURE, f"output could not be read back: {err}")
            outcome = self._compare(run, ref, row["shape_id"], int(seed), cand, override)
            if not outcome.ok:
                outcome.message = f"seed {seed}: {outcome.message}"
                return outcome
            worst = worst.combined(outcome)
        failed, engagement = judge_guards(self, run, ref, workdir, row, override)
        if engagement is not None:
            run.engagement[row["shape_id"]] = engagement
        return failed if failed is not None else worst

    def _compare(
        self,
        run: _Run,
        ref: _Reference,
        shape_id: str,
        seed: int,
        cand: dict[str, Any],
        override: Tolerance | None,
        *,
        with_extra: bool = True,
    ) -> CheckOutcome:
        reference = ref.outputs[(shape_id, seed)]
        if not with_extra:
            reference, cand = reference | {"extra": {}}, cand | {"extra": {}}
        return self.compare_with(
            run, cand, reference, override, int(ref.rows[shape_id].get("reduction_len", 0))
        )

    def compare_with(
        self,
        run: _Run,
        cand: dict[str, Any],
        reference: dict[str, Any],
        override: Tolerance | None,
        reduction_len: int,
    ) -> CheckOutcome:
        """Compare ``cand`` with ``reference`` (saved outputs) under the problem's policy."""
        return compare_outputs(
            cand,
            reference,
            fp8_scales=run.problem.fp8_scales or _default_fp8_scales(reference),
            allow_tf32=run.problem.dtype_policy.allow_tf32,
            reduction_len=reduction_len,
            override=override,
            match_dtype=run.problem.dtype_policy.match_output_dtype,
            cpu=self.cpu,
        )

    def _worker_failure(self, run: _Run, outcome: WorkerOutcome) -> Failure | None:
        """Turn a worker's abnormal end into a verdict (None when it finished normally)."""
        result, tail = outcome.result, outcome.log_tail[-3000:]
        if outcome.timed_out:
            return Failure(
                kind=Verdict.TIMEOUT,
                message=f"the candidate did not finish within "
                f"{self.config.worker_timeout_s:.0f} s (stage {outcome.last_stage})",
                log_tail=tail,
            )
        if result is None:
            sig = outcome.signal
            if sig == _SIGXCPU:
                kind, why = Verdict.TIMEOUT, "hit the CPU-time limit"
            elif sig == _SIGKILL:
                kind, why = Verdict.OOM, "was killed (SIGKILL: usually the out-of-memory killer)"
            elif sig in _CRASH_SIGNALS:
                kind, why = Verdict.CRASH, f"crashed with signal {sig}"
            else:
                kind, why = Verdict.CRASH, f"exited ({self._exit_text(outcome)}) without a result"
            return Failure(
                kind=kind, message=f"the worker {why} in stage {outcome.last_stage}", log_tail=tail
            )
        if result.get("ok"):
            return None
        err = result.get("error") or {}
        kind = _FAILURE_KINDS.get(str(err.get("kind")), Verdict.RUNTIME_ERROR)
        where = f" on shape {err['shape_id']}" if err.get("shape_id") else ""
        return Failure(
            kind=kind,
            message=f"{err.get('stage', '?')}{where}: {err.get('message', '')}",
            log_tail=(err.get("traceback") or "") + tail,
        )


def _ratio(outcome: EngagementOutcome | None) -> float | None:
    return None if outcome is None or outcome.fallback_ratio is None else outcome.fallback_ratio


def _engagement_summary(run: _Run) -> Engagement | None:
    """Stage 4's evidence over the shapes judged so far (None when no shape got that far)."""
    judged = [e for e in run.engagement.values() if e.fallback_ratio is not None]
    if not judged:
        return None
    worst = max(judged, key=lambda e: e.fallback_ratio or 0.0)
    kernels = sorted({k for e in judged for k in e.kernels})
    method = "profiler" if any(e.method == "profiler" for e in judged) else "interpreter-bytes"
    return Engagement(
        method=method,
        engagement_min=run.problem.engagement_min,
        fallback_ratio=round(worst.fallback_ratio or 0.0, 6),
        own_kernels=kernels,
        library={k: round(v, 3) for k, v in worst.library.items()},
    )
