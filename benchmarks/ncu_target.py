"""Run one candidate on a problem's shapes for Nsight Compute (used by scorer_baseline.py).

Runs the candidate directly (it is our own hand-written kernel, not untrusted code): for each named
shape, builds inputs as the scorer does (seed 0) and calls forward ``--calls`` times, with a
``torch.cuda.synchronize()`` between calls. ncu then reports each kernel's gpu__time_duration.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

from aka.bench.problem_runtime import ProblemRuntime
from aka.spec import load_problem


def main() -> int:
    """Parse arguments and run the calls."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--problem", required=True)
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--shapes", required=True, help="comma-separated shape ids")
    parser.add_argument("--calls", type=int, default=7)
    args = parser.parse_args()
    problem = load_problem(args.problem)
    work = Path("/tmp/aka-ncu")
    work.mkdir(exist_ok=True)
    rt = ProblemRuntime.load(problem.to_worker_json(), work, "cuda")
    spec = importlib.util.spec_from_file_location("candidate", args.candidate)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module
    spec.loader.exec_module(module)
    for sid in args.shapes.split(","):
        shape = next(s for s in problem.shapes if s.id == sid).model_dump(mode="json")
        model = rt.build_model(module.ModelNew, shape, 0)
        inputs_args, inputs_kwargs = rt.make_inputs(shape, 0)
        with torch.no_grad():
            for _ in range(args.calls):
                model(*inputs_args, **inputs_kwargs)
                torch.cuda.synchronize()
        print(f"shape {sid}: {args.calls} calls", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
