"""The ``candidate`` worker role: guarded import, correctness, guard probes, then timing.

Runs untrusted code, so it only produces raw facts into its directory; the parent decides every
verdict. Order (ARCHITECTURE.md §4): baselines are built and fingerprinted first (GPU); the guard
(``aka.bench.guards``) is installed before the candidate is imported; every shape runs on every
seed with fresh inputs and poisoned memory (the first seed traced: launches and library ops);
then the probes of the shape: the same inputs twice, new values at the old addresses, a ghost call
with the candidate's kernels skipped, and on a GPU a profiler pass. Tampering (replaced timers or
entry points, started threads or processes) ends the worker with ``tampered``.
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

from aka.bench.guards import (
    CandidateGuard,
    Trace,
    output_problems,
    overlapping,
    profile_device_time,
    spans_of,
)
from aka.bench.problem_runtime import ProblemRuntime, clone_inputs, load_module
from aka.bench.worker import (
    CallFacts,
    EventLog,
    WorkerFailure,
    _classify,
    _load_weights,
    _run_one,
    _save,
    _versions,
)

__all__ = ["run_candidate"]

_GO_FILE = "go.json"
#: The ghost probe draws inputs at ``seeds[0] + this``: a seed no other call of the worker used.
_GHOST_SEED_OFFSET = 7_340_033


def _check_tamper(guard: CandidateGuard, when: str) -> None:
    found = guard.tampering()
    if found:
        raise WorkerFailure("tampered", f"{when}: the candidate {'; '.join(found)}", "guard")


def _model_pair(
    rt: ProblemRuntime, cls: type, shape: dict[str, Any], seed: int
) -> tuple[Any, Any, str]:
    """Build the candidate and reference models; load the reference's weights where they match.

    Returns:
        The candidate model, the reference model and the weights mode (loaded, seeded or none).
    """
    model = rt.build_model(cls, shape, seed)
    reference = rt.build_model(rt.reference.Model, shape, seed)
    return model, reference, _load_weights(model, reference)


def _weights(*models: Any) -> list[Any]:
    tensors: list[Any] = []
    for m in models:
        if hasattr(m, "parameters"):
            tensors += list(m.parameters()) + list(m.buffers())
    return tensors


def _aliased(call: CallFacts, in_place: list[str], owned: list[Any]) -> list[str]:
    """Outputs sharing memory with inputs (other than in_place ones) or weights."""
    inputs = {k: v for k, v in call.inputs.items() if k not in in_place}
    against = spans_of(inputs.values()) + spans_of(owned)
    return overlapping(call.tensors, against)


def _check_shape_call(call: CallFacts, shape_id: str, stage: str) -> None:
    problems = output_problems(call.tensors)
    if problems:
        raise WorkerFailure("bad_structure", "; ".join(problems), stage, shape_id)


def run_candidate(
    task: dict[str, Any], rt: ProblemRuntime, ev: EventLog, workdir: Path
) -> dict[str, Any]:
    """Build baselines, import the candidate under guard, check it per shape, probe it, time it."""
    timing = task.get("timing") or {}
    from aka.bench.worker_timing import TimingSession  # CUDA-only helpers, imported lazily

    session = TimingSession(rt, task, ev) if timing.get("enabled") else None
    if session is not None:
        session.build_baselines()
    path = workdir / task["candidate_file"]
    guard = CandidateGuard(str(path), rt.reference)
    guard.install()
    ev.emit("compile")
    try:
        module = load_module("candidate", path)
        cls = getattr(module, task["entry_class"])
    except BaseException as err:  # a candidate's import failing is its verdict, not ours
        raise WorkerFailure(
            _classify(err, "compile"), f"{type(err).__name__}: {err}", "compile"
        ) from err
    _check_tamper(guard, "after import")
    if session is not None:
        session.check_fingerprints("after import")
    rows, weights_mode = [], None
    in_place = list(task["problem"]["in_place"])
    for i, shape in enumerate(task["shapes"]):
        ev.emit("correctness", shape_id=shape["id"], done=i, total=len(task["shapes"]))
        row: dict[str, Any] = {"shape_id": shape["id"], "files": {}, "mutated": [], "aliased": []}
        mutated_all: set[str] = set()
        aliased_all: set[str] = set()
        for seed in task["seeds"]:
            stage = "compile" if (i == 0 and seed == task["seeds"][0]) else "correctness"
            traced = seed == task["seeds"][0]
            try:
                model, reference, weights_mode = _model_pair(rt, cls, shape, seed)
                trace = Trace() if traced else None
                call = _run_one(
                    model,
                    rt,
                    shape,
                    seed,
                    in_place,
                    task["poison_bytes"].get(shape["id"], 0),
                    around=partial(guard.tracing, trace) if trace is not None else nullcontext,
                )
            except WorkerFailure:
                raise
            except BaseException as err:
                raise WorkerFailure(
                    _classify(err, stage), f"{type(err).__name__}: {err}", stage, shape["id"]
                ) from err
            _check_shape_call(call, shape["id"], stage)
            if trace is not None:
                row["trace"] = trace.to_json() | {
                    "cuda_kernels": sorted(guard.cuda_kernel_names),
                    "outputs_covered": overlapping(call.tensors, trace.launch_spans),
                    "outputs": sorted(k for k, t in call.tensors.items() if t.numel()),
                    "inputs_covered": overlapping(
                        {k: v for k, v in call.inputs.items() if hasattr(v, "data_ptr")},
                        trace.launch_spans,
                    ),
                }
            aliased_all.update(_aliased(call, in_place, _weights(model, reference)))
            name = f"cand_{i}_{seed}.pt"
            _save(workdir / name, call.structure, call.tensors, call.inplace)
            row["files"][str(seed)] = name
            mutated_all.update(call.mutated)
        row["mutated"], row["aliased"] = sorted(mutated_all), sorted(aliased_all)
        if not row["mutated"] and not row["aliased"]:
            ev.emit("probes", shape_id=shape["id"], done=i, total=len(task["shapes"]))
            row["probes"] = _probe(guard, rt, cls, shape, task, workdir, i, row.get("trace"))
        _check_tamper(guard, f"after shape {shape['id']}")
        rows.append(row)
    ev.emit("correctness_done", shapes=rows)
    result: dict[str, Any] = {
        "ok": True,
        "shapes": rows,
        "weights_mode": weights_mode,
        "versions": _versions(),
    }
    if session is not None:
        result["timing"] = session.time_if_asked(cls, workdir, _wait_for_go(workdir, ev))
        _check_tamper(guard, "after timing")
    return result


def _probe(
    guard: CandidateGuard,
    rt: ProblemRuntime,
    cls: type,
    shape: dict[str, Any],
    task: dict[str, Any],
    workdir: Path,
    index: int,
    trace: dict[str, Any] | None,
) -> dict[str, Any]:
    """Run the probes of one shape; save their outputs; return file names and facts.

    ``again``: the same input tensors a second time. ``moved``: the second seed's values copied
    into the first seed's tensors (same addresses) with a model rebuilt under the second seed.
    ``ghost``: inputs of an unused seed, once for real (``ghost_real``, kept alive) and once with
    the candidate's kernels skipped. ``profile`` (GPU): device time
    of one warm call split into the candidate's kernels and library ones.
    """
    s0, s1 = task["seeds"][0], task["seeds"][1]
    in_place = list(task["problem"]["in_place"])
    poison = task["poison_bytes"].get(shape["id"], 0)
    out: dict[str, Any] = {"files": {}, "errors": {}}

    def save(key: str, call: CallFacts, seed: int) -> None:
        name = f"probe_{index}_{key}.pt"
        _save(workdir / name, call.structure, call.tensors, call.inplace)
        out["files"][key] = {"file": name, "seed": seed}

    try:
        model, _, _ = _model_pair(rt, cls, shape, s0)
        args, kwargs = rt.make_inputs(shape, s0)
        pristine = clone_inputs(args, kwargs)
        first = _run_one(model, rt, shape, s0, in_place, poison, inputs=(args, kwargs))
        save("first", first, s0)
        _restore(args, kwargs, pristine)
        again = _run_one(model, rt, shape, s0, in_place, poison, inputs=(args, kwargs))
        save("again", again, s0)
        new_args, new_kwargs = rt.make_inputs(shape, s1)
        _restore(args, kwargs, (new_args, new_kwargs))
        model1, _, _ = _model_pair(rt, cls, shape, s1)
        moved = _run_one(model1, rt, shape, s1, in_place, poison, inputs=(args, kwargs))
        save("moved", moved, s1)
        if rt.device.startswith("cuda"):
            out["profile"] = _profile(guard, model, rt, shape, s0, trace)
    except WorkerFailure:
        raise
    except BaseException as err:  # noqa: BLE001 - a probe failing is evidence, not a crash
        out["errors"]["repeat"] = f"{type(err).__name__}: {err}"
    try:
        # Inputs of a seed never used before, and the real output kept alive (and not yet copied)
        # during the ghost call: no freed block the allocator might hand the ghost's outputs
        # holds this answer.
        fresh = s0 + _GHOST_SEED_OFFSET
        model, _, _ = _model_pair(rt, cls, shape, s0)
        args, kwargs = rt.make_inputs(shape, fresh)
        pristine = clone_inputs(args, kwargs)
        real = _run_one(model, rt, shape, fresh, in_place, poison, inputs=(args, kwargs))
        # An in-place operator's answer lives in its inputs (and an output may alias them): keep
        # a copy before the inputs are restored for the ghost call, or both would show them.
        _detach_from_inputs(real, args, kwargs)
        _restore(args, kwargs, pristine)
        with guard.ghosted():
            ghost = _run_one(model, rt, shape, fresh, in_place, poison, inputs=(args, kwargs))
        # saved only now: a saved copy freed before the ghost call could become its output
        save("ghost_real", real, fresh)
        save("ghost", ghost, fresh)
    except BaseException as err:  # noqa: BLE001 - a ghost call may fail: the kernels mattered
        out["errors"]["ghost"] = f"{type(err).__name__}: {err}"
    return out


def _detach_from_inputs(call: CallFacts, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Replace ``call``'s outputs and in-place tensors that share memory with an input by copies."""
    import torch

    inputs = [t for t in [*args, *kwargs.values()] if isinstance(t, torch.Tensor)]
    storages = {t.untyped_storage().data_ptr() for t in inputs}
    for store in (call.tensors, call.inplace):
        for key, value in store.items():
            if isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() in storages:
                store[key] = value.clone()


def _restore(
    args: list[Any], kwargs: dict[str, Any], source: tuple[list[Any], dict[str, Any]]
) -> None:
    """Copy ``source``'s tensor values into the tensors of ``args``/``kwargs`` (same addresses)."""
    import torch

    src_args, src_kwargs = source
    pairs = list(zip(args, src_args, strict=False)) + [
        (kwargs[k], src_kwargs[k]) for k in kwargs if k in src_kwargs
    ]
    with torch.no_grad():
        for dst, src in pairs:
            if torch.is_tensor(dst) and torch.is_tensor(src) and dst.shape == src.shape:
                dst.copy_(src)


def _profile(
    guard: CandidateGuard,
    model: Any,
    rt: ProblemRuntime,
    shape: dict[str, Any],
    seed: int,
    trace: dict[str, Any] | None,
) -> dict[str, Any]:
    import torch

    args, kwargs = rt.make_inputs(shape, seed)
    own = set((trace or {}).get("kernels", [])) | guard.cuda_kernel_names

    def call() -> None:
        with torch.no_grad():
            model(*args, **kwargs)

    call()  # warm: compiled and autotuned before the profiled call
    torch.cuda.synchronize()
    try:
        return profile_device_time(call, own) | {"own_names": sorted(own)}
    except Exception as err:  # noqa: BLE001 - the profiler failing is reported, not fatal
        return {"error": f"{type(err).__name__}: {err}"}


def _wait_for_go(workdir: Path, ev: EventLog, timeout_s: float = 600.0) -> dict[str, Any]:
    ev.emit("awaiting_go")
    deadline = time.monotonic() + timeout_s
    path = workdir / _GO_FILE
    while time.monotonic() < deadline:
        if path.exists():
            return dict(json.loads(path.read_text()))
        time.sleep(0.01)
    return {"time": False, "reason": "parent never answered"}
