"""``aka bench run`` and ``aka bench roofline``: a suite's scores and rooflines.

``run`` scores candidates and baselines over a suite (``aka.bench.suite_run``) and writes
``results.json``, ``report.md`` and ``report.html`` into ``--out``; re-running with the same
``--out`` resumes from its cache. ``roofline`` prints per shape the FLOPs, bytes and ``T_sol`` of
a suite operator on this machine's device or a named one (datasheet ceilings).

Exit codes of ``run``: 0 when every requested entrant ran on every operator, 1 when some
candidate or baseline failed or is missing, 2 bad usage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from aka.cli.state import device_choice, settings_from
from aka.core import SpecError

__all__ = ["roofline", "run"]


def _split_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [p.strip() for p in text.split(",") if p.strip()]


def run(
    ctx: typer.Context,
    suite: Annotated[str, typer.Option("--suite", help="Built-in suite name, dir or suite.yaml.")],
    candidates: Annotated[
        Path | None,
        typer.Option(
            "--candidates", help="Directory with <op>.py or <op>/candidate.py per operator."
        ),
    ] = None,
    baselines: Annotated[
        str | None,
        typer.Option(
            "--baselines",
            help="Comma-separated: eager, compile (torch.compile), library. "
            "Default: eager,compile,library without --candidates, none with them.",
        ),
    ] = None,
    ops: Annotated[str | None, typer.Option("--ops", help="Comma-separated operators.")] = None,
    max_shapes: Annotated[
        int | None, typer.Option("--max-shapes", min=1, help="At most N shapes per split and op.")
    ] = None,
    compile_max_shapes: Annotated[
        int | None,
        typer.Option(
            "--compile-max-shapes", min=0, help="Time torch.compile on at most N shapes per op."
        ),
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", help="Results folder (also the resume cache).")
    ] = Path("aka-suite-run"),
    device: Annotated[
        str, typer.Option("--device", help="auto, cpu (Triton interpreter) or cuda.")
    ] = "auto",
    holdout: Annotated[
        bool,
        typer.Option("--holdout/--no-holdout", help="Generate holdout shapes (GPU runs)."),
    ] = True,
) -> None:
    """Score candidates and baselines over a suite; write results.json and the reports."""
    from aka.bench import Scorer
    from aka.bench.suite_report import write_reports
    from aka.bench.suite_run import SuiteOptions, run_suite
    from aka.cli.render import progress_bar
    from aka.core.console import err_console, out_console
    from aka.spec import load_suite
    from aka.spec.holdout import holdout_seed

    chosen = device_choice(device)
    settings = settings_from(ctx)
    spec = load_suite(suite)
    names = _split_list(baselines)
    if names is None:
        names = [] if candidates is not None else ["eager", "compile", "library"]
    names = ["torch_compile" if n == "compile" else n for n in names]
    scorer = Scorer(settings.bench, settings.paths.cache_dir, device=chosen)
    seed = None
    if holdout and not scorer.cpu:
        seed = holdout_seed(settings.bench, settings.paths.cache_dir)
    options = SuiteOptions(
        out_dir=out,
        candidates=candidates,
        baselines=names,
        ops=_split_list(ops),
        max_shapes=max_shapes,
        compile_max_shapes=compile_max_shapes,
        holdout_seed=seed,
        holdout_count=settings.bench.holdout_shapes,
        holdout_memory_cap_bytes=settings.bench.holdout_memory_cap_gb * 2**30,
    )
    with progress_bar(f"suite {spec.name}", enabled=err_console.is_terminal) as on_event:
        result = run_suite(scorer, spec, options, _per_operator(on_event))
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(result.model_dump_json(indent=1))
    paths = write_reports(result, out)
    _print_summary(result)
    out_console.print(
        f"wrote {out / 'results.json'}, {paths.get('markdown', '')}, {paths.get('html', '')}",
        highlight=False,
    )
    failed = [r for r in result.results if r.status in ("failed", "missing")]
    raise typer.Exit(1 if failed else 0)


def _per_operator(on_event: Any) -> Any:
    """One bar over operators: worker events (per shape) only update the text, not the count."""
    from dataclasses import replace

    current = {"op": "", "done": 0, "total": 0}

    def relay(event: Any) -> None:
        if event.source == "suite":
            current.update(op=event.message, done=event.done or 0, total=event.total or 0)
            on_event(event)
            return
        text = f"{current['op']}: {event.stage} {event.message}".strip()
        on_event(replace(event, message=text, done=current["done"], total=current["total"]))

    return relay


def _print_summary(result: Any) -> None:
    from rich.table import Table

    from aka.core.console import out_console

    table = Table(title=f"{result.suite}: {len(result.operators)} operators", title_justify="left")
    for column in ("entrant", "suite score", "phases", "holdout", "ok", "failed", "not run"):
        table.add_column(column, justify="left" if column in ("entrant", "phases") else "right")
    for s in result.summary:
        phases = ", ".join(
            f"{p} {v:.3f}" if v is not None else f"{p} -" for p, v in s.phase_scores.items()
        )
        table.add_row(
            s.entrant,
            "-" if s.suite_score is None else f"{s.suite_score:.4f}",
            phases or "-",
            "-" if s.holdout_score is None else f"{s.holdout_score:.4f}",
            str(s.ops_ok),
            str(s.ops_failed),
            str(s.ops_not_run),
        )
    out_console.print(table)
    if not result.performance_measured:
        out_console.print("CPU: nothing was timed; correctness only (smoke shapes).")


def roofline(
    ctx: typer.Context,
    suite: Annotated[str, typer.Option("--suite", help="Built-in suite name, dir or suite.yaml.")],
    op: Annotated[str, typer.Option("--op", help="The operator.")],
    shapes: Annotated[
        str | None, typer.Option("--shapes", help="Comma-separated shape ids (default: a split).")
    ] = None,
    split: Annotated[str, typer.Option("--split", help="tune, smoke or holdout.")] = "tune",
    device_name: Annotated[
        str | None,
        typer.Option("--device-name", help="Price on a named device's datasheet (e.g. H200)."),
    ] = None,
    device: Annotated[
        str, typer.Option("--device", help="Where the reference is counted: auto, cpu or cuda.")
    ] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Print FLOPs, bytes read/written and T_sol per shape of a suite operator."""
    import json

    from rich.table import Table

    from aka.bench import Scorer
    from aka.bench.performance import scorer_ceilings
    from aka.bench.suite_roofline import shape_rooflines
    from aka.cli.render import progress_bar
    from aka.core.console import err_console, out_console
    from aka.hardware import datasheet_ceilings, detect_device
    from aka.spec import Split, load_suite

    chosen = device_choice(device)
    settings = settings_from(ctx)
    problem = load_suite(suite).problem(op)
    if split not in {s.value for s in Split}:
        raise SpecError(f"--split must be tune, smoke or holdout, not {split!r}", field="--split")
    ids = _split_list(shapes)
    chosen_shapes = problem.shapes_in(ids=ids) if ids else problem.shapes_in({Split(split)})
    if ids:
        missing = sorted(set(ids) - {s.id for s in problem.shapes})
        if missing:
            raise SpecError(f"unknown shape ids {missing}", field="--shapes")
    if not chosen_shapes:
        raise SpecError(f"operator {op!r} has no {split} shapes", field="--split")
    scorer = Scorer(settings.bench, settings.paths.cache_dir, device=chosen)
    if device_name is not None:
        ceilings = datasheet_ceilings(device_name)
        if ceilings is None:
            raise SpecError(
                f"no datasheet entry matches {device_name!r}; try a name like H200, H100, A100",
                field="--device-name",
            )
    else:
        info = detect_device()
        if info is None:
            raise SpecError(
                "no CUDA device here: pass --device-name (e.g. H200) to price on its datasheet",
                field="--device-name",
            )
        ceilings = scorer_ceilings(scorer, info)
    with progress_bar(f"counting {op}", enabled=not as_json and err_console.is_terminal) as cb:
        rows = shape_rooflines(scorer, problem, chosen_shapes, ceilings, cb)
    payload = {
        "suite": suite,
        "op": op,
        "device": ceilings.device_name,
        "ceilings": ceilings.source,
        "shapes": rows,
    }
    if as_json:
        out_console.print_json(json.dumps(payload))
        return
    table = Table(
        title=f"{op} on {ceilings.device_name} ({ceilings.source} ceilings)", title_justify="left"
    )
    for column in ("shape", "split", "GFLOP", "MB read", "MB written", "T_sol us", "bound"):
        table.add_column(
            column, justify="left" if column in ("shape", "split", "bound") else "right"
        )
    for r in rows:
        table.add_row(
            r["shape_id"],
            r["split"],
            f"{r['flops'] / 1e9:,.3f}",
            f"{r['bytes_read'] / 1e6:,.3f}",
            f"{r['bytes_written'] / 1e6:,.3f}",
            f"{r['t_sol_s'] * 1e6:,.2f}",
            r["bound"],
        )
    out_console.print(table)
