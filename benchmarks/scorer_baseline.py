"""Scorer baseline on the GPU (issue #2).

Measures the ceilings; scores eager, torch.compile and Triton on rms_norm and softmax; checks the
scorer's repeatability across fresh workers and its agreement with Nsight Compute.

Run on the GPU machine from the repository root:

    PYTHONPATH=$PWD python3 benchmarks/scorer_baseline.py --phase all --out $OUT

Phases (so one call fits a 10-minute limit): ``score`` (ceilings + every candidate once),
``repeat`` (the same candidates in more fresh workers), ``ncu`` (kernel durations from ncu),
``all``. Each phase writes ``scorer_baseline_<phase>.json`` (device, date, versions, raw numbers);
``--merge`` joins phase files into one results JSON and prints the tables.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "configs" / "examples"
PROBLEMS = ("rms_norm", "softmax")
CANDIDATES = ("candidate.py", "candidate_multirow.py")


def _scorer(cache: Path) -> Any:
    from aka.bench import Scorer
    from aka.core import BenchConfig

    return Scorer(BenchConfig(), cache, device="cuda")


def _row(problem: str, candidate: str, result: Any) -> list[dict[str, Any]]:
    rows = []
    for s in result.shapes:
        base = {k: v.median for k, v in s.baselines_us.items()}
        rows.append(
            {
                "problem": problem,
                "candidate": candidate,
                "shape_id": s.shape_id,
                "verdict": s.verdict.value,
                "t_us": s.latency_us.median if s.latency_us else None,
                "t_iqr_us": s.latency_us.iqr if s.latency_us else None,
                "n": s.latency_us.n if s.latency_us else None,
                "device_window_us": s.device_window_us.median if s.device_window_us else None,
                "eager_us": base.get("eager"),
                "compile_us": base.get("torch_compile"),
                "t_sol_us": s.t_sol_us,
                "bound": s.bound,
                "sol": s.sol_fraction,
                "sol_eager": s.t_sol_us / base["eager"]
                if s.t_sol_us and base.get("eager")
                else None,
                "sol_compile": s.t_sol_us / base["torch_compile"]
                if s.t_sol_us and base.get("torch_compile")
                else None,
                "flags": s.flags,
                "rel_l2_err": s.rel_l2_err,
            }
        )
    return rows


def phase_score(cache: Path) -> dict[str, Any]:
    """Measure the ceilings, then score each candidate on each problem's tune shapes."""
    from aka.hardware import detect_device, load_or_measure_ceilings
    from aka.spec import load_problem

    info = detect_device()
    if info is None:
        raise SystemExit("no CUDA device")
    t0 = time.monotonic()
    ceilings = load_or_measure_ceilings(cache, info, remeasure=True)
    out: dict[str, Any] = {
        "ceilings": ceilings.model_dump(mode="json"),
        "ceilings_wall_s": time.monotonic() - t0,
        "rows": [],
        "results": [],
    }
    scorer = _scorer(cache)
    for problem in PROBLEMS:
        spec = load_problem(EXAMPLES / problem / "op.yaml")
        for cand in CANDIDATES:
            t0 = time.monotonic()
            result = scorer.evaluate(spec, (EXAMPLES / problem / cand).read_text())
            print(
                f"{problem}/{cand}: {result.verdict.value} score={result.score} "
                f"({time.monotonic() - t0:.0f} s)",
                flush=True,
            )
            if result.failure:
                print(result.failure.message, result.failure.log_tail[-2000:], flush=True)
            out["rows"] += _row(problem, cand, result)
            out["results"].append(json.loads(result.model_dump_json()))
    return out


def phase_repeat(cache: Path, repeats: int) -> dict[str, Any]:
    """Score the single-row candidates in ``repeats`` more fresh workers each."""
    from aka.spec import load_problem

    scorer = _scorer(cache)
    runs: dict[str, list[dict[str, Any]]] = {}
    for problem in PROBLEMS:
        spec = load_problem(EXAMPLES / problem / "op.yaml")
        source = (EXAMPLES / problem / "candidate.py").read_text()
        for i in range(repeats):
            result = scorer.evaluate(spec, source)
            print(f"repeat {problem} #{i}: {result.verdict.value}", flush=True)
            for s in result.shapes:
                runs.setdefault(f"{problem}/{s.shape_id}", []).append(
                    {
                        "t_us": s.latency_us.median if s.latency_us else None,
                        "eager_us": s.baselines_us["eager"].median
                        if "eager" in s.baselines_us
                        else None,
                        "raw_us": result.manifest.raw_samples_us.get(s.shape_id, {}).get(
                            "stream_us"
                        ),
                    }
                )
    return {"runs": runs}


def _ncu_durations(problem: str, shape_ids: list[str], calls: int) -> dict[str, list[float]]:
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    cmd = [
        ncu,
        "--clock-control",
        "none",
        "--cache-control",
        "all",
        "--metrics",
        "gpu__time_duration.sum",
        "--kernel-name",
        "regex:^_",
        "--csv",
        sys.executable,
        str(REPO / "benchmarks" / "ncu_target.py"),
        "--problem",
        str(EXAMPLES / problem / "op.yaml"),
        "--candidate",
        str(EXAMPLES / problem / "candidate.py"),
        "--shapes",
        ",".join(shape_ids),
        "--calls",
        str(calls),
    ]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")])
            ),
        },
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('"')]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"ncu failed ({proc.returncode}): {proc.stderr[-2000:]} {proc.stdout[-2000:]}"
        )
    durations = []
    for rec in csv.DictReader(io.StringIO("\n".join(lines))):
        if rec.get("Metric Name") == "gpu__time_duration.sum":
            scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(
                rec.get("Metric Unit", ""), 1e-3
            )
            durations.append(float(rec["Metric Value"].replace(",", "")) * scale)
    per_shape = {sid: durations[i * calls : (i + 1) * calls] for i, sid in enumerate(shape_ids)}
    return per_shape


def phase_ncu(calls: int) -> dict[str, Any]:
    """Kernel durations from Nsight Compute for the single-row candidates."""
    from aka.spec import Split, load_problem

    out: dict[str, Any] = {}
    for problem in PROBLEMS:
        spec = load_problem(EXAMPLES / problem / "op.yaml")
        ids = [s.id for s in spec.shapes_in({Split.TUNE, Split.HOLDOUT})]
        try:
            per_shape = _ncu_durations(problem, ids, calls)
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as err:
            out[problem] = {"error": str(err)}
            print(f"ncu {problem}: {err}", flush=True)
            continue
        out[problem] = {
            sid: {"ncu_us": d, "median_us": statistics.median(d) if d else None}
            for sid, d in per_shape.items()
        }
    return out


def _header() -> dict[str, Any]:
    from aka.hardware import detect_device, library_versions

    info = detect_device()
    return {
        "device": info.model_dump(mode="json") if info else None,
        "date": datetime.now(UTC).isoformat(),
        "versions": library_versions(),
        "host": os.uname().nodename,
    }


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def print_tables(merged: dict[str, Any]) -> None:
    """Print the score, repeatability and ncu tables."""
    score = merged.get("score", {})
    if score:
        c = score["ceilings"]
        rates = ", ".join(f"{k} {v / 1e12:.0f}" for k, v in sorted(c["rates_flops_per_s"].items()))
        print(
            f"\nceilings ({c['device_name']}): {c['bandwidth_bytes_per_s'] / 1e12:.2f} TB/s; TFLOP/s {rates}; "
            f"launch floor {_fmt(c.get('launch_floor_us'))} us"
        )
        print(
            f"\n{'problem/candidate':34} {'shape':22} {'T_sol':>8} {'eager':>8} {'compile':>8} {'triton':>8} "
            f"{'S_eager':>7} {'S_comp':>7} {'S_trit':>7}  verdict"
        )
        for r in score["rows"]:
            print(
                f"{r['problem'] + '/' + r['candidate']:34} {r['shape_id']:22} {_fmt(r['t_sol_us']):>8} "
                f"{_fmt(r['eager_us']):>8} {_fmt(r['compile_us']):>8} {_fmt(r['t_us']):>8} "
                f"{_fmt(r['sol_eager'], '.1%'):>7} {_fmt(r['sol_compile'], '.1%'):>7} {_fmt(r['sol'], '.1%'):>7}  "
                f"{r['verdict']} {' '.join(r['flags'])}"
            )
    first = {
        f"{r['problem']}/{r['shape_id']}": r["t_us"]
        for r in score.get("rows", [])
        if r["candidate"] == "candidate.py"
    }
    runs = merged.get("repeat", {}).get("runs", {})
    ncu = merged.get("ncu", {})
    if runs or ncu:
        print(
            f"\n{'problem/shape':38} {'worker medians us':>30} {'spread':>7} {'ncu us':>8} {'scorer/ncu':>10}"
        )
        for key, t_first in first.items():
            meds = [t_first] + [r["t_us"] for r in runs.get(key, []) if r["t_us"] is not None]
            spread = (max(meds) - min(meds)) / statistics.median(meds) if len(meds) > 1 else None
            problem, sid = key.split("/", 1)
            n = (ncu.get(problem) or {}).get(sid, {}) if isinstance(ncu.get(problem), dict) else {}
            ratio = t_first / n["median_us"] if n.get("median_us") else None
            print(
                f"{key:38} {' '.join(_fmt(m) for m in meds):>30} {_fmt(spread, '.2%'):>7} "
                f"{_fmt(n.get('median_us')):>8} {_fmt(ratio, '.3f'):>10}"
            )


def main() -> int:
    """Run the chosen phase(s) and write their JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=("score", "repeat", "ncu", "all"), default="all")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--repeats", type=int, default=2, help="extra fresh workers per candidate")
    parser.add_argument("--ncu-calls", type=int, default=7)
    parser.add_argument("--merge", nargs="*", type=Path, help="phase JSON files to merge and print")
    args = parser.parse_args()
    if args.merge is not None:
        merged: dict[str, Any] = {}
        for path in args.merge:
            merged.update(json.loads(path.read_text()))
        date = merged.get("header", {}).get("date", datetime.now(UTC).isoformat())[:10]
        target = args.out / f"scorer_baseline_{date}.json"
        target.write_text(json.dumps(merged, indent=1) + "\n")
        print_tables(merged)
        print(f"\nwrote {target}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="aka-bench-cache-"))
    phases = ("score", "repeat", "ncu") if args.phase == "all" else (args.phase,)
    data: dict[str, Any] = {"header": _header()}
    for phase in phases:
        if phase == "score":
            data["score"] = phase_score(cache)
        elif phase == "repeat":
            data["repeat"] = phase_repeat(cache, args.repeats)
        else:
            data["ncu"] = phase_ncu(args.ncu_calls)
        (args.out / f"scorer_baseline_{args.phase}.json").write_text(
            json.dumps(data, indent=1) + "\n"
        )
    print_tables(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
