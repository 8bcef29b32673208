"""Every reference kernel's tests on the GPU, attributed kernel by kernel (issue #7).

Runs ``tests/reference_kernels`` in this process with ``AKA_KERNEL_TESTS_DEVICE=cuda`` (the
kernels compiled for the GPU, torch's default device CUDA, the ``gpu``-marked tests included, so
the CUDA C++ kernels run too) and attributes each test's outcome to the kernel files it loaded
(``tests/reference_kernels/conftest.KERNEL_CALLS``). A kernel passes when every test that loaded
it passed; kernels no test loaded are listed. Prints a table per family and writes a JSON file
(device, date, versions, every test's outcome and duration, every kernel's verdict).

    PYTHONPATH=$PWD python3 benchmarks/kb_kernel_tests.py --out $OUT [-k EXPR] [--timeout S]
    python benchmarks/kb_kernel_tests.py --device cpu -k l2_norm --out DIR   # the interpreter

``--device sm90`` needs no GPU: each launch is compiled for sm_90 by Triton's compiler and not
run (``tests/reference_kernels/conftest.py``), so compile errors and shared-memory overflows the
interpreter cannot see show up on the CPU.

Compiling ~300 kernels (and nvcc for the CUDA C++ ones) is CPU-bound, so a run can be split into
processes that share the device: ``--shard I/N`` runs the I-th of N shards (1-based; the tests
grouped by kernel, so a kernel compiles in one process) and writes ``..._shardIofN.json``; ``--merge A.json B.json ...`` attributes the union of the shards' tests
and kernel loads and writes the combined file. A shard stopped by SIGINT (``timeout -s INT``)
still writes what it finished; its unfinished kernels show as ``untested``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


class _Recorder:
    """A pytest plugin keeping every test's outcome (a failed setup or teardown counts).

    With a shard ``(i, n)`` it also deselects every collected test but each n-th from the i-th.
    """

    def __init__(self, shard: tuple[int, int] | None = None) -> None:
        self.tests: dict[str, dict[str, Any]] = {}
        self.shard = shard

    def pytest_collection_modifyitems(self, config: Any, items: list[Any]) -> None:
        if self.shard is None:
            return
        i, n = self.shard
        kept = set(map(id, shard_items(items, i, n)))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = [item for item in items if id(item) in kept]

    def pytest_runtest_logreport(self, report: Any) -> None:
        entry = self.tests.setdefault(
            report.nodeid, {"outcome": "passed", "seconds": 0.0, "message": None}
        )
        entry["seconds"] = round(entry["seconds"] + report.duration, 3)
        if report.outcome == "failed" or (report.skipped and entry["outcome"] == "passed"):
            entry["outcome"] = report.outcome
            text = str(report.longrepr) if report.longrepr else ""
            entry["message"] = _excerpt(text) or None


def _kernel_files() -> list[str]:
    root = REPO / "reference_kernels"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if p.name != "__init__.py")


def _calls() -> list[tuple[str, str]]:
    for module in list(sys.modules.values()):
        calls = getattr(module, "KERNEL_CALLS", None)
        if isinstance(calls, list) and module.__name__.endswith("reference_kernels.conftest"):
            return list(calls)
    return []


def attribute(
    tests: dict[str, dict[str, Any]], calls: list[tuple[str, str]], kernels: list[str]
) -> dict[str, dict[str, Any]]:
    """Each kernel's verdict from the tests that loaded it.

    ``passed``: every such test passed; ``failed``: at least one failed; ``skipped``: all were
    skipped; ``untested``: no test loaded it.
    """
    by_kernel: dict[str, set[str]] = defaultdict(set)
    for nodeid, relpath in calls:
        by_kernel[relpath].add(nodeid)
    out: dict[str, dict[str, Any]] = {}
    for relpath in kernels:
        ids = sorted(i for i in by_kernel.get(relpath, ()) if i in tests)
        outcomes = [tests[i]["outcome"] for i in ids]
        if not ids:
            verdict = "untested"
        elif "failed" in outcomes:
            verdict = "failed"
        elif all(o == "skipped" for o in outcomes):
            verdict = "skipped"
        else:
            verdict = "passed"
        out[relpath] = {
            "verdict": verdict,
            "tests": len(ids),
            "passed": outcomes.count("passed"),
            "failed": [i for i in ids if tests[i]["outcome"] == "failed"],
        }
    return out


def _excerpt(text: str, limit: int = 2400) -> str:
    """The end of a failure report, plus the line naming a chained cause's error, if cut off."""
    if len(text) <= limit:
        return text
    tail = text[-limit:]
    causes = [line for line in text[:-limit].splitlines() if line.startswith("E   ")]
    return "\n".join(causes[-6:] + ["[...]", tail]) if causes else tail


# A CUDA C++ kernel's first test builds it with nvcc (about a minute); its other tests reuse the
# build only in the same process.
_NVCC_WEIGHT = 100


def group_key(item: Any) -> str:
    """The kernel a test is about, read from its id, else its file: one shard takes each group.

    ``test_f[sampling/argmax_rowwise_cuda-0-torch.float32]`` -> ``sampling/argmax_rowwise_cuda``:
    the first parameter token that names something (has a letter and an ``_`` or ``/``).
    """
    nodeid = str(item.nodeid)
    path, _, rest = nodeid.partition("::")
    params = rest.partition("[")[2].rstrip("]")
    for token in params.split("-"):
        if any(c.isalpha() for c in token) and ("_" in token or "/" in token):
            return f"{path}::{token}"
    return path


def shard_items(items: list[Any], index: int, count: int) -> list[Any]:
    """Shard ``index`` of ``count`` (1-based): whole groups, heaviest first to the lightest shard.

    Every shard computes the same split from the same collection, so together they run each test
    exactly once; a group's tests share a process, so its compiles happen once.
    """
    groups: dict[str, list[Any]] = defaultdict(list)
    for item in items:
        groups[group_key(item)].append(item)

    def weight(members: list[Any]) -> int:
        nvcc = any(m.get_closest_marker("gpu") is not None for m in members)
        return len(members) + (_NVCC_WEIGHT if nvcc else 0)

    loads = [0] * count
    mine: list[Any] = []
    for key in sorted(groups, key=lambda k: (-weight(groups[k]), k)):
        target = loads.index(min(loads))
        loads[target] += weight(groups[key])
        if target == index - 1:
            mine += groups[key]
    return mine


def parse_shard(shard: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)``, 1 <= I <= N."""
    index, _, count = shard.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i, n = 0, 0
    if not 1 <= i <= n:
        raise ValueError(f"--shard {shard!r}: want I/N with 1 <= I <= N, e.g. 2/8")
    return i, n


def _summary(kernels: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {
        v: sum(k["verdict"] == v for k in kernels.values())
        for v in ("passed", "failed", "skipped", "untested")
    }


def merge(records: list[dict[str, Any]], kernel_files: list[str]) -> dict[str, Any]:
    """One record from shard records: the union of their tests and kernel loads, re-attributed.

    The shards must come from one device; a test id seen in two shards keeps the worse outcome.
    """
    devices = {r["device"] for r in records}
    if len(devices) != 1:
        raise ValueError(f"shards from different devices: {sorted(devices)}")
    rank = {"passed": 0, "skipped": 1, "failed": 2}
    tests: dict[str, dict[str, Any]] = {}
    calls: list[tuple[str, str]] = []
    for record in records:
        if "calls" not in record:
            raise ValueError(
                f"shard {record.get('shard')!r} has no 'calls' (written before --shard)"
            )
        calls += [(str(a), str(b)) for a, b in record["calls"]]
        for nodeid, entry in record["tests"].items():
            old = tests.get(nodeid)
            if old is None or rank[entry["outcome"]] > rank[old["outcome"]]:
                tests[nodeid] = entry
    kernels = attribute(tests, calls, kernel_files)
    first = records[0]
    return {
        "benchmark": "kb_kernel_tests",
        "date": max(r["date"] for r in records),
        "device": first["device"],
        "device_kind": first.get("device_kind", "cuda"),
        "versions": first["versions"],
        "keyword": None,
        "shards": [
            {k: r.get(k) for k in ("shard", "date", "pytest_exit_code", "wall_s", "summary")}
            for r in records
        ],
        "pytest_exit_code": max(int(r["pytest_exit_code"]) for r in records),
        "wall_s": max(float(r["wall_s"]) for r in records),
        "summary": _summary(kernels),
        "kernels": kernels,
        "tests": tests,
        "calls": sorted(set(calls)),
    }


def _versions() -> dict[str, str]:
    import torch
    import triton

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": str(torch.version.cuda),
    }


def _device(gpu: bool) -> str:
    import torch

    if gpu and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "cpu (Triton interpreter)"


def _device_label(device: str) -> str:
    if device == "sm90":
        return "sm_90 compile only (Triton compiler on the CPU; nothing launched)"
    return _device(device == "cuda")


def _table(kernels: dict[str, dict[str, Any]]) -> None:
    families: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for relpath, k in kernels.items():
        family = "/".join(Path(relpath).parts[:2]) if relpath.startswith("triton") else "cuda"
        families[family][k["verdict"]] += 1
    cols = ("passed", "failed", "skipped", "untested")
    print(f"{'family':26s} " + " ".join(f"{c:>8s}" for c in cols))
    for family in sorted(families):
        print(f"{family:26s} " + " ".join(f"{families[family][c]:8d}" for c in cols))
    totals = {c: sum(f[c] for f in families.values()) for c in cols}
    print(f"{'all':26s} " + " ".join(f"{totals[c]:8d}" for c in cols))
    for relpath, k in kernels.items():
        if k["verdict"] == "failed":
            print(f"FAILED {relpath}: {', '.join(k['failed'][:3])}")


def main(argv: list[str] | None = None) -> int:
    """Run the kernel tests, write the JSON; exit 1 if a kernel failed."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu", "sm90"))
    parser.add_argument("-k", dest="keyword", default="", help="pytest -k expression.")
    parser.add_argument("--timeout", type=int, default=300, help="Per-test timeout (s).")
    parser.add_argument(
        "--shard", default="", help="I/N: run the I-th of N shards (tests grouped by kernel)."
    )
    parser.add_argument("--merge", nargs="+", type=Path, help="Combine shard JSON files; no run.")
    args = parser.parse_args(argv)

    if args.merge:
        record = merge([json.loads(p.read_text()) for p in args.merge], _kernel_files())
        args.out.mkdir(parents=True, exist_ok=True)
        day = record["date"][:10]
        path = args.out / f"kb_kernel_tests_{day}_{record['device_kind']}.json"
        path.write_text(json.dumps(record, indent=1))
        _table(record["kernels"])
        print(f"merged {len(args.merge)} shards; wrote {path}")
        return 1 if record["summary"]["failed"] else 0

    gpu = args.device == "cuda"
    if args.device in ("cuda", "sm90"):
        os.environ["AKA_KERNEL_TESTS_DEVICE"] = args.device
    import pytest

    try:
        shard = parse_shard(args.shard) if args.shard else None
    except ValueError as exc:
        parser.error(str(exc))
    recorder = _Recorder(shard)
    started = time.monotonic()
    # Shards share a machine: each gets its own pytest temp root (the default one is cleaned up
    # by whichever process ends, under the others' feet).
    basetemp = tempfile.mkdtemp(prefix="aka-kb-kernel-tests-")
    pytest_args = [
        str(REPO / "tests" / "reference_kernels"),
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "" if gpu else "not gpu",
        f"--timeout={args.timeout}",
        "--rootdir",
        str(REPO),
        "--basetemp",
        basetemp,
    ]
    if args.keyword:
        pytest_args += ["-k", args.keyword]
    code = pytest.main(pytest_args, plugins=[recorder])
    calls = _calls()
    kernels = attribute(recorder.tests, calls, _kernel_files())
    if args.keyword or args.shard:  # a subset: kernels its tests never touched are not "untested"
        kernels = {r: k for r, k in kernels.items() if k["verdict"] != "untested"}
    now = datetime.now(UTC)
    record = {
        "benchmark": "kb_kernel_tests",
        "date": now.isoformat(timespec="seconds"),
        "device": _device_label(args.device),
        "device_kind": args.device,
        "versions": _versions(),
        "keyword": args.keyword or None,
        "shard": args.shard or None,
        "pytest_exit_code": int(code),
        "wall_s": round(time.monotonic() - started, 1),
        "summary": _summary(kernels),
        "kernels": kernels,
        "tests": recorder.tests,
        "calls": sorted(set(calls)),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "_shard" + args.shard.replace("/", "of") if args.shard else ""
    path = args.out / f"kb_kernel_tests_{now.date().isoformat()}_{args.device}{suffix}.json"
    path.write_text(json.dumps(record, indent=1))
    print()
    _table(kernels)
    print(f"wall {record['wall_s']} s; wrote {path}")
    return 1 if record["summary"]["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
