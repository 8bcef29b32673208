"""Which problems accept each reference kernel, and (on a GPU) its measured time and SOL fraction.

Issue #7: a reference kernel counts once the scorer accepts it on a problem, every kernel runs on
the H200 at least once, and the most important carry ``measured:`` entries written by the scorer.
For each kernel (``reference_kernels/``) and each problem it may serve (``aka.agent.measured.
candidate_problems``: the atrex30 operators and the example problems of its family, or whose name
its id contains), the kernel is adapted at its default tuning (``aka.agent.adapt``) and scored
(``Scorer.evaluate``: smoke shapes on the CPU; on a GPU the first ``--max-shapes`` tune shapes,
timed). Pairs the adapter cannot map are counted, not scored. ``--write-measured`` (GPU only) puts
the scorer's entries into the kernel headers.

Prints per kernel its verdicts and a summary (kernels accepted on at least one problem); writes a
JSON file (device, date, versions, every pair's verdict, message and per-shape time and S), rewritten
after every pair so a call cut off by its time limit keeps what it finished.

    python benchmarks/kb_acceptance.py --device cpu --kernels rms_norm_rowwise,gemm_tiled --out DIR
    PYTHONPATH=$PWD python3 benchmarks/kb_acceptance.py --device cuda --problems atrex30 \
        --top 60 --ranked-from benchmarks/results/kb_acceptance_2026-12-03_cpu.json --out $OUT
    python benchmarks/kb_acceptance.py --apply-measured benchmarks/results/kb_acceptance_..._cuda.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _problems() -> list[tuple[str, Any]]:
    """(where from, problem): the atrex30 operators, then the example problems."""
    from aka.spec import load_problem, load_suite

    suite = load_suite("atrex30")
    problems = [("atrex30", suite.problem(o.name)) for o in suite.operators]
    for op in sorted((REPO / "configs" / "examples").glob("*/op.yaml")):
        problems.append(("examples", load_problem(op)))
    return problems


def _shape_ids(problem: Any, cpu: bool, max_shapes: int) -> list[str] | None:
    if cpu:
        return None  # the scorer's default: smoke shapes
    from aka.bench.suite_run import spread
    from aka.spec import Split

    tune = [s for s in problem.shapes if s.split is Split.TUNE]
    return [s.id for s in spread(tune, max_shapes)] if tune else None


def ranked_kernels(rows: list[dict[str, Any]], weights: dict[str, float]) -> list[str]:
    """Kernels accepted on an atrex30 operator, heaviest operator first, row order within one."""
    best: dict[str, tuple[float, int]] = {}
    for order, row in enumerate(rows):
        origin, _, problem = row["problem"].partition("/")
        if row["verdict"] != "accepted" or origin != "atrex30" or problem not in weights:
            continue
        key = (-weights[problem], order)
        if row["kernel"] not in best or key < best[row["kernel"]]:
            best[row["kernel"]] = key
    return sorted(best, key=lambda k: best[k])


def apply_measured(rows: list[dict[str, Any]], kernel_paths: dict[str, Path]) -> int:
    """Write each row's ``measured`` entries into its kernel's header; return the entry count."""
    from aka.agent.measured import write_measured

    count = 0
    for row in rows:
        entries = row.get("measured") or []
        if entries:
            write_measured(kernel_paths[row["kernel"]], entries)
            count += len(entries)
    return count


def _numerics_variants(meta: Any) -> list[dict[str, Any]]:
    """Tunings to try, default first: the other values of a knob that changes the numerics.

    ``round_act`` picks between eager PyTorch's double rounding and an fp32 reference's single
    rounding; which one a problem's tolerance wants depends on its reference, not the kernel.
    """
    values = meta.tuning.get("round_act")
    if not values:
        return [{}]
    return [{}] + [{"round_act": v} for v in values[1:]]


def _row(kernel: str, origin: str, problem: str, result: Any) -> dict[str, Any]:
    return {
        "kernel": kernel,
        "problem": f"{origin}/{problem}",
        "verdict": result.verdict.value,
        "message": (result.failure.message[:300] if result.failure else None),
        "score": result.score,
        "shapes": [
            {
                "shape": s.shape_id,
                "verdict": s.verdict.value,
                "latency_us": s.latency_us.median if s.latency_us else None,
                "t_sol_us": s.t_sol_us,
                "s": s.sol_fraction,
            }
            for s in result.shapes
        ],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; return the exit code."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--kernels", default="", help="Comma-separated kernel ids (default: all).")
    parser.add_argument("--max-shapes", type=int, default=3, help="Tune shapes per problem (GPU).")
    parser.add_argument("--write-measured", action="store_true", help="GPU: update headers.")
    parser.add_argument("--deadline-s", type=float, default=0.0, help="Start no pair after this.")
    parser.add_argument("--problems", default="all", choices=("all", "atrex30", "examples"))
    parser.add_argument("--top", type=int, default=0, help="The N most important (--ranked-from).")
    parser.add_argument("--ranked-from", type=Path, help="Results file that ranks kernels (--top).")
    parser.add_argument(
        "--apply-measured", type=Path, help="Write a results file's entries; no run."
    )
    parser.add_argument(
        "--skip-done",
        type=Path,
        action="append",
        default=[],
        help="Earlier results file(s) of this device: their (kernel, problem) pairs are not re-run.",
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    if args.write_measured and args.device != "cuda":
        parser.error("--write-measured needs --device cuda (the CPU times nothing)")
    if args.top and not args.ranked_from:
        parser.error("--top N needs --ranked-from FILE (an earlier kb_acceptance results file)")

    from aka.agent.adapt import AdaptError, adapt_kernel
    from aka.agent.measured import candidate_problems, measured_entries, write_measured
    from aka.bench import Scorer
    from aka.core import BenchConfig
    from aka.hardware import library_versions
    from aka.kb import load_kernels

    kernels, problems_found = load_kernels(REPO / "reference_kernels")
    if problems_found:
        print("\n".join(problems_found), file=sys.stderr)
        return 2
    if args.apply_measured:
        rows = json.loads(args.apply_measured.read_text())["rows"]
        count = apply_measured(rows, {k.meta.id: k.path for k in kernels})
        print(f"wrote {count} measured entries from {args.apply_measured} into kernel headers")
        return 0
    wanted = {k.strip() for k in args.kernels.split(",") if k.strip()}
    accepted_on: dict[str, set[str]] = {}  # --top: kernel -> the problems it was accepted on
    if args.top:
        from aka.spec import load_suite

        weights = {o.name: o.weight for o in load_suite("atrex30").operators}
        ranked_rows = json.loads(args.ranked_from.read_text())["rows"]
        ranked = ranked_kernels(ranked_rows, weights)
        wanted |= set(ranked[: args.top])
        # a measured entry needs the problems the kernel was accepted on, not its whole family
        for row in ranked_rows:
            if row["verdict"] == "accepted":
                accepted_on.setdefault(row["kernel"], set()).add(row["problem"])
    done = {
        (row["kernel"], row["problem"])
        for path in args.skip_done
        for row in json.loads(path.read_text())["rows"]
    }
    kernels = [k for k in kernels if not wanted or k.meta.id in wanted]
    if args.top:  # most important first, so a run cut off by its time limit kept those
        order = {kid: i for i, kid in enumerate(ranked)}
        kernels.sort(key=lambda k: order.get(k.meta.id, len(order)))
    if wanted - {k.meta.id for k in kernels}:
        parser.error(f"unknown kernels: {sorted(wanted - {k.meta.id for k in kernels})}")
    cpu = args.device == "cpu"
    # No torch.compile baseline: it costs seconds per shape and a measured entry does not use it.
    config = BenchConfig(
        min_samples=10,
        max_samples=200,
        sample_budget_s=0.1,
        cold_recheck="never",
        torch_compile_baseline=False,
    )
    scorer = Scorer(config, Path("/tmp/aka-kb-acceptance-cache"), device=args.device)
    problems = [(w, p) for w, p in _problems() if args.problems in ("all", w)]
    origin = {id(p): where for where, p in problems}
    signatures: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    unmapped = 0
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"kb_acceptance_{args.device}.json"

    def dump() -> None:
        target.write_text(
            json.dumps(
                {
                    "benchmark": "kb_acceptance",
                    "device": args.device,
                    "date": datetime.now(UTC).isoformat(timespec="seconds"),
                    "versions": library_versions(),
                    "kernels": len(kernels),
                    "unmapped_pairs": unmapped,
                    "rows": rows,
                },
                indent=1,
            )
        )

    for i, k in enumerate(kernels):
        if k.meta.dsl.value == "cuda" and cpu:
            continue
        for problem in candidate_problems(k.meta, [p for _, p in problems]):
            if args.deadline_s and time.monotonic() - started > args.deadline_s:
                break
            key = f"{origin[id(problem)]}/{problem.name}"
            if (k.meta.id, key) in done:
                continue
            if args.top and key not in accepted_on.get(k.meta.id, {key}):
                continue
            if key not in signatures:
                signatures[key] = scorer.input_signature(problem)
            result, tuning = None, {}
            for tuning in _numerics_variants(k.meta):
                try:
                    source = adapt_kernel(k.path, k.meta, signatures[key], params=tuning)
                except AdaptError:
                    break
                result = scorer.evaluate(
                    problem, source, shape_ids=_shape_ids(problem, cpu, args.max_shapes)
                )
                if result.accepted:
                    break
            if result is None:
                unmapped += 1
                continue
            dtype = next((a.dtype for a in signatures[key].forward_args if a.dtype), "fp32")
            entries = measured_entries(result, dtype)
            rows.append(
                _row(k.meta.id, origin[id(problem)], problem.name, result)
                | {"tuning": tuning, "measured": entries}
            )
            print(
                f"[{time.monotonic() - started:7.1f}s] {i + 1}/{len(kernels)} {k.meta.id:45s} "
                f"{key:38s} {result.verdict.value}",
                flush=True,
            )
            if args.write_measured and entries:
                write_measured(k.path, entries)
            dump()
    dump()
    accepted = {r["kernel"] for r in rows if r["verdict"] == "accepted"}
    tried = {r["kernel"] for r in rows}
    print(
        f"\n{len(accepted)} of {len(kernels)} kernels accepted on at least one problem "
        f"({len(tried)} scored, {unmapped} kernel-problem pairs the adapter could not map); "
        f"wrote {target}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
