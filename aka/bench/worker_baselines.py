"""Inside a baselines worker: the trusted baselines' outputs and, on a GPU, their timed samples.

Owns the worker role ``baselines`` of ``aka bench run``: no candidate is involved. For every shape
and seed the worker runs the problem's ``library`` module (and, on a GPU, ``torch.compile`` of the
reference) on the seed's inputs with the reference's weights and saves the outputs, so the parent
checks them against the reference worker's outputs under the scorer's tolerance policy before it
trusts their times. On a GPU a ``TimingSession`` then times eager, torch.compile and the library
path per shape exactly as it times them next to a candidate (cold L2, rotating input sets, the
launch floor).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aka.bench.problem_runtime import ProblemRuntime

__all__ = ["run_baselines"]


def run_baselines(
    task: dict[str, Any], rt: ProblemRuntime, ev: Any, workdir: Path
) -> dict[str, Any]:
    """Save each checked baseline's outputs per shape and seed; time the baselines on a GPU."""
    import torch

    from aka.bench.worker import _run_one, _save, _versions
    from aka.bench.worker_timing import TimingSession

    checked = [b for b in task["check"] if b != "torch_compile" or rt.device.startswith("cuda")]
    skip_compile = set((task.get("timing") or {}).get("skip_compile") or [])
    rows, errors = [], {}
    for i, shape in enumerate(task["shapes"]):
        ev.emit("baselines", shape_id=shape["id"], done=i, total=len(task["shapes"]))
        files: dict[str, dict[str, str]] = {name: {} for name in checked}
        for n, seed in enumerate(task["seeds"]):
            reference = rt.build_model(rt.reference.Model, shape, seed)
            for name in checked:
                if f"{shape['id']}/{name}" in errors:
                    continue
                if name == "torch_compile" and (n > 0 or shape["id"] in skip_compile):
                    continue  # compiling costs seconds: one seed, and only the shapes it times
                try:
                    model = _baseline_model(rt, name, shape, seed, reference)
                    call = _run_one(model, rt, shape, seed, task["problem"]["in_place"], 0)
                except Exception as err:  # noqa: BLE001 - a failing baseline is data, not fatal
                    errors[f"{shape['id']}/{name}"] = f"{type(err).__name__}: {err}"
                    continue
                path = workdir / f"{name}_{i}_{seed}.pt"
                _save(path, call.structure, call.tensors, call.inplace)
                files[name][str(seed)] = path.name
        rows.append({"shape_id": shape["id"], "files": files})
        if rt.device.startswith("cuda"):
            torch.cuda.empty_cache()
    timing = None
    if task.get("timing"):
        session = TimingSession(rt, task, ev)
        session.build_baselines()
        timing = session.time_baselines()
    return {
        "ok": True,
        "shapes": rows,
        "errors": errors,
        "timing": timing,
        "versions": _versions(),
    }


def _baseline_model(
    rt: ProblemRuntime, name: str, shape: dict[str, Any], seed: int, reference: Any
) -> Any:
    """The baseline ``name`` for ``shape``, built under ``seed`` with the reference's weights."""
    import torch

    from aka.bench.worker import _load_weights

    if name == "library":
        if rt.library is None:
            raise ValueError("the problem has no library module")
        model = rt.build_model(rt.library.Model, shape, seed)
        _load_weights(model, reference)
        return model
    if name == "torch_compile":
        return torch.compile(reference)
    raise ValueError(f"unknown baseline {name!r}")
