"""The offline agent on the GPU (issue #4): ``aka optimize`` with the SearchProposer, no LLM.

For each example problem, runs the full graph (setup → propose → evaluate → profile → decide →
dropout → finalize) with the SearchProposer and prints, per shape, the SOL fraction of eager PyTorch,
torch.compile and aka's final kernel on the tune shapes (what the agent optimized) and the holdout
shapes (which it never saw), plus the wall time of each run.

Run on the GPU machine from the repository root (one call must fit 10 minutes, so split the
problems over calls):

    PYTHONPATH=$PWD python3 benchmarks/agent_offline.py --problems rms_norm,softmax --out $OUT

``--merge FILES`` joins the per-call JSON files into benchmarks/results/agent_offline_<date>.json
and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "configs" / "examples"
ALL = (
    "rms_norm",
    "fused_add_rms_norm",
    "silu_and_mul",
    "softmax",
    "fp8_quant",
    "rotary_embedding",
    "gemm_bf16",
)


def _rows(result: dict[str, Any] | None, split: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for s in (result or {}).get("shapes", []):
        t_sol = s.get("t_sol_us")
        base = {k: v["median"] for k, v in (s.get("baselines_us") or {}).items()}
        t = (s.get("latency_us") or {}).get("median")

        def sol(x: float | None, t_sol: float | None = t_sol) -> float | None:
            return min(1.0, t_sol / x) if t_sol and x else None

        rows.append(
            {
                "split": split,
                "shape_id": s["shape_id"],
                "verdict": s["verdict"],
                "t_sol_us": t_sol,
                "eager_us": base.get("eager"),
                "compile_us": base.get("torch_compile"),
                "aka_us": t,
                "sol_eager": sol(base.get("eager")),
                "sol_compile": sol(base.get("torch_compile")),
                "sol_aka": s.get("sol_fraction"),
                "speedup_eager": (s.get("speedup_vs") or {}).get("eager"),
                "speedup_compile": (s.get("speedup_vs") or {}).get("torch_compile"),
                "bound": s.get("bound"),
                "flags": s.get("flags", []),
            }
        )
    return rows


def run_problem(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Run ``aka optimize`` (runner API) on one example; return its summary."""
    from aka.agent.runner import plan_run, run_optimize
    from aka.core import load_settings

    settings = load_settings()
    paths = settings.paths.model_copy(update={"runs_dir": out / "runs", "cache_dir": args.cache})
    agent = settings.agent.model_copy(
        update={
            "max_iters": args.max_iters,
            "candidates_per_round": args.candidates,
            "seed": args.seed,
            "ncu": not args.no_ncu,
        }
    )
    settings = settings.model_copy(update={"paths": paths, "agent": agent})
    options = plan_run(
        settings,
        EXAMPLES / name / "op.yaml",
        out=out / "runs" / name,
        device="cuda",
        use_kb=args.kb,
    )
    start = time.monotonic()
    events: list[str] = []

    def progress(event: Any) -> None:
        if event.source == "agent":
            line = f"[{name}] {event.stage}: {event.message}"
            events.append(line)
            print(line, flush=True)

    try:
        outcome = run_optimize(settings, options, progress=progress)
    except Exception as err:  # noqa: BLE001 - a benchmark reports every failure and goes on
        return {"problem": name, "error": f"{type(err).__name__}: {err}", "events": events[-20:]}
    wall = time.monotonic() - start
    rec = outcome.record
    best = next((c for c in rec.candidates if c.id == rec.incumbent_id), None)
    return {
        "problem": name,
        "settings": {
            "max_iters": args.max_iters,
            "candidates": args.candidates,
            "seed": args.seed,
            "ncu": not args.no_ncu,
        },  # fmt: skip
        "wall_s": wall,
        "stop_reason": rec.stop_reason,
        "rounds": rec.usage.iters,
        "candidates": rec.usage.candidates,
        "correct": sum(c.correct for c in rec.candidates),
        "promotions": sum(d.promoted for d in rec.decisions),
        "dropouts": len(rec.dropouts),
        "gpu_s": rec.usage.gpu_s,
        "incumbent": best.model_dump(mode="json") if best else None,
        "decisions": [d.model_dump(mode="json", exclude={"pairs"}) for d in rec.decisions],
        "profiles": [p.summary for p in rec.profiles][-2:],
        "rows": _rows(rec.final_tune, "tune") + _rows(rec.final_holdout, "holdout"),
        "events": events[-40:],
    }


def _header() -> dict[str, Any]:
    from aka.hardware import detect_device, library_versions

    info = detect_device()
    return {
        "device": info.model_dump(mode="json") if info else None,
        "date": datetime.now(UTC).isoformat(),
        "versions": library_versions(),
        "host": os.uname().nodename,
    }


def _f(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _geo(values: list[float | None]) -> float | None:
    vals = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def print_tables(problems: list[dict[str, Any]]) -> None:
    """Per-shape table, then one line per problem."""
    print(
        f"\n{'problem':20} {'split':7} {'shape':28} {'T_sol':>8} {'eager':>8} {'compile':>8} "
        f"{'aka':>8} {'S_eager':>7} {'S_comp':>7} {'S_aka':>7} {'x eager':>7} {'x comp':>7}"
    )
    for p in problems:
        for r in p.get("rows", []):
            print(
                f"{p['problem']:20} {r['split']:7} {r['shape_id']:28} {_f(r['t_sol_us']):>8} "
                f"{_f(r['eager_us']):>8} {_f(r['compile_us']):>8} {_f(r['aka_us']):>8} "
                f"{_f(r['sol_eager'], '.1%'):>7} {_f(r['sol_compile'], '.1%'):>7} "
                f"{_f(r['sol_aka'], '.1%'):>7} {_f(r['speedup_eager']):>7} "
                f"{_f(r['speedup_compile']):>7} {r['verdict'] if r['verdict'] != 'accepted' else ''}"
            )
    print(
        f"\n{'problem':20} {'wall s':>7} {'rounds':>6} {'cands':>5} {'ok':>3} {'promo':>5} "
        f"{'drop':>4} {'stop':12} {'kernel':34} {'geo S tune':>10} {'geo S hold':>10} "
        f"{'x eager':>7} {'x comp':>7}"
    )
    for p in problems:
        if "error" in p:
            print(f"{p['problem']:20} ERROR {p['error']}")
            continue
        inc = p.get("incumbent") or {}
        tune = [r for r in p["rows"] if r["split"] == "tune"]
        hold = [r for r in p["rows"] if r["split"] == "holdout"]
        kernel = f"{inc.get('family', '-')} {inc.get('params', '')}"[:34]
        print(
            f"{p['problem']:20} {p['wall_s']:7.0f} {p['rounds']:6} {p['candidates']:5} "
            f"{p['correct']:3} {p['promotions']:5} {p['dropouts']:4} {p['stop_reason']:12} "
            f"{kernel:34} {_f(_geo([r['sol_aka'] for r in tune]), '.1%'):>10} "
            f"{_f(_geo([r['sol_aka'] for r in hold]), '.1%'):>10} "
            f"{_f(_geo([r['speedup_eager'] for r in p['rows']])):>7} "
            f"{_f(_geo([r['speedup_compile'] for r in p['rows']])):>7}"
        )


def main() -> int:
    """Run the chosen problems (or merge earlier JSON files) and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=",".join(ALL))
    parser.add_argument("--max-iters", type=int, default=3)
    parser.add_argument("--candidates", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-ncu", action="store_true", help="profile without Nsight Compute")
    parser.add_argument("--kb", action="store_true", help="use the KB retriever (needs chromadb)")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/aka-agent-bench-cache"))
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--tag", default="part")
    parser.add_argument("--merge", nargs="*", type=Path)
    args = parser.parse_args()
    if args.merge is not None:
        merged: dict[str, Any] = {"header": None, "settings": None, "problems": []}
        for path in args.merge:
            part = json.loads(path.read_text())
            merged["header"] = merged["header"] or part["header"]
            merged["settings"] = merged["settings"] or part["settings"]
            merged["problems"].extend(part["problems"])
        date = merged["header"]["date"][:10]
        target = REPO / "benchmarks" / "results" / f"agent_offline_{date}.json"
        target.write_text(json.dumps(merged, indent=1) + "\n")
        print_tables(merged["problems"])
        print(f"\nwrote {target}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "header": _header(),
        "settings": {
            "max_iters": args.max_iters,
            "candidates": args.candidates,
            "seed": args.seed,
            "kb": args.kb,
            "ncu": not args.no_ncu,
        },
        "problems": [],
    }
    for name in [p.strip() for p in args.problems.split(",") if p.strip()]:
        data["problems"].append(run_problem(name, args, args.out))
        (args.out / f"agent_offline_{args.tag}.json").write_text(json.dumps(data, indent=1))
    print_tables(data["problems"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
