"""``aka bench``: score a candidate against a problem.

Exit codes of ``aka bench score``: 0 iff the verdict is ``accepted`` (performance not measured on a
CPU is not a failure); 1 any other verdict about the candidate; 2 bad usage or an invalid problem or
candidate file; 3 a harness failure; 4 ``not_run`` (this machine cannot run the candidate).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from aka.cli.state import device_choice, settings_from
from aka.core import SpecError

__all__ = ["app"]

app = typer.Typer(help="Score candidates with the embedded scorer.", no_args_is_help=True)

EXIT_ACCEPTED, EXIT_REJECTED, EXIT_NOT_RUN = 0, 1, 4


def _read_candidate(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise SpecError("candidate file not found; check the path", file=str(path)) from err
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"cannot read the candidate: {err}", file=str(path)) from err


@app.command("score")
def score(
    ctx: typer.Context,
    problem: Annotated[
        Path, typer.Option("--problem", "-p", help="op.yaml, KernelBench .py or Atrex-Bench dir.")
    ],
    candidate: Annotated[
        Path, typer.Option("--candidate", "-c", help="The candidate kernel file.")
    ],
    format: Annotated[
        str | None,
        typer.Option("--format", help="Force the problem format: op.yaml, kernelbench, atrex."),
    ] = None,
    shapes: Annotated[
        str | None,
        typer.Option(
            "--shapes", help="Comma-separated shape ids (default: smoke on CPU, all others on GPU)."
        ),
    ] = None,
    device: Annotated[
        str, typer.Option("--device", help="auto, cpu (Triton interpreter) or cuda.")
    ] = "auto",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the EvalResult as JSON on stdout.")
    ] = False,
    cold: Annotated[
        bool | None,
        typer.Option(
            "--cold-check/--no-cold-check",
            help="Re-check an accepted result in cold workers (fresh seeds, empty caches); "
            "default: bench.cold_recheck (on when timing on a GPU).",
        ),
    ] = None,
) -> None:
    """Score CANDIDATE on PROBLEM: screen, compile, correctness, timing and roofline score."""
    from rich.markup import escape

    from aka.bench import Scorer, Verdict
    from aka.cli.render import engagement_line, eval_table, progress_bar
    from aka.core.console import err_console, out_console
    from aka.spec import load_problem

    chosen = device_choice(device)
    settings = settings_from(ctx)
    spec = load_problem(problem, format)
    source = _read_candidate(candidate)
    shape_ids = [s.strip() for s in shapes.split(",") if s.strip()] if shapes else None
    scorer = Scorer(settings.bench, settings.paths.cache_dir, device=chosen)
    with progress_bar(
        f"scoring {candidate.name}", enabled=not as_json and err_console.is_terminal
    ) as on_event:
        result = scorer.evaluate(
            spec,
            source,
            shape_ids=shape_ids,
            progress=on_event,
            cold_recheck=scorer.wants_cold_recheck if cold is None else cold,
        )
    if as_json:
        out_console.print_json(result.model_dump_json())
    else:
        out_console.print(eval_table(result))
        line = engagement_line(result)
        if line is not None:
            out_console.print(line, markup=False, highlight=False)
        if result.failure is not None:
            message = escape(result.failure.message)
            out_console.print(f"[red]{result.failure.kind.value}[/red]: {message}", highlight=False)
            if result.failure.log_tail and settings.bench and ctx.find_root().params.get("debug"):
                out_console.print(result.failure.log_tail, markup=False, highlight=False)
        for finding in result.failure.findings if result.failure else []:
            out_console.print(
                f"  {finding.rule} line {finding.line}: {finding.message}",
                markup=False,
                highlight=False,
            )
        for note in result.notes:
            out_console.print(f"note: {note}", highlight=False)
        if result.skipped_shapes:
            out_console.print(
                f"skipped shapes: {', '.join(result.skipped_shapes)}", highlight=False
            )
        if result.score is not None and result.performance_measured:
            out_console.print(f"score (geomean SOL fraction): {result.score:.3f}")
    if result.verdict is Verdict.ACCEPTED:
        raise typer.Exit(EXIT_ACCEPTED)
    raise typer.Exit(EXIT_NOT_RUN if result.verdict is Verdict.NOT_RUN else EXIT_REJECTED)


suite_app = typer.Typer(help="Benchmark suites (e.g. atrex30).", no_args_is_help=True)
app.add_typer(suite_app, name="suite")


@suite_app.command("show")
def suite_show(
    name: Annotated[str, typer.Argument(help="A built-in suite name, a suite dir or suite.yaml.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print operators, weights, phases and shapes as JSON.")
    ] = False,
) -> None:
    """List a suite's operators with their weight, phase and shapes (id and split)."""
    import json

    from rich.table import Table

    from aka.core.console import out_console
    from aka.spec import load_suite

    suite = load_suite(name)
    rows: list[dict[str, Any]] = []
    for op in suite.operators:
        problem = suite.problem(op.name)
        rows.append(
            {
                "name": op.name,
                "weight": op.weight,
                "phase": op.phase,
                "op_family": problem.op_family.value if problem.op_family else None,
                "shapes": [
                    {
                        "id": s.id,
                        "split": s.split.value,
                        "phase": s.phase.value if s.phase else None,
                    }
                    for s in problem.shapes
                ],
            }
        )
    if as_json:
        out_console.print_json(
            json.dumps({"name": suite.name, "source": suite.source, "operators": rows})
        )
        return
    table = Table(title=f"{suite.name}: {len(rows)} operators", title_justify="left")
    for column in ("operator", "weight", "phase", "tune", "smoke"):
        table.add_column(
            column, justify="right" if column in ("weight", "tune", "smoke") else "left"
        )
    for row in sorted(rows, key=lambda r: -float(r["weight"])):
        splits = [s["split"] for s in row["shapes"]]
        table.add_row(
            str(row["name"]),
            f"{float(row['weight']):.4f}",
            str(row["phase"]),
            str(splits.count("tune")),
            str(splits.count("smoke")),
        )
    out_console.print(table)


def _register_suite_commands() -> None:
    from aka.cli import bench_suite

    app.command("run")(bench_suite.run)
    app.command("roofline")(bench_suite.roofline)


_register_suite_commands()
