"""Rendering for the CLI: progress bars fed by ``ProgressEvent``s and result tables.

Only the CLI imports ``rich.progress`` (STYLE G4).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from aka.bench import EvalResult, LatencyStats, Verdict
from aka.core import ProgressCallback, ProgressEvent
from aka.core.console import err_console

__all__ = ["engagement_line", "eval_table", "progress_bar"]

_VERDICT_STYLE = {Verdict.ACCEPTED: "green", Verdict.NOT_RUN: "yellow"}


@contextmanager
def progress_bar(description: str, *, enabled: bool = True) -> Iterator[ProgressCallback]:
    """Yield a callback that renders progress events as one bar on stderr."""
    if not enabled:
        yield lambda event: None
        return
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
    with progress:
        task = progress.add_task(description, total=None)

        def on_event(event: ProgressEvent) -> None:
            text = f"{description}: {event.stage} {event.message}".rstrip()
            if event.total:
                progress.update(
                    task, description=text, completed=event.done or 0, total=event.total
                )
            else:
                progress.update(task, description=text)

        yield on_event


def _us(stats: LatencyStats | None) -> str:
    return "-" if stats is None else f"{stats.median:,.2f} ±{stats.iqr:,.2f}"


def _correctness_table(result: EvalResult, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("shape", "split", "verdict", "max |err|", "rel L2 err", "fallback", "flags"):
        table.add_column(
            column, justify="right" if "err" in column or column == "fallback" else "left"
        )
    for row in result.shapes:
        style = _VERDICT_STYLE.get(row.verdict, "red")
        table.add_row(
            row.shape_id,
            row.split.value,
            f"[{style}]{row.verdict.value}[/{style}]",
            "-" if row.max_abs_err is None else f"{row.max_abs_err:.3g}",
            "-" if row.rel_l2_err is None else f"{row.rel_l2_err:.3g}",
            _share(row.fallback_ratio),
            ", ".join(row.flags),
        )
    return table


def _share(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.0%}"


def engagement_line(result: EvalResult) -> str | None:
    """One line on stage 4: how much was library work, measured how, and by whose kernels."""
    eng = result.engagement
    if eng is None:
        return None
    unit = "device time" if eng.method == "profiler" else "bytes touched (interpreter)"
    top = ", ".join(list(eng.library)[:3]) or "none"
    own = ", ".join(eng.own_kernels) or "none seen"
    return (
        f"engagement: {eng.fallback_ratio:.0%} of the {unit} is library work "
        f"(allowed {1 - eng.engagement_min:.0%}); own kernels: {own}; top library: {top}"
    )


def eval_table(result: EvalResult) -> Table:
    """One row per shape: verdict, time, baselines, T_sol and SOL fraction (errors on a CPU)."""
    title = f"{result.manifest.problem_name}: {result.verdict.value}"
    if not result.performance_measured:
        return _correctness_table(result, title)
    table = Table(title=title, title_justify="left")
    table.add_column("shape", no_wrap=True)
    # The library path (SDPA, cuBLAS, fused norms) is a column only where the problem has one.
    with_library = any("library" in row.baselines_us for row in result.shapes)
    columns = [
        "split",
        "verdict",
        "time us (med ±IQR)",
        "eager us",
        "compile us",
        *(["library us"] if with_library else []),
        "T_sol us",
        "SOL",
        "fallback",
        "flags",
    ]
    for column in columns:
        right = "us" in column or column in ("SOL", "fallback")
        table.add_column(column, justify="right" if right else "left")
    for row in result.shapes:
        style = _VERDICT_STYLE.get(row.verdict, "red")
        library = [_us(row.baselines_us.get("library"))] if with_library else []
        table.add_row(
            row.shape_id,
            row.split.value,
            f"[{style}]{row.verdict.value}[/{style}]",
            _us(row.latency_us),
            _us(row.baselines_us.get("eager")),
            _us(row.baselines_us.get("torch_compile")),
            *library,
            "-" if row.t_sol_us is None else f"{row.t_sol_us:,.2f}",
            "-" if row.sol_fraction is None else f"{row.sol_fraction:.1%}",
            _share(row.fallback_ratio),
            ", ".join(row.flags),
        )
    return table
