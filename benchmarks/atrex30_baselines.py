"""The atrex30 suite's baselines on the GPU (issue #6): eager, torch.compile and the library paths.

Runs ``aka bench run``'s engine (``aka.bench.suite_run.run_suite``) for the baselines over a group of
operators, with tune shapes and generated holdout shapes (at most ``--max-shapes`` per split and
operator, spread evenly from small to large) and torch.compile timed on at most
``--compile-max-shapes`` shapes per operator (compiling costs seconds per shape). Every baseline's
outputs are checked against the reference before its times count; every time is priced against the
same T_sol (measured ceilings, the launch floor measured in the same worker). Prints the suite score
of each baseline, per phase, and the five operators with the largest weighted gap to the roofline;
writes a JSON file (device, date, versions, settings, every shape's raw median and T_sol) and, when
merging, the Markdown and HTML reports.

One device call cannot hold all 30 operators, so run groups and merge (the same --holdout-seed in
every group, so the holdout shapes are one set; only its hash is recorded):

    PYTHONPATH=$PWD python3 benchmarks/atrex30_baselines.py --group 0/3 --holdout-seed S --out $OUT
    python3 benchmarks/atrex30_baselines.py --merge part0.json part1.json part2.json --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import secrets
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _table(run: Any) -> None:
    from aka.bench.suite_report import top_gaps

    phases = sorted({p for s in run.summary for p in s.phase_scores})
    head = f"{'baseline':15s} {'suite':>8s} " + " ".join(f"{p:>8s}" for p in phases)
    print(head + f" {'holdout':>8s} {'ok':>4s} {'failed':>6s} {'not run':>7s}")
    for s in run.summary:
        cells = [s.suite_score, *(s.phase_scores.get(p) for p in phases), s.holdout_score]
        text = " ".join("       -" if v is None else f"{v:8.4f}" for v in cells)
        print(f"{s.entrant:15s} {text} {s.ops_ok:4d} {s.ops_failed:6d} {s.ops_not_run:7d}")
    print("\nlargest weighted gaps to the roofline, w * (1 - S_op) of the best baseline:")
    for g in top_gaps(run, 5):
        print(
            f"  {g.op:30s} w={g.weight:.4f} best={g.entrant:14s} S_op={g.s_op:.4f} gap={g.gap:.4f}"
        )


def _join(parts: list[Any]) -> Any:
    """One ``SuiteRun`` of several runs' operators, in the suite's order.

    A later run of an operator replaces an earlier one's, and so do its notes: a part's note
    that begins with an operator's name is dropped when a later part ran that operator again.
    """
    from aka.bench.suite_result import summarize
    from aka.spec import load_suite

    first = parts[0]
    order = [o.name for o in load_suite(first.suite).operators]
    ops = {o.name: o for p in parts for o in p.operators}
    results = {(r.entrant, r.op): r for p in parts for r in p.results}
    rerun_later = [{o.name for q in parts[i + 1 :] for o in q.operators} for i in range(len(parts))]
    joined = first.model_copy(
        update={
            "operators": [ops[n] for n in order if n in ops],
            "results": list(results.values()),
            "notes": sorted(
                {
                    n
                    for i, p in enumerate(parts)
                    for n in p.notes
                    if n.split(" ", 1)[0] not in rerun_later[i]
                }
            ),
        }
    )
    joined.summary = summarize(joined)
    return joined


def _merge(paths: list[Path], out: Path) -> int:
    from aka.bench.suite_report import write_reports
    from aka.bench.suite_result import SuiteRun, summarize
    from aka.spec import load_suite

    parts = [SuiteRun.model_validate(json.loads(p.read_text())["run"]) for p in paths]
    merged = _join(parts)
    order = [o.name for o in load_suite(merged.suite).operators]
    missing = [n for n in order if n not in {o.name for o in merged.operators}]
    if missing:
        merged.notes.append(f"operators not run (they count 0 in the suite score): {missing}")
    merged.summary = summarize(merged)
    _table(merged)
    stamp = merged.date[:10]
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"atrex30_baselines_{stamp}.json"
    raw = [json.loads(p.read_text()) for p in paths]
    target.write_text(
        json.dumps(
            {
                "benchmark": "atrex30_baselines",
                "parts": [{"file": p.name, **r["meta"]} for p, r in zip(paths, raw, strict=True)],
                "run": merged.model_dump(mode="json"),
            },
            indent=1,
        )
    )
    reports = write_reports(merged, out / f"atrex30_baselines_{stamp}")
    print(f"wrote {target} and {', '.join(str(p) for p in reports.values())}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one group of operators (or merge group files); return the exit code."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--group", default="0/1", help="k/n: the k-th of n operator groups.")
    parser.add_argument("--ops", default="", help="Comma-separated operators (overrides --group).")
    parser.add_argument("--max-shapes", type=int, default=4)
    parser.add_argument("--compile-max-shapes", type=int, default=2)
    parser.add_argument("--holdout-seed", type=int, default=None)
    parser.add_argument("--sample-budget-s", type=float, default=0.25)
    parser.add_argument("--min-samples", type=int, default=20)
    parser.add_argument(
        "--holdout-cap-gb",
        type=float,
        default=2.0,
        help="Largest holdout shape's memory (the reference's tensors for every seed go to disk).",
    )
    parser.add_argument("--merge", nargs="+", type=Path, help="Join group files instead.")
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=0.0,
        help="Start no operator after this many seconds (0: no deadline); the rest are listed.",
    )
    parser.add_argument(
        "--tag", default="", help="Part file name tag (default from --group/--ops)."
    )
    args = parser.parse_args(argv)
    if args.merge:
        return _merge(args.merge, args.out)

    import torch

    from aka.bench import Scorer
    from aka.bench.suite_run import SuiteOptions, run_suite
    from aka.core.config import BenchConfig
    from aka.hardware import library_versions
    from aka.spec import load_suite

    suite = load_suite("atrex30")
    names = [o.name for o in suite.operators]
    if args.ops:
        chosen = [o.strip() for o in args.ops.split(",") if o.strip()]
    else:
        k, n = (int(x) for x in args.group.split("/"))
        chosen = names[k::n]
    seed = args.holdout_seed if args.holdout_seed is not None else secrets.randbits(31)
    config = BenchConfig(
        min_samples=args.min_samples,
        max_samples=400,
        sample_budget_s=args.sample_budget_s,
        cold_recheck="never",
    )
    scorer = Scorer(config, Path("/tmp/aka-bench-cache"), device="auto")
    options = SuiteOptions(
        out_dir=Path("/tmp/aka-suite-run"),
        baselines=["eager", "torch_compile", "library"],
        ops=chosen,
        max_shapes=args.max_shapes,
        compile_max_shapes=args.compile_max_shapes,
        holdout_seed=seed,
        holdout_memory_cap_bytes=args.holdout_cap_gb * 2**30,
    )
    started = time.monotonic()

    def show(event: Any) -> None:
        if event.source == "suite":
            print(f"[{time.monotonic() - started:7.1f}s] {event.stage} {event.message}", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    tag = args.tag or (
        args.ops.replace(",", "-")[:40] if args.ops else args.group.replace("/", "of")
    )
    target = args.out / f"atrex30_baselines_part_{tag}.json"
    done: list[Any] = []
    skipped: list[str] = []
    failed: dict[str, str] = {}
    for op in chosen:
        elapsed = time.monotonic() - started
        if args.deadline_s and elapsed > args.deadline_s:
            skipped.append(op)
            continue
        print(f"[{elapsed:7.1f}s] operator {op}", flush=True)
        try:
            done.append(run_suite(scorer, suite, dataclasses.replace(options, ops=[op]), show))
        except Exception as err:  # noqa: BLE001 - one operator failing must not lose the others
            failed[op] = f"{type(err).__name__}: {str(err)[:400]}"
            print(f"operator {op} failed: {failed[op]}", flush=True)
            continue
        # Written after every operator: a call cut off by its time limit keeps what it finished.
        run = _join(done)
        run.notes.extend(f"{k} not scored: {v}" for k, v in failed.items())
        meta = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
            "versions": library_versions(),
            "ops": [o.name for o in run.operators],
            "config": config.model_dump(mode="json"),
            "max_shapes": args.max_shapes,
            "compile_max_shapes": args.compile_max_shapes,
            "holdout_seed_given": args.holdout_seed is not None,
            "holdout_cap_gb": args.holdout_cap_gb,
            "failed": failed,
            "wall_s": round(time.monotonic() - started, 1),
        }
        target.write_text(json.dumps({"meta": meta, "run": run.model_dump(mode="json")}, indent=1))
    if not done:
        print("no operator run before the deadline")
        return 1
    _table(_join(done))
    print(f"wall {round(time.monotonic() - started, 1)} s; wrote {target}")
    if skipped:
        print(f"not started (deadline {args.deadline_s} s): {','.join(skipped)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
