"""Record which shapes, dtypes and tolerances each reference kernel's tests use (issue #7).

A pytest plugin plus a small driver. Run the kernel tests with the plugin and it records, for every
``make_inputs(shape, dtype)`` call a test makes, the kernel, the shape dict, the dtype, the size of
the inputs it built, whether the kernel's ``reference`` accepts them by keyword, and the test's
outcome and largest ``torch.testing.assert_close`` tolerance; then ``--write`` picks up to
``--max-shapes`` shapes x ``--max-dtypes`` dtypes from passing tests per kernel and writes them as
the kernel header's ``problem:`` field (the own-reference problem, ``aka.kb.kernel_problem``).

    python scripts/record_kernel_problems.py --record /tmp/kp.jsonl      # runs the kernel tests
    python scripts/record_kernel_problems.py --write /tmp/kp.jsonl [--only id,id] [--force]

The header edit is textual: one ``problem:`` line (flow YAML) inserted before ``measured:``, so the
rest of the header stays as written.

The CUDA C++ kernels' tests run on a GPU only, so nothing is recorded for them on a CPU machine:
their fields were written by hand from the shapes of those tests (small ones, with tails), and
``tests/kb/test_cuda_kernel_problems.py`` builds, runs (reference side) and maps them on the CPU.
"""

from __future__ import annotations

import argparse
import functools
import importlib.machinery
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_OUT_ENV = "RECORD_KERNEL_PROBLEMS_OUT"
_DTYPES = {
    "torch.float32": "fp32",
    "torch.float16": "fp16",
    "torch.bfloat16": "bf16",
    "torch.float64": "fp64",
    "torch.int64": "int64",
    "torch.int32": "int32",
    "torch.int8": "int8",
    "torch.uint8": "uint8",
    "torch.float8_e4m3fn": "fp8_e4m3fn",
    "torch.float8_e5m2": "fp8_e5m2",
}

# the scorer's default tolerance by output dtype (docs/op-yaml.md, tolerance)
_TABLE = {"fp32": 1e-4, "fp16": 1e-3, "bf16": 1e-2, "fp64": 1e-4}

# ---------------------------------------------------------------- the pytest plugin
_current: dict[str, Any] = {"test": "", "tol": None, "out": ""}


def _emit(record: dict[str, Any]) -> None:
    with open(_current["out"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def _jsonable(value: Any) -> bool:
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError):
        return False


def _wrap(module: Any) -> None:
    make = getattr(module, "make_inputs", None)
    ref = getattr(module, "reference", None)
    if make is None or getattr(make, "_recorded", False):
        return
    kernel = module.__name__.removeprefix("refkernel_")

    @functools.wraps(make)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        out = make(*args, **kwargs)
        try:
            bound = inspect.signature(make).bind(*args, **kwargs)
            shape = bound.arguments.get("shape", args[0] if args else None)
            dtype = bound.arguments.get("dtype")
            extra = sorted(set(bound.arguments) - {"shape", "dtype", "device"})
            binds = True
            try:
                inspect.signature(ref).bind(**out)
            except TypeError:
                binds = False
            numel = sum(v.numel() for v in out.values() if hasattr(v, "numel"))
            _emit(
                {
                    "kernel": kernel,
                    "test": _current["test"],
                    "shape": shape if _jsonable(shape) else None,
                    "dtype": _DTYPES.get(str(dtype), str(dtype)),
                    "extra": extra,
                    "binds": binds and isinstance(out, dict),
                    "numel": numel,
                }
            )
        except Exception as err:  # noqa: BLE001 - a recording problem must not fail the test
            _emit({"kernel": kernel, "test": _current["test"], "error": repr(err)})
        return out

    recorded._recorded = True  # type: ignore[attr-defined]
    module.make_inputs = recorded
    if ref is not None:
        module.reference = _wrap_reference(kernel, ref)


def _same_bytes(a: Any, b: Any) -> bool:
    """Bitwise equality (a NaN left in place is unchanged; ``torch.equal`` says it changed)."""
    import torch

    return bool(
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
    )


def _wrap_reference(kernel: str, ref: Any) -> Any:
    """Record the reference's output dtypes and the inputs it updates in place."""
    import torch

    @functools.wraps(ref)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = inspect.signature(ref).bind(*args, **kwargs)
            before = {
                k: v.clone() for k, v in bound.arguments.items() if isinstance(v, torch.Tensor)
            }
        except TypeError:
            bound, before = None, {}
        out = ref(*args, **kwargs)
        try:
            outs = (
                out.values() if isinstance(out, dict) else out if isinstance(out, tuple) else [out]
            )
            mutated = sorted(
                k for k, v in before.items()
                if bound is not None and not _same_bytes(bound.arguments[k], v)
            )  # fmt: skip
            _emit(
                {
                    "reference": kernel,
                    "test": _current["test"],
                    "out_dtypes": [
                        _DTYPES.get(str(o.dtype), str(o.dtype))
                        for o in outs
                        if isinstance(o, torch.Tensor)
                    ],  # fmt: skip
                    "mutated": mutated,
                }
            )
        except Exception as err:  # noqa: BLE001 - a recording problem must not fail the test
            _emit({"reference": kernel, "test": _current["test"], "error": repr(err)})
        return out

    return recorded


def pytest_configure(config: Any) -> None:
    """Wrap every reference kernel module's ``make_inputs`` as its test loads it."""
    import torch

    _current["out"] = os.environ[_OUT_ENV]
    original_exec = importlib.machinery.SourceFileLoader.exec_module

    def exec_module(self: Any, module: Any) -> None:
        original_exec(self, module)
        if module.__name__.startswith("refkernel_"):
            _wrap(module)

    importlib.machinery.SourceFileLoader.exec_module = exec_module  # type: ignore[method-assign]
    original_close = torch.testing.assert_close

    def assert_close(*args: Any, **kwargs: Any) -> None:
        atol, rtol = kwargs.get("atol"), kwargs.get("rtol")
        if atol is not None and rtol is not None:
            old = _current["tol"] or (0.0, 0.0)
            _current["tol"] = (max(old[0], float(atol)), max(old[1], float(rtol)))
        original_close(*args, **kwargs)

    torch.testing.assert_close = assert_close


def pytest_runtest_setup(item: Any) -> None:
    """Remember which test the next ``make_inputs`` calls belong to."""
    _current["test"], _current["tol"] = item.nodeid, None


def pytest_runtest_logreport(report: Any) -> None:
    """Record each test's outcome, duration and largest tolerance."""
    if report.when == "call":
        _emit(
            {
                "test": report.nodeid,
                "outcome": report.outcome,
                "duration": report.duration,
                "tol": _current["tol"],
            }
        )


# ---------------------------------------------------------------- choosing and writing
def choose(
    lines: list[dict[str, Any]], max_shapes: int, max_dtypes: int, max_numel: int
) -> dict[str, dict[str, Any]]:
    """Per kernel: the ``problem:`` field from its passing tests' calls (first seen first)."""
    outcome = {r["test"]: r for r in lines if "outcome" in r}
    out_dtypes: dict[tuple[str, str], set[str]] = {}  # (kernel, test) -> reference output dtypes
    mutated: dict[str, set[str]] = {}
    for r in lines:
        if "reference" in r and "error" not in r:
            out_dtypes.setdefault((r["reference"], r["test"]), set()).update(r["out_dtypes"])
            mutated.setdefault(r["reference"], set()).update(r["mutated"])
    calls: dict[str, list[dict[str, Any]]] = {}
    for r in lines:
        if "kernel" not in r or "error" in r or not r.get("binds") or r.get("extra"):
            continue
        test = outcome.get(r["test"])
        if test is None or test["outcome"] != "passed" or r["shape"] is None:
            continue
        if not isinstance(r["shape"], dict) or {"dtype", "device"} & set(r["shape"]):
            continue
        if r["dtype"] not in {*_DTYPES.values(), "None"}:
            continue
        outs = out_dtypes.get((r["kernel"], r["test"]), set())
        calls.setdefault(r["kernel"], []).append(r | {"tol": test["tol"], "outs": sorted(outs)})
    fields: dict[str, dict[str, Any]] = {}
    for kernel, rows in calls.items():
        shapes: list[dict[str, Any]] = []
        seen: dict[str, set[str]] = {}
        numel: dict[str, int] = {}
        original: dict[str, dict[str, Any]] = {}
        tol_by_dtype: dict[str, tuple[float, float]] = {}
        for r in rows:
            key = json.dumps(r["shape"], sort_keys=True)
            original.setdefault(key, r["shape"])
            seen.setdefault(key, set()).add(r["dtype"])
            numel[key] = max(numel.get(key, 0), r["numel"])
        small = [k for k in seen if numel[k] <= max_numel] or sorted(seen, key=numel.get)[:1]
        # prefer a float dtype every chosen shape was tested with: fp32 first, then half types
        order = ["fp32", "bf16", "fp16", *(d for d in _DTYPES.values() if d not in "fp32bf16fp16")]
        chosen = small[:max_shapes]
        common = set.intersection(*(seen[k] for k in chosen))
        while not common and len(chosen) > 1:
            chosen = chosen[:-1]
            common = set.intersection(*(seen[k] for k in chosen))
        shapes = [original[k] for k in chosen]
        dtypes = [d for d in order if d in common][:max_dtypes]
        field: dict[str, Any] = {"shapes": shapes, "dtypes": dtypes}
        for r in rows:
            if r["tol"] and json.dumps(r["shape"], sort_keys=True) in chosen:
                # the scorer's table is keyed by the output dtype (the strictest output's)
                strict = min((_TABLE.get(o, 1e-4) for o in r["outs"] if o in _TABLE), default=None)
                key = (
                    f"{r['dtype']}:{strict if strict is not None else _TABLE.get(r['dtype'], 1e-4)}"
                )
                old = tol_by_dtype.get(key, (0.0, 0.0))
                tol_by_dtype[key] = (max(old[0], r["tol"][0]), max(old[1], r["tol"][1]))
        # override the scorer's table only where a test needed more than it gives that output
        looser = [
            t for key, t in tol_by_dtype.items()
            if key.split(":")[0] in dtypes and max(t) > float(key.split(":")[1])
        ]  # fmt: skip
        if looser:
            field["atol"] = max(t[0] for t in looser)
            field["rtol"] = max(t[1] for t in looser)
        if mutated.get(kernel):
            field["in_place"] = sorted(mutated[kernel])
        fields[kernel] = field
    return fields


def _flow(value: Any) -> str:
    """Flow-style YAML via JSON (a JSON document is YAML), with bare keys for readability."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, str):
        return (
            value if value.replace("_", "").isalnum() and not value.isdigit() else json.dumps(value)
        )
    return json.dumps(value)


def write_field(path: Path, field: dict[str, Any], force: bool) -> bool:
    """Insert (or with ``force`` replace) the ``problem:`` line before ``measured:``.

    Only inside the front matter (between the docstring's first two ``---`` lines); the file is
    read right before it is written and nothing else in it changes.
    """
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    marks = [i for i, line in enumerate(lines[:200]) if line.strip() == "---"][:2]
    if len(marks) != 2:
        return False
    start, end = marks
    existing = [i for i in range(start + 1, end) if lines[i].startswith("problem:")]
    if existing and not force:
        return False
    block = ["problem:"] + [f"  {k}: {_flow(v)}" for k, v in field.items()]
    if existing:
        first = last = existing[0]
        while last + 1 < end and lines[last + 1].startswith("  "):
            last += 1
        lines[first : last + 1] = block
    else:
        at = next((i for i in range(start + 1, end) if lines[i].startswith("measured:")), end)
        lines[at:at] = block
    path.write_text("\n".join(lines), encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    """Record or write; return the exit code."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--record", type=Path, help="Run the kernel tests; write records here.")
    parser.add_argument("--write", type=Path, help="Records to turn into problem: fields.")
    parser.add_argument("--only", default="", help="Comma-separated kernel ids.")
    parser.add_argument("--force", action="store_true", help="Replace existing problem: fields.")
    parser.add_argument("--max-shapes", type=int, default=2)
    parser.add_argument("--max-dtypes", type=int, default=2)
    parser.add_argument("--max-numel", type=int, default=200_000)
    parser.add_argument("tests", nargs="*", default=["tests/reference_kernels"])
    args = parser.parse_args(argv)
    if args.record:
        args.record.unlink(missing_ok=True)
        env = dict(os.environ, **{_OUT_ENV: str(args.record.resolve())})
        env["PYTHONPATH"] = f"{REPO / 'scripts'}{os.pathsep}{env.get('PYTHONPATH', '')}"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "record_kernel_problems", *args.tests]
        return subprocess.call(cmd, cwd=REPO, env=env)
    if args.write:
        lines = [json.loads(x) for x in args.write.read_text().splitlines() if x.strip()]
        fields = choose(lines, args.max_shapes, args.max_dtypes, args.max_numel)
        only = {k for k in args.only.split(",") if k}
        written = 0
        for path in sorted((REPO / "reference_kernels").rglob("*.py")):
            if path.stem in fields and (not only or path.stem in only):
                written += write_field(path, fields[path.stem], args.force)
        print(f"{len(fields)} kernels have recorded shapes; wrote {written} headers")  # noqa: T201
        return 0
    parser.error("give --record FILE or --write FILE")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
