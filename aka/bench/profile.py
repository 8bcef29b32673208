"""Profile data for the agent's profile node (ARCHITECTURE.md §5, "profile").

``Scorer.profile`` runs a candidate once on one shape in a fresh sandboxed worker (role
``profile``) and collects two kinds of facts:

- **compiler facts** of the Triton kernels the candidate's module owns: the worker walks the
  module's globals for ``JITFunction`` objects (through ``autotune``/``heuristics`` wrappers) and
  reads their compiled-kernel caches after the forward ran: name, registers, spills, shared memory,
  warps, stages. Triton 3.6 keeps ``device_caches[dev] = (kernels, target, backend, binder)``,
  3.7/3.8 add a key cache as the second item, older versions ``cache[dev]``; every attribute is
  read with ``getattr`` and skipped when missing.
- **Nsight Compute metrics** when ``ncu`` is on the PATH: the same worker runs again under
  ``ncu --clock-control none --target-processes all --csv --page raw``, restricted to the
  candidate's own kernels by name, and the CSV is parsed (DRAM and SM throughput % of peak,
  achieved occupancy, duration, top warp-stall reasons). The worker keeps its environment
  allow-list and rlimits; only its network namespace is skipped under ncu, which talks to its
  target over a local socket (inside a fresh namespace the profiled worker hung until killed, on
  the H200 machine). An ncu failure (permissions, timeout) is a note, never an error.

Must not judge the candidate (``aka.agent.profile`` diagnoses) and never needs a GPU to import.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aka.bench.guards import cuda_global_names
from aka.spec import ProblemSpec, ShapeCase, Split

if TYPE_CHECKING:
    import types

    from aka.bench.pipeline import Scorer
    from aka.bench.problem_runtime import ProblemRuntime
    from aka.bench.sandbox import WorkerOutcome
    from aka.bench.worker import EventLog

__all__ = [
    "NCU_METRICS",
    "KernelFacts",
    "NcuKernelMetrics",
    "ProfileData",
    "find_ncu",
    "kernel_facts",
    "ncu_command",
    "parse_ncu_csv",
    "profile_candidate",
    "run_profile_worker",
]

#: Metrics asked for by name; the WarpStateStats section adds the stall reasons.
NCU_METRICS = (
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
)
_NCU_LAUNCHES = 16
_NCU_TIMEOUT_S = 300.0
_NCU_LOG = "ncu.log"
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
_TIME_UNITS_US = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}
_TOP_STALLS = 3


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KernelFacts(_Model):
    """What the compiler made of one specialization of one Triton kernel."""

    name: str = Field(description="Compiled kernel name (the @triton.jit function's name).")
    n_regs: int | None = Field(default=None, description="Registers per thread.")
    n_spills: int | None = Field(default=None, description="Registers spilled to local memory.")
    shared_bytes: int | None = Field(default=None, description="Shared memory per program.")
    num_warps: int | None = None
    num_stages: int | None = None


class NcuKernelMetrics(_Model):
    """Nsight Compute's view of one of the candidate's kernels (its last profiled launch)."""

    name: str
    duration_us: float | None = None
    dram_throughput_pct: float | None = Field(default=None, description="% of peak DRAM bytes/s.")
    sm_throughput_pct: float | None = Field(default=None, description="% of peak SM throughput.")
    achieved_occupancy_pct: float | None = Field(default=None, description="Active warps / max.")
    stalls: dict[str, float] = Field(
        default_factory=dict,
        description="Top warp-stall reasons: warps stalled per issued instruction, by reason.",
    )


class ProfileData(_Model):
    """The outcome of ``Scorer.profile``: compiler facts and (maybe) Nsight Compute metrics."""

    shape_id: str | None = None
    mode: Literal["gpu", "cpu_interpreter"]
    kernels: list[KernelFacts] = Field(default_factory=list)
    ncu: list[NcuKernelMetrics] = Field(default_factory=list)
    ncu_ran: bool = Field(default=False, description="Whether an ncu pass produced metrics.")
    device_limits: dict[str, int] = Field(
        default_factory=dict,
        description="max_shared_bytes, regs_per_sm, max_threads_per_sm, sm_count, warp_size.",
    )
    notes: list[str] = Field(default_factory=list)
    wall_s: float = 0.0


# ------------------------------------------------------------------------------------ parent side
def _profile_shape(scorer: Scorer, problem: ProblemSpec, shape_id: str | None) -> ShapeCase:
    if shape_id is not None:
        return scorer.select_shapes(problem, [shape_id])[0][0]
    tune = problem.shapes_in({Split.TUNE})
    return tune[0] if tune and not scorer.cpu else scorer.select_shapes(problem, None)[0][0]


def find_ncu() -> str | None:
    """Return the ``ncu`` executable: on the PATH, else in CUDA's or Nsight's usual folders."""
    found = shutil.which("ncu")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    places = [Path(home) / "bin" / "ncu", *sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"))]
    return next((str(p) for p in reversed(places) if p.is_file()), None)


def profile_candidate(
    scorer: Scorer,
    problem: ProblemSpec,
    source: str,
    *,
    shape_id: str | None = None,
    ncu: bool | None = None,
) -> ProfileData:
    """Collect compiler facts (and ncu metrics) for one candidate; see ``Scorer.profile``.

    Raises:
        SpecError: An unknown shape id.
        SandboxError: A worker could not be started.
    """
    started = time.monotonic()
    shape = _profile_shape(scorer, problem, shape_id)
    data = ProfileData(shape_id=shape.id, mode=scorer.mode)

    def done(note: str | None = None) -> ProfileData:
        if note:
            data.notes.append(note)
        data.wall_s = round(time.monotonic() - started, 3)
        return data

    if scorer.cpu:
        return done("CPU interpreter: no compiled kernel, so no compiler facts or ncu metrics")
    entry, why = scorer._entry_class(problem, source)
    if entry is None:
        return done(f"the candidate cannot run: {why}")
    task = scorer._task("profile", problem, [shape]) | {
        "candidate_file": "candidate.py",
        "entry_class": entry,
        "calls": 2,
    }
    outcome = _run(scorer, task, source, ())
    result = outcome.result or {}
    if not result.get("ok"):
        return done(f"the profile worker failed: {outcome.describe()}")
    data.kernels = [KernelFacts.model_validate(k) for k in result.get("kernels", [])]
    data.device_limits = {k: int(v) for k, v in (result.get("device_limits") or {}).items()}
    if not data.kernels:
        data.notes.append("no compiled Triton kernel found in the candidate's module globals")
    exe = find_ncu() if ncu is not False else None
    if exe is None:
        return done("ncu was not asked for" if ncu is False else "ncu is not on the PATH")
    names = sorted({k.name for k in data.kernels} | cuda_global_names(source))
    if not names:
        return done("ncu skipped: no kernel name of the candidate's own is known")
    data.ncu, note = _run_ncu(scorer, task, source, exe, names)
    data.ncu_ran = bool(data.ncu)
    return done(note)


def _run(
    scorer: Scorer, task: dict[str, Any], source: str, launcher: tuple[str, ...]
) -> WorkerOutcome:
    from aka.bench.sandbox import start_worker

    timeout_s = scorer.config.worker_timeout_s
    handle = start_worker(
        task,
        {"candidate.py": source},
        config=scorer.config,
        interpret=False,
        gpu_index=scorer.gpu_index,
        # a stuck ncu (it hangs rather than fails when it cannot reach its target) costs little
        timeout_s=min(timeout_s, _NCU_TIMEOUT_S) if launcher else timeout_s,
        launcher=launcher,
    )
    try:
        outcome = handle.finish()
        ncu_log = outcome.workdir / _NCU_LOG
        if ncu_log.is_file():  # read before cleanup removes the directory
            outcome.result = (outcome.result or {}) | {"_ncu_log": _read_text(ncu_log)}
        outcome.result = (outcome.result or {}) | {
            "_worker_log": _read_text(outcome.workdir / "worker.log")
        }
        return outcome
    finally:
        handle.cleanup()


def _run_ncu(
    scorer: Scorer, task: dict[str, Any], source: str, exe: str, names: list[str]
) -> tuple[list[NcuKernelMetrics], str | None]:
    outcome = _run(
        scorer, task | {"isolate_network": False}, source, tuple(ncu_command(exe, names))
    )
    result = outcome.result or {}
    text = f"{result.get('_ncu_log', '')}\n{result.get('_worker_log', '')}"
    metrics = [m for m in parse_ncu_csv(text) if any(n in m.name for n in names)]
    note = "ncu pass ran without a network namespace (ncu talks to its target over a socket)"
    if metrics:
        return metrics, note
    errors = [ln for ln in text.splitlines() if "==ERROR==" in ln or "==WARNING==" in ln]
    detail = "; ".join(errors[-3:]) or outcome.describe()
    return [], f"ncu produced no metrics for {names}: {detail[:400]}"


def ncu_command(exe: str, kernel_names: list[str]) -> list[str]:
    """Build the ncu prefix that profiles only ``kernel_names`` (the worker command follows)."""
    pattern = "|".join(re.escape(n) for n in kernel_names)
    return [
        exe,
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--csv",
        "--page",
        "raw",
        "--metrics",
        ",".join(NCU_METRICS),
        "--section",
        "WarpStateStats",
        "--kernel-name",
        f"regex:({pattern})",
        "--launch-count",
        str(_NCU_LAUNCHES),
        "--log-file",
        _NCU_LOG,
    ]


def _read_text(path: Path, max_chars: int = 2_000_000) -> str:
    try:
        return path.read_text(errors="replace")[-max_chars:]
    except OSError:
        return ""


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[NcuKernelMetrics]:
    """Parse ``ncu --csv --page raw`` output (other log lines are skipped).

    The header row names the metrics, the next row gives their units, then one row per profiled
    launch. A kernel launched several times keeps its last launch (steady state, caches warm).

    Args:
        text: ncu's output, possibly mixed with other lines.

    Returns:
        One entry per kernel name, in order of first appearance.
    """
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    start = next((i for i, ln in enumerate(lines) if '"Kernel Name"' in ln), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], rows[1:]
    units = body.pop(0) if body and not body[0][0].strip() else [""] * len(header)
    by_name: dict[str, NcuKernelMetrics] = {}
    for row in body:
        if len(row) != len(header) or row[0] == header[0]:
            continue
        cells = dict(zip(header, row, strict=True))
        unit = dict(zip(header, units, strict=False))
        by_name[cells["Kernel Name"]] = _kernel_metrics(cells, unit)
    return list(by_name.values())


def _kernel_metrics(cells: dict[str, str], unit: dict[str, str]) -> NcuKernelMetrics:
    duration = _number(cells.get("gpu__time_duration.sum", ""))
    scale = _TIME_UNITS_US.get(unit.get("gpu__time_duration.sum", "").strip(), 1e-3)
    stalls = {
        m.group(1): v
        for key, value in cells.items()
        if (m := _STALL.match(key)) and m.group(1) != "selected"
        if (v := _number(value)) is not None
    }
    top = dict(sorted(stalls.items(), key=lambda kv: -kv[1])[:_TOP_STALLS])
    return NcuKernelMetrics(
        name=cells["Kernel Name"],
        duration_us=None if duration is None else duration * scale,
        dram_throughput_pct=_first(cells, "dram__throughput", "gpu__dram_throughput"),
        sm_throughput_pct=_first(cells, "sm__throughput"),
        achieved_occupancy_pct=_first(cells, "sm__warps_active"),
        stalls=top,
    )


def _first(cells: dict[str, str], *prefixes: str) -> float | None:
    for prefix in prefixes:
        for suffix in (".avg.pct_of_peak_sustained_elapsed", ".avg.pct_of_peak_sustained_active"):
            value = _number(cells.get(prefix + suffix, ""))
            if value is not None:
                return value
    return None


# ------------------------------------------------------------------------------------ worker side
def run_profile_worker(
    task: dict[str, Any], rt: ProblemRuntime, ev: EventLog, workdir: Path
) -> dict[str, Any]:
    """Worker role ``profile``: run the candidate's forward, then read its compiled kernels."""
    import torch

    from aka.bench.problem_runtime import load_module
    from aka.bench.worker import WorkerFailure, _classify, _load_weights, _versions

    ev.emit("compile")
    shape, seed = task["shapes"][0], task["seeds"][0]
    try:
        module = load_module("candidate", workdir / task["candidate_file"])
        model = rt.build_model(getattr(module, task["entry_class"]), shape, seed)
        _load_weights(model, rt.build_model(rt.reference.Model, shape, seed))
        args, kwargs = rt.make_inputs(shape, seed)
        ev.emit("profile", shape_id=shape["id"])
        with torch.no_grad():
            for _ in range(int(task.get("calls", 2))):
                model(*args, **kwargs)
        if rt.device.startswith("cuda"):
            torch.cuda.synchronize()
    except BaseException as err:  # a candidate failing here is data for the parent
        raise WorkerFailure(
            _classify(err, ev.stage), f"{type(err).__name__}: {err}", "profile", shape["id"]
        ) from err
    return {
        "ok": True,
        "kernels": kernel_facts(module),
        "device_limits": _device_limits() if rt.device.startswith("cuda") else {},
        "versions": _versions(),
    }


def kernel_facts(module: types.ModuleType) -> list[dict[str, Any]]:
    """Return compiler facts of every compiled Triton kernel reachable from ``module``'s globals.

    Args:
        module: The candidate's module, after its forward ran (kernels compiled and loaded).

    Returns:
        One dict per compiled specialization (``KernelFacts`` fields); empty under the
        interpreter or when triton is missing.
    """
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return []
    found: dict[int, Any] = {}
    for obj in list(vars(module).values()):
        for _ in range(4):  # autotune -> heuristics -> jit
            if isinstance(obj, JITFunction):
                found[id(obj)] = obj
                break
            try:
                obj = getattr(obj, "fn", None)
            except Exception:  # noqa: BLE001 - candidate objects may raise on any attribute
                break
            if obj is None:
                break
    facts = []
    for fn in found.values():
        for compiled in _compiled_kernels(fn):
            facts.append(_facts(fn, compiled))
    return facts


def _compiled_kernels(fn: Any) -> list[Any]:
    """Compiled kernels in a JITFunction's caches, whatever this triton version calls them."""
    kernels: list[Any] = []
    caches = getattr(fn, "device_caches", None)  # triton >= 3.3
    if not isinstance(caches, dict):
        caches = getattr(fn, "cache", None)  # older: {device: {key: kernel}}
    for entry in caches.values() if isinstance(caches, dict) else ():
        cache = entry[0] if isinstance(entry, tuple | list) and entry else entry
        if isinstance(cache, dict):
            kernels.extend(cache.values())
    return kernels


def _facts(fn: Any, compiled: Any) -> dict[str, Any]:
    meta = getattr(compiled, "metadata", None)

    def pick(*names: str) -> int | None:
        for holder in (compiled, meta):
            for name in names:
                value = getattr(holder, name, None)
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
        return None

    name = getattr(compiled, "name", None) or getattr(meta, "name", None)
    return {
        "name": str(name or getattr(fn, "__name__", "kernel")),
        "n_regs": pick("n_regs"),
        "n_spills": pick("n_spills"),
        "shared_bytes": pick("shared"),
        "num_warps": pick("num_warps"),
        "num_stages": pick("num_stages"),
    }


def _device_limits() -> dict[str, int]:
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    wanted = {
        "max_shared_bytes": "shared_memory_per_block_optin",
        "regs_per_sm": "regs_per_multiprocessor",
        "max_threads_per_sm": "max_threads_per_multi_processor",
        "sm_count": "multi_processor_count",
        "warp_size": "warp_size",
    }
    return {
        key: int(value)
        for key, attr in wanted.items()
        if isinstance(value := getattr(props, attr, None), int)
    }
