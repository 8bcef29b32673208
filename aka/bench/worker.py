"""The scorer's worker process (started as ``python -m aka.bench._worker_main WORKDIR``).

Runs untrusted code, so it only produces raw facts (output tensors, samples, stage markers) into
its directory; the parent decides every verdict. This module holds the ``reference`` role
(reference outputs and roofline costs) and what every role shares; ``candidate`` (baselines
first, then the guarded import, correctness, the guard probes and, once the parent says so, timing)
lives in ``aka.bench.worker_candidate``, ``pair`` in ``aka.bench.paired``, ``profile`` in
``aka.bench.profile`` and ``signature`` in ``aka.bench.signature``. Must not import anything the
parent would need to trust afterwards; it never sees reference outputs.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aka.bench.problem_runtime import (
    BadStructure,
    ProblemRuntime,
    clone_inputs,
    flatten_outputs,
    named_inputs,
)

__all__ = ["main"]

_CLONE_NEWNET = 0x40000000
#: How allocators word running out of memory when they raise RuntimeError instead of MemoryError.
_OOM_MARKERS = (
    "out of memory",
    "not enough memory",
    "can't allocate memory",
    "cannot allocate memory",
)


class WorkerFailure(Exception):
    """A failure with a verdict kind attached (the parent maps ``kind`` to a Verdict)."""

    def __init__(self, kind: str, message: str, stage: str, shape_id: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.stage, self.shape_id = kind, stage, shape_id

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": str(self),
            "stage": self.stage,
            "shape_id": self.shape_id,
            "traceback": traceback.format_exc(limit=12),
        }


class EventLog:
    """Append-only JSON lines the parent tails for progress and stage markers."""

    def __init__(self, path: Path) -> None:
        self._fh = path.open("a", buffering=1)
        self.stage = "started"

    def emit(self, stage: str, **data: Any) -> None:
        self.stage = stage
        self._fh.write(json.dumps({"stage": stage, "t": time.time(), **data}) + "\n")
        self._fh.flush()


def _isolate_network() -> bool:
    """Enter a new, empty network namespace (needs CAP_SYS_ADMIN; False where refused)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.unshare(_CLONE_NEWNET) == 0)
    except (OSError, AttributeError):
        return False


def _classify(err: BaseException, stage: str) -> str:
    import torch

    name = type(err).__name__
    text = str(err).lower()
    if isinstance(err, torch.OutOfMemoryError | MemoryError) or any(
        m in text for m in _OOM_MARKERS
    ):
        return "oom"
    if isinstance(err, BadStructure):
        return "bad_structure"
    if (
        stage == "compile"
        or "CompilationError" in name
        or isinstance(err, SyntaxError | ImportError)
    ):
        return "compile_error"
    return "runtime_error"


def _save(
    path: Path, structure: dict[str, Any], tensors: dict[str, Any], extra: dict[str, Any]
) -> None:
    import torch

    torch.save(
        {
            "structure": structure,
            "tensors": {k: t.detach().to("cpu").clone() for k, t in tensors.items()},
            "extra": {k: t.detach().to("cpu").clone() for k, t in extra.items()},
        },
        path,
    )


def _versions() -> dict[str, str]:
    import torch

    out = {"python": sys.version.split()[0], "torch": torch.__version__}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        pass
    if torch.version.cuda:
        out["cuda"] = str(torch.version.cuda)
    return out


def _same_tensor(a: Any, b: Any) -> bool:
    """Equal shape, dtype and values (NaN equal to NaN)."""
    import torch

    if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        a32, b32 = a.float(), b.float()
        return bool(((a32 == b32) | (a32.isnan() & b32.isnan())).all())
    return bool(torch.equal(a, b))


@dataclass
class CallFacts:
    """One forward call: its outputs, the in-place inputs, mutated inputs and the live inputs."""

    structure: dict[str, Any]
    tensors: dict[str, Any]
    inplace: dict[str, Any]
    mutated: list[str]
    inputs: dict[str, Any]


def _poison(rt: ProblemRuntime, poison_bytes: int) -> None:
    """Fill freed allocator memory with 0xFF (NaN in every float format).

    An output that is never written then shows up as NaN instead of whatever an earlier call left.
    """
    import torch

    if poison_bytes:
        if rt.device.startswith("cuda"):
            # The caching allocator would hand a new output the exact block an earlier output
            # (holding a correct answer) was freed from; return every free block first, so the
            # next allocations are carved out of the poisoned one.
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        poison = torch.full((poison_bytes,), 255, dtype=torch.uint8, device=rt.device)
        del poison


def _run_one(
    model: Any,
    rt: ProblemRuntime,
    shape: dict[str, Any],
    seed: int,
    in_place: list[str],
    poison_bytes: int,
    *,
    inputs: tuple[list[Any], dict[str, Any]] | None = None,
    around: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> CallFacts:
    """Call ``model`` once on fresh inputs (or on ``inputs``), inside ``around()``."""
    import torch

    args, kwargs = inputs if inputs is not None else rt.make_inputs(shape, seed)
    pristine = named_inputs(*clone_inputs(args, kwargs), rt.problem["forward_params"])
    _poison(rt, poison_bytes)
    with torch.no_grad(), around():
        out = model(*args, **kwargs)
    if rt.device.startswith("cuda"):
        torch.cuda.synchronize()
    structure, tensors = flatten_outputs(out)
    live = named_inputs(args, kwargs, rt.problem["forward_params"])
    mutated, inplace = [], {}
    for name, before in pristine.items():
        if not isinstance(before, torch.Tensor):
            continue
        if name in in_place:
            inplace[name] = live[name]
        elif not _same_tensor(before, live[name]):
            mutated.append(name)
    return CallFacts(structure, tensors, inplace, mutated, live)


def input_layout(inputs: dict[str, Any]) -> dict[str, Any]:
    """Each input's shape and dtype (a tensor) or value (a scalar): what a refill must keep."""
    import torch

    return {
        name: (tuple(v.shape), str(v.dtype)) if isinstance(v, torch.Tensor) else v
        for name, v in inputs.items()
        if isinstance(v, torch.Tensor) or v is None or isinstance(v, int | float | bool | str)
    }


def check_seed_independent_layout(shape_id: str, layouts: dict[int, dict[str, Any]]) -> None:
    """Refuse a problem whose inputs' shapes, dtypes or scalars change with the seed.

    The candidate worker's repeat probe copies another seed's values into the first seed's
    tensors (same addresses) to catch outputs cached by address; a tensor whose shape differs
    cannot be refilled and would silently keep the old values (a confusing wrong or stale
    output, or a cache left undetected).

    Raises:
        ValueError: Two seeds give different layouts; names the input and what to do.
    """
    if not layouts:
        return
    (first_seed, first), *rest = layouts.items()
    for seed, layout in rest:
        for name in sorted(set(first) | set(layout), key=str):
            a, b = first.get(name, "absent"), layout.get(name, "absent")
            if a != b:
                raise ValueError(
                    f"shape '{shape_id}': input '{name}' is {a} for seed {first_seed} but {b} "
                    f"for seed {seed}: make_inputs must give every input the same shape, dtype "
                    "and scalar value for every seed of a shape (the scorer refills one seed's "
                    "tensors with another's values at the same addresses); draw index "
                    "structures of a size fixed by the shape (pad with sentinels) and pass sizes "
                    "that depend on the data as shape parameters"
                )


def run_reference(
    task: dict[str, Any], rt: ProblemRuntime, ev: EventLog, workdir: Path
) -> dict[str, Any]:
    """Compute reference outputs for every shape and seed, and the roofline costs per shape."""
    rows = []
    for i, shape in enumerate(task["shapes"]):
        ev.emit("reference", shape_id=shape["id"], done=i, total=len(task["shapes"]))
        files, costs, model = {}, None, None
        layouts: dict[int, dict[str, Any]] = {}
        for seed in [] if task.get("costs_only") else task["seeds"]:
            model = rt.build_model(rt.reference.Model, shape, seed)
            call = _run_one(model, rt, shape, seed, task["problem"]["in_place"], 0)
            path = workdir / f"ref_{i}_{seed}.pt"
            _save(path, call.structure, call.tensors, call.inplace)
            files[str(seed)] = path.name
            layouts[seed] = input_layout(call.inputs)
        check_seed_independent_layout(shape["id"], layouts)
        if task.get("count_costs"):
            costs = _count_costs(rt, shape, task)
        args, kwargs = rt.make_inputs(shape, task["seeds"][0])
        lengths = [
            int(v.shape[-1])
            for v in [*args, *kwargs.values()]
            if hasattr(v, "shape") and len(v.shape)
        ]
        rows.append(
            {
                "shape_id": shape["id"],
                "files": files,
                "costs": costs,
                "reduction_len": max(lengths, default=0),
                "weights": sorted(model.state_dict().keys())
                if model is not None and hasattr(model, "state_dict")
                else [],
            }
        )
    return {"ok": True, "shapes": rows, "versions": _versions()}


def _describe_device() -> dict[str, Any] | None:
    from aka.hardware import detect_device

    info = detect_device()
    return None if info is None else dict(info.model_dump(mode="json"))


def _count_costs(
    rt: ProblemRuntime, shape: dict[str, Any], task: dict[str, Any]
) -> dict[str, Any] | None:
    from aka.hardware import count_costs

    seed = task["seeds"][0]
    model = rt.build_model(rt.reference.Model, shape, seed)
    args, kwargs = rt.make_inputs(shape, seed)
    inputs: Any = named_inputs(args, kwargs, rt.problem["forward_params"]) if args else kwargs
    counts = count_costs(
        model, inputs, allow_tf32=bool(task["problem"]["dtype_policy"]["allow_tf32"])
    )
    return dict(counts.model_dump(mode="json"))


def _load_weights(candidate: Any, reference: Any) -> str:
    """Give the candidate the reference's weights when their state_dict keys and shapes match."""
    if not (hasattr(candidate, "state_dict") and hasattr(reference, "state_dict")):
        return "seeded"
    ref_sd, cand_sd = reference.state_dict(), candidate.state_dict()
    if not ref_sd:
        return "none"
    same = ref_sd.keys() == cand_sd.keys() and all(
        ref_sd[k].shape == cand_sd[k].shape for k in ref_sd
    )
    if same:
        candidate.load_state_dict(ref_sd, strict=True)
        return "loaded"
    return "seeded"


def main(argv: list[str] | None = None) -> int:
    """Run the task in ``argv[1]``'s directory and write ``result.json`` there."""
    argv = sys.argv if argv is None else argv
    workdir = Path(argv[1]).resolve()
    os.chdir(workdir)
    ev = EventLog(workdir / "events.jsonl")
    task = json.loads((workdir / "task.json").read_text())
    if os.environ.get("TRITON_INTERPRET") == "1":  # a CPU worker: bf16 stores round as on a GPU
        from aka.bench.interpreter_fix import apply

        apply()
    # The parent turns isolation off only for an ncu pass (ncu talks to its target over a socket).
    isolated = _isolate_network() if task.get("isolate_network", True) else False
    ev.emit("started", network_isolated=isolated, pid=os.getpid())
    result: dict[str, Any]
    try:
        if task["role"] == "ceilings":
            return _finish(workdir, ev, _measure_ceilings(), isolated)
        rt = ProblemRuntime.load(task["problem"], workdir, task["device"])
        ev.emit("setup")
        from aka.bench.paired import run_pair_worker
        from aka.bench.profile import run_profile_worker
        from aka.bench.signature import run_signature_worker
        from aka.bench.worker_baselines import run_baselines
        from aka.bench.worker_candidate import run_candidate

        roles = {
            "reference": run_reference,
            "candidate": run_candidate,
            "pair": run_pair_worker,
            "profile": run_profile_worker,
            "signature": run_signature_worker,
            "baselines": run_baselines,
        }
        result = roles[task["role"]](task, rt, ev, workdir)
        if task.get("describe_device"):
            result["device"] = _describe_device()
    except WorkerFailure as failure:
        result = {"ok": False, "error": failure.to_json()}
    except BaseException as err:  # noqa: BLE001 - the worker's boundary: everything becomes data
        kind = "baseline" if task["role"] == "reference" else _classify(err, ev.stage)
        result = {
            "ok": False,
            "error": {
                "kind": kind,
                "message": f"{type(err).__name__}: {err}",
                "stage": ev.stage,
                "traceback": traceback.format_exc(limit=12),
            },
        }
    return _finish(workdir, ev, result, isolated)


def _finish(workdir: Path, ev: EventLog, result: dict[str, Any], isolated: bool) -> int:
    result["network_isolated"] = isolated
    tmp = workdir / ".result.tmp"
    tmp.write_text(json.dumps(result))
    tmp.rename(workdir / "result.json")
    ev.emit("done")
    return 0


def _measure_ceilings() -> dict[str, Any]:
    from aka.hardware import detect_device, measure_ceilings

    info = detect_device()
    if info is None:
        return {
            "ok": False,
            "error": {"kind": "harness", "message": "no CUDA device in the worker"},
        }
    return {"ok": True, "ceilings": measure_ceilings(info).model_dump(mode="json")}
