"""``aka hardware show|measure``: the device, its datasheet and its measured ceilings.

Exit codes: 0 done; 4 no CUDA device here (nothing to measure).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from aka.cli.state import settings_from

__all__ = ["app"]

app = typer.Typer(help="Detect the device and measure its ceilings.", no_args_is_help=True)

EXIT_NOT_RUN = 4


def _ceilings_table(
    title: str, rates: dict[str, float], bandwidth: float | None, floor_us: float | None
) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("ceiling")
    table.add_column("value", justify="right")
    if bandwidth is not None:
        table.add_row("memory bandwidth", f"{bandwidth / 1e12:,.2f} TB/s")
    for unit, rate in sorted(rates.items()):
        table.add_row(f"{unit}", f"{rate / 1e12:,.1f} TFLOP/s")
    if floor_us is not None:
        table.add_row("launch floor", f"{floor_us:,.2f} us")
    return table


@app.command("show")
def show(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Show the detected device, its datasheet ceilings and cached measurements."""
    from aka.core.console import out_console
    from aka.hardware import (
        datasheet_ceilings,
        detect_device,
        library_versions,
        load_cached_ceilings,
    )

    settings = settings_from(ctx)
    info = detect_device()
    if info is None:
        versions = library_versions()
        if as_json:
            out_console.print_json(data={"device": None, "versions": versions})
        else:
            out_console.print(
                f"no CUDA device visible (torch {versions.get('torch')}); the scorer runs "
                "in the Triton interpreter on the CPU and measures no performance."
            )
        raise typer.Exit(0)
    sheet = datasheet_ceilings(info)
    cached = load_cached_ceilings(settings.paths.cache_dir, info)
    if as_json:
        out_console.print_json(
            data={
                "device": info.model_dump(mode="json"),
                "datasheet": sheet.model_dump(mode="json") if sheet else None,
                "measured": cached.model_dump(mode="json") if cached else None,
            }
        )
        return
    l2 = "?" if info.l2_bytes is None else f"{info.l2_bytes / 2**20:.0f}"
    memory = "?" if info.memory_bytes is None else f"{info.memory_bytes / 2**30:.0f}"
    out_console.print(
        f"{info.name} ({info.arch}, {info.sm_count} SMs, L2 {l2} MiB, {memory} GiB, "
        f"driver {info.driver_version})",
        highlight=False,
    )
    for title, ceil in (("datasheet", sheet), ("measured (cached)", cached)):
        if ceil is None:
            out_console.print(
                f"{title}: none" + (" - run `aka hardware measure`" if "measured" in title else "")
            )
            continue
        rates = {str(k): v for k, v in ceil.rates_flops_per_s.items()}
        out_console.print(
            _ceilings_table(title, rates, ceil.bandwidth_bytes_per_s, ceil.launch_floor_us)
        )


@app.command("measure")
def measure(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Measure the GPU's ceilings (bandwidth, matmul, vector fp32, launch floor); cache them."""
    from aka.cli.render import progress_bar
    from aka.core.console import err_console, out_console
    from aka.hardware import detect_device, load_or_measure_ceilings

    settings = settings_from(ctx)
    info = detect_device()
    if info is None:
        err_console.print(
            "no CUDA device visible: nothing to measure "
            "(the CPU interpreter measures no performance)"
        )
        raise typer.Exit(EXIT_NOT_RUN)
    with progress_bar(
        f"measuring {info.name}", enabled=not as_json and err_console.is_terminal
    ) as on_event:
        ceil = load_or_measure_ceilings(
            settings.paths.cache_dir, info, remeasure=True, progress=on_event
        )
    if as_json:
        out_console.print_json(ceil.model_dump_json())
        return
    rates = {str(k): v for k, v in ceil.rates_flops_per_s.items()}
    out_console.print(
        _ceilings_table(
            f"measured: {info.name}", rates, ceil.bandwidth_bytes_per_s, ceil.launch_floor_us
        )
    )
