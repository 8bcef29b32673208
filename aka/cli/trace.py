"""``aka trace``: turn a PyTorch profiler trace into a weighted benchmark suite.

Exit codes of ``aka trace import``: 0 the suite was written; 2 bad usage, an unreadable or
unrecognised trace, an occupied ``--out`` or a trace with nothing the suite's problems cover.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["app"]

app = typer.Typer(help="Import profiler traces as benchmark suites.", no_args_is_help=True)


@app.command("import")
def import_(
    trace: Annotated[
        Path, typer.Argument(help="A Chrome trace (export_chrome_trace) or key_averages JSON.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="The suite directory to write.")],
    suite: Annotated[
        str, typer.Option("--suite", help="The built-in suite whose problems ops map to.")
    ] = "atrex30",
    top: Annotated[
        int, typer.Option("--top", help="Keep the N heaviest shapes per operator.")
    ] = 32,
    force: Annotated[
        bool, typer.Option("--force", help="Write into a non-empty --out directory.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the import summary as JSON on stdout.")
    ] = False,
) -> None:
    """Map TRACE's operators to suite problems and write DIR/suite.yaml with weights and shapes."""
    from rich.table import Table

    from aka.bench.trace_suite import import_trace
    from aka.core.console import out_console

    result = import_trace(trace, out, suite=suite, top=top, force=force)
    if as_json:
        out_console.print_json(result.model_dump_json())
        return
    basis = "GPU time" if result.basis == "gpu" else "CPU self time (no GPU kernels in the trace)"
    covered = Table(
        title=f"{result.directory}/suite.yaml: {len(result.operators)} operators, "
        f"{result.covered_share:.1%} of the {basis}",
        title_justify="left",
    )
    for column in ("operator", "weight", "share", "calls", "shapes", "phase"):
        covered.add_column(column, justify="left" if column in ("operator", "phase") else "right")
    for op in result.operators:
        dropped = f" (+{op.shapes_dropped} cut)" if op.shapes_dropped else ""
        covered.add_row(
            op.name,
            f"{op.weight:.4f}",
            f"{op.share:.1%}",
            str(op.calls),
            f"{op.shapes}{dropped}",
            op.phase,
        )
    out_console.print(covered)
    if not result.uncovered:
        return
    uncovered = Table(title="not covered", title_justify="left")
    for column in ("op", "share", "calls", "reason"):
        uncovered.add_column(column, justify="right" if column in ("share", "calls") else "left")
    for left in result.uncovered:
        uncovered.add_row(left.name, f"{left.share:.1%}", str(left.calls), left.reason)
    out_console.print(uncovered)
