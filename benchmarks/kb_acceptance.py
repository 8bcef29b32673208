"""Which problems accept each reference kernel, and (on a GPU) its measured time and SOL fraction.

Issue #7: a reference kernel counts once the scorer accepts it on a problem, every kernel runs on
the H200 at least once, and the most important carry ``measured:`` entries written by the scorer.
For each kernel (``reference_kernels/``) and each problem it may serve (``aka.agent.measured.
candidate_problems``: the atrex30 operators and the example problems of its family, or whose name
its id contains), the kernel is adapted at its default tuning (``aka.agent.adapt``) and scored
(``Scorer.evaluate``: smoke shapes on the CPU; on a GPU the first ``--max-shapes`` tune shapes,
timed). Pairs the adapter cannot map are counted, not scored. ``--write-measured`` (GPU only) puts
the scorer's entries into the kernel headers.

Each kernel is also scored on its *own* problem (``aka.kb.kernel_problem``: its file's
``reference()`` and ``make_inputs`` with the smoke shapes of its header's ``problem:`` field), after
its family's real problems; every row says which kind of problem it is (``problem_kind``: atrex30,
examples or own). A pair whose scoring takes longer than ``--pair-cap-s`` (the interpreter is slow:
an 8192-wide ``tl.sort`` takes minutes) is recorded as ``skipped`` with its time, not waited for.

Prints per kernel its verdicts and a summary (kernels accepted per problem kind, and on at least one
problem); writes a JSON file (device, date, versions, every pair's verdict, message and per-shape
time and S), rewritten after every pair so a call cut off by its time limit keeps what it finished.
``--shard I/N`` scores every N-th kernel (2 processes on a 2-core machine); ``--merge`` joins the
shard files (and ``--carry`` rows of an earlier file for pairs not re-run) into one results file.

    python benchmarks/kb_acceptance.py --device cpu --kernels rms_norm_rowwise,gemm_tiled --out DIR
    PYTHONPATH=$PWD python3 benchmarks/kb_acceptance.py --device cuda --problems atrex30 \
        --top 60 --ranked-from benchmarks/results/kb_acceptance_2026-12-03_cpu.json --out $OUT
    python benchmarks/kb_acceptance.py --apply-measured benchmarks/results/kb_acceptance_..._cuda.json
    python benchmarks/kb_acceptance.py --shard 0/2 --out /tmp/s0 &  python ... --shard 1/2 --out /tmp/s1
    python benchmarks/kb_acceptance.py --merge /tmp/s0/kb_acceptance_cpu.json \
        /tmp/s1/kb_acceptance_cpu.json --out benchmarks/results/kb_acceptance_<date>_cpu.json
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


def _signature(scorer: Any, problem: Any) -> Any:
    """The input signature the adapter maps; for an own problem, its richest shape's.

    The adapter maps one shape's inputs; an optional tensor that shape leaves at None (a
    ``weighted: false`` or ``affine: false`` case) would be left out of the candidate for every
    shape. An own problem's shapes (each once, whatever its dtypes) are described in turn and
    the one with the most tensors (then the most scalars given) is mapped. Others: the default.
    """
    if not problem.name.startswith("kernel."):
        return scorer.input_signature(problem)
    best, best_key, seen = None, (-1, -1), set()
    for shape in problem.shapes:
        kwargs = json.dumps({k: v for k, v in shape.input_kwargs.items() if k != "dtype"},
                            sort_keys=True)  # fmt: skip
        if kwargs in seen:
            continue
        seen.add(kwargs)
        signature = scorer.input_signature(problem, shape.id)
        args = signature.forward_args
        key = (sum(a.kind == "tensor" for a in args),
               sum(a.kind == "scalar" and a.provided for a in args))  # fmt: skip
        if key > best_key:
            best, best_key = signature, key
    return best


def _row(kernel: str, origin: str, problem: str, result: Any) -> dict[str, Any]:
    return {
        "kernel": kernel,
        "problem": f"{origin}/{problem}",
        "problem_kind": origin,
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


KINDS = ("atrex30", "examples", "own")


def _kind(row: dict[str, Any]) -> str:
    return str(row.get("problem_kind") or row["problem"].partition("/")[0])


def summarize(rows: list[dict[str, Any]], kernels: int, triton: int) -> dict[str, Any]:
    """Kernels accepted per problem kind and on any problem; the others by their verdicts."""
    accepted = {kind: sorted({r["kernel"] for r in rows if _kind(r) == kind and
                              r["verdict"] == "accepted"}) for kind in KINDS}  # fmt: skip
    anywhere = set().union(*accepted.values())
    first: dict[str, str] = {}  # the first kind (atrex30, examples, own) that accepted a kernel
    for kind in KINDS:
        for kernel in accepted[kind]:
            first.setdefault(kernel, kind)
    rejected: dict[str, list[str]] = {}
    for kernel in sorted({r["kernel"] for r in rows} - anywhere):
        mine = [r for r in rows if r["kernel"] == kernel]
        own = [r for r in mine if _kind(r) == "own"]
        verdict = (own or mine)[-1]["verdict"]  # its own problem's verdict says most
        rejected.setdefault(verdict, []).append(kernel)
    return {
        "kernels": kernels,
        "triton_kernels": triton,
        "scored": len({r["kernel"] for r in rows}),
        "accepted_on_a_problem": len(anywhere),
        "accepted_by_kind": {kind: len(names) for kind, names in accepted.items()},
        "accepted_first_by_kind": {k: sum(v == k for v in first.values()) for k in KINDS},
        "accepted_only_on_own": sorted(
            set(accepted["own"]) - set(accepted["atrex30"]) - set(accepted["examples"])
        ),  # fmt: skip
        "not_accepted_by_verdict": {k: v for k, v in sorted(rejected.items())},
        "pairs_by_verdict": {
            v: sum(r["verdict"] == v for r in rows) for v in sorted({r["verdict"] for r in rows})
        },
    }


def merge(paths: list[Path], carry: list[Path], out: Path, note: str) -> dict[str, Any]:
    """Join shard files with carried rows of earlier files; write ``out``.

    A pair in several shard files keeps the row of the last one (a re-run after a fix); a carried
    row fills only a pair no shard file has.
    """
    files = [json.loads(p.read_text()) for p in paths]
    by_pair = {(r["kernel"], r["problem"]): r for f in files for r in f["rows"]}  # later wins
    rows: list[dict[str, Any]] = list(by_pair.values())
    have = {(r["kernel"], r["problem"]) for r in rows}
    parts = [{"date": f["date"], "note": f.get("note", "a shard of this sweep")} for f in files]
    for path in carry:
        earlier = json.loads(path.read_text())
        kept = [r | {"carried_from": earlier["date"]} for r in earlier["rows"]
                if (r["kernel"], r["problem"]) not in have]  # fmt: skip
        rows += kept
        have |= {(r["kernel"], r["problem"]) for r in kept}
        parts += earlier.get("parts", [])
        parts.append({"date": earlier["date"], "note": f"{len(kept)} rows carried from {path.name}"
                      " (pairs this sweep did not re-run)"})  # fmt: skip
    for row in rows:
        row.setdefault("problem_kind", _kind(row))
    # load order (by path, as a sweep visits them), family problems before the own one: the
    # --top ranking breaks ties between kernels of one operator by row order
    from aka.kb import load_kernels

    kernels, _ = load_kernels(REPO / "reference_kernels")
    position = {k.meta.id: i for i, k in enumerate(kernels)}
    order = {kind: i for i, kind in enumerate(KINDS)}
    rows.sort(
        key=lambda r: (
            position.get(r["kernel"], len(position)),
            order.get(_kind(r), 9),
            r["problem"],
        )
    )
    base = files[0]
    record = {
        "benchmark": "kb_acceptance",
        "device": base["device"],
        "date": max(f["date"] for f in files),
        "versions": base["versions"],
        "note": note,
        "parts": parts,
        "kernels": base["kernels"],
        "unmapped_pairs": sum(f.get("unmapped_pairs", 0) for f in files),
        "not_scored": sorted({k for f in files for k in f.get("not_scored", [])}),
        "summary": summarize(rows, base["kernels"], base.get("triton_kernels", 0)),
        "rows": rows,
    }
    out.write_text(json.dumps(record, indent=1))
    return record


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; return the exit code."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--kernels", default="", help="Comma-separated kernel ids (default: all).")
    parser.add_argument("--max-shapes", type=int, default=3, help="Tune shapes per problem (GPU).")
    parser.add_argument("--write-measured", action="store_true", help="GPU: update headers.")
    parser.add_argument("--deadline-s", type=float, default=0.0, help="Start no pair after this.")
    parser.add_argument(
        "--problems", default="all", choices=("all", "atrex30", "examples", "own", "family"),
        help="family = atrex30 + examples; own = each kernel's own-reference problem.",
    )  # fmt: skip
    parser.add_argument("--pair-cap-s", type=float, default=60.0,
                        help="A pair slower than this is recorded as skipped (slow).")  # fmt: skip
    parser.add_argument("--shard", default="0/1", help="I/N: score every N-th kernel from I.")
    parser.add_argument("--merge", type=Path, nargs="+", help="Shard files to join; no run.")
    parser.add_argument("--carry", type=Path, action="append", default=[],
                        help="--merge: earlier results whose rows fill pairs not re-run.")  # fmt: skip
    parser.add_argument("--note", default="", help="--merge: the merged file's note.")
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
    if args.merge:
        record = merge(args.merge, args.carry, args.out, args.note)
        print(json.dumps(record["summary"], indent=1))
        return 0
    if args.write_measured and args.device != "cuda":
        parser.error("--write-measured needs --device cuda (the CPU times nothing)")
    if args.top and not args.ranked_from:
        parser.error("--top N needs --ranked-from FILE (an earlier kb_acceptance results file)")
    shard_i, _, shard_n = args.shard.partition("/")
    shard, shards = int(shard_i), int(shard_n or 1)
    if not 0 <= shard < shards:
        parser.error(f"--shard {args.shard}: want I/N with 0 <= I < N")

    from aka.agent.adapt import AdaptError, InPlaceMismatchError, adapt_kernel
    from aka.agent.measured import candidate_problems, measured_entries, write_measured
    from aka.bench import Scorer
    from aka.core import AkaError, BenchConfig
    from aka.hardware import library_versions
    from aka.kb import kernel_problem, load_kernels

    kernels, problems_found = load_kernels(REPO / "reference_kernels")
    if problems_found:  # lint findings (a long file, say); the kernels still load and are scored
        print("kb lint:\n" + "\n".join(problems_found), file=sys.stderr)
    total, triton = len(kernels), sum(k.meta.dsl.value == "triton" for k in kernels)
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
    accepted_before = {
        row["kernel"]
        for path in args.skip_done
        for row in json.loads(path.read_text())["rows"]
        if row["verdict"] == "accepted"
    }
    kernels = [k for k in kernels if not wanted or k.meta.id in wanted]
    if args.top:  # most important first, so a run cut off by its time limit kept those
        order = {kid: i for i, kid in enumerate(ranked)}
        kernels.sort(key=lambda k: order.get(k.meta.id, len(order)))
    elif accepted_before:  # kernels no earlier run accepted first: a cut-off run kept those
        kernels.sort(key=lambda k: k.meta.id in accepted_before)
    if wanted - {k.meta.id for k in kernels}:
        parser.error(f"unknown kernels: {sorted(wanted - {k.meta.id for k in kernels})}")
    kernels = kernels[shard::shards]
    cpu = args.device == "cpu"
    # No torch.compile baseline: it costs seconds per shape and a measured entry does not use it.
    # The worker timeout caps one pair (the reference worker and the candidate's each).
    config = BenchConfig(
        min_samples=10,
        max_samples=200,
        sample_budget_s=0.1,
        cold_recheck="never",
        torch_compile_baseline=False,
        worker_timeout_s=args.pair_cap_s,
        compile_timeout_s=args.pair_cap_s,
    )
    scorer = Scorer(config, Path("/tmp/aka-kb-acceptance-cache"), device=args.device)
    family = args.problems in ("all", "atrex30", "examples", "family")
    problems = [
        (w, p) for w, p in _problems() if args.problems in ("all", "family", w)
    ] if family else []  # fmt: skip
    own = args.problems in ("all", "own")
    origin = {id(p): where for where, p in problems}
    signatures: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    not_scored: list[str] = []
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
                    "shard": args.shard,
                    "kernels": total,
                    "triton_kernels": triton,
                    "unmapped_pairs": unmapped,
                    "not_scored": not_scored,
                    "summary": summarize(rows, total, triton),
                    "rows": rows,
                },
                indent=1,
            )
        )

    for i, k in enumerate(kernels):
        if k.meta.dsl.value == "cuda" and cpu:
            continue
        pairs: list[tuple[str, Any]] = [
            (origin[id(p)], p) for p in candidate_problems(k.meta, [p for _, p in problems])
        ]
        if own:
            if k.meta.problem is None:
                not_scored.append(f"{k.meta.id}: no problem: field")
            else:
                try:
                    pairs.append(("own", kernel_problem(k.path, k.meta, k.text)))
                except AkaError as err:
                    not_scored.append(f"{k.meta.id}: own problem: {err}")
        for where, problem in pairs:
            if args.deadline_s and time.monotonic() - started > args.deadline_s:
                not_scored.append(f"{k.meta.id}: {where}/{problem.name}: past --deadline-s")
                continue
            key = f"{where}/{problem.name}"
            if (k.meta.id, key) in done:
                continue
            if args.top and key not in accepted_on.get(k.meta.id, {key}):
                continue
            t0 = time.monotonic()
            result, tuning, error = None, {}, None
            try:
                if key not in signatures:
                    signatures[key] = _signature(scorer, problem)
                for tuning in _numerics_variants(k.meta):
                    try:
                        source = adapt_kernel(k.path, k.meta, signatures[key], params=tuning)
                    except InPlaceMismatchError as err:  # the right op, the wrong contract: say so
                        error = ("in_place_mismatch", str(err))
                        break
                    except AdaptError as err:
                        error = ("unmapped", str(err))
                        break
                    shape_ids = (
                        [s.id for s in problem.shapes] if where == "own" and not cpu
                        else _shape_ids(problem, cpu, args.max_shapes)
                    )  # fmt: skip
                    result = scorer.evaluate(problem, source, shape_ids=shape_ids)
                    if result.accepted:
                        break
            except AkaError as err:  # the problem's reference (or the harness) failed
                result, error = None, (f"error:{err.code}", str(err))
            elapsed = time.monotonic() - t0
            if result is None:
                if error is None or error[0] == "unmapped":
                    unmapped += 1
                    if where != "own":
                        continue
                    error = error or ("unmapped", "")
                verdict, message = error
                row = {"kernel": k.meta.id, "problem": key, "problem_kind": where,
                       "verdict": verdict, "message": message[:300], "score": None,
                       "shapes": [], "tuning": tuning, "measured": []}  # fmt: skip
            else:
                dtype = next((a.dtype for a in signatures[key].forward_args if a.dtype), "fp32")
                per_shape = {s.id: str(s.input_kwargs["dtype"]) for s in problem.shapes
                             if isinstance(s.input_kwargs.get("dtype"), str)}  # fmt: skip
                entries = measured_entries(result, dtype, dtypes=per_shape)
                row = _row(k.meta.id, where, problem.name, result) | {
                    "tuning": tuning,
                    "measured": entries,
                }
                if result.verdict.value == "timeout" and cpu:
                    row["verdict"] = "skipped"
                    row["message"] = (
                        f"skipped: slow in the interpreter (over {args.pair_cap_s:.0f} s a "
                        f"worker; {elapsed:.0f} s in all): {row['message'] or ''}"
                    )[:300]
                if args.write_measured and entries:
                    write_measured(k.path, entries)
            row["wall_s"] = round(elapsed, 1)
            rows.append(row)
            print(
                f"[{time.monotonic() - started:7.1f}s] {i + 1}/{len(kernels)} {k.meta.id:45s} "
                f"{key:38s} {row['verdict']} ({elapsed:.0f} s)",
                flush=True,
            )
            dump()
    dump()
    summary = summarize(rows, total, triton)
    print(
        f"\n{summary['accepted_on_a_problem']} of {len(kernels)} kernels accepted on at least one "
        f"problem (by kind: {summary['accepted_by_kind']}; {summary['scored']} scored, {unmapped} "
        f"kernel-problem pairs the adapter could not map); wrote {target}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
