"""``aka kb``: build, query, inspect and lint the knowledge base.

Exit codes: 0 done; 1 ``lint`` found problems; 2 bad usage or invalid knowledge files (``build``
lists every problem); 3 the index is missing (``query``/``stats`` before ``build``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from aka.cli.state import settings_from

__all__ = ["app"]

app = typer.Typer(help="Build and query the knowledge base.", no_args_is_help=True)


@app.command("build")
def build(
    ctx: typer.Context,
    no_api: Annotated[bool, typer.Option("--no-api", help="Skip the API harvest.")] = False,
) -> None:
    """Index docs, reference kernels and the installed packages' APIs (only what changed)."""
    from aka.cli.render import progress_bar
    from aka.core.console import err_console, out_console
    from aka.kb import build_index, index_path

    settings = settings_from(ctx)
    started = time.monotonic()
    with progress_bar("kb build", enabled=err_console.is_terminal) as on_event:
        stats = build_index(settings, include_api=not no_api, progress=on_event)
    out_console.print(
        f"index {index_path(settings)}: {len(stats.updated_sources)} source(s) embedded "
        f"({stats.embedded_chunks} chunks), {stats.unchanged_sources} unchanged, "
        f"{len(stats.removed_sources)} removed in {time.monotonic() - started:.1f} s",
        highlight=False,
    )


@app.command("query")
def query(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="What to look for.")],
    k: Annotated[int, typer.Option("-k", min=1, max=100, help="How many documents.")] = 5,
    arch: Annotated[str | None, typer.Option("--arch", help="e.g. sm_90")] = None,
    dsl: Annotated[str | None, typer.Option("--dsl", help="e.g. triton")] = None,
    kind: Annotated[
        str | None, typer.Option("--kind", help="technique, pitfall, kernel, api...")
    ] = None,
    op_family: Annotated[str | None, typer.Option("--op-family", help="e.g. norm")] = None,
    layer: Annotated[
        list[str] | None, typer.Option("--layer", help="Restrict to layers (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list on stdout.")] = False,
) -> None:
    """Hybrid (dense + BM25) search of the knowledge base."""
    import json

    from rich.table import Table

    from aka.core import SpecError
    from aka.core.console import out_console
    from aka.kb import KBFilter, Layer, open_retriever

    try:
        layers = [Layer(v) for v in layer] if layer else None
    except ValueError as err:
        raise SpecError(
            f"--layer must be one of {[x.value for x in Layer]}", field="--layer"
        ) from err
    retriever = open_retriever(settings_from(ctx))
    hits = retriever.search(
        text,
        k=k,
        layers=layers,
        filters=KBFilter(arch=arch, dsl=dsl, op_family=op_family, kind=kind),
    )
    if as_json:
        out_console.print_json(json.dumps([h.model_dump(mode="json") for h in hits]))
        return
    table = Table(title=f"kb: {text}", title_justify="left")
    for column in ("#", "id", "kind", "layer", "score", "title"):
        table.add_column(column, no_wrap=column != "title")
    for i, hit in enumerate(hits, 1):
        table.add_row(str(i), hit.id, hit.kind, hit.layer.value, f"{hit.score:.4f}", hit.title)
    out_console.print(table)


@app.command("stats")
def stats(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Counts of documents and chunks per layer and kind in the built index (and on disk)."""
    from aka.core.console import err_console, out_console
    from aka.kb import latest_acceptance, load_docs, load_kernels, open_index

    settings = settings_from(ctx)
    data = open_index(settings).stats()
    per_kind = data["documents_per_kind"]
    root = settings.paths.root
    docs, _ = load_docs(root / "knowledge_base")
    kernels, _ = load_kernels(root / "reference_kernels")
    indexed = {
        "reference_kernels": per_kind.get("kernel", 0),
        "documents": sum(
            v for kind, v in per_kind.items() if kind not in ("kernel", "api", "upstream")
        ),
    }
    on_disk = {
        "reference_kernels": len(kernels),
        "documents": sum(1 for d in docs if d.meta.kind.value != "api"),
    }
    summary = {
        **indexed,
        "api_symbols": per_kind.get("api", 0),
        "upstream_files": per_kind.get("upstream", 0),
        # kernels the scorer accepted on a problem (issue #7), per the newest committed
        # benchmarks/results/kb_acceptance_<date>_<device>.json of each device
        "kernels_accepted": {
            c.device: c.model_dump(exclude={"device"})
            for c in latest_acceptance(settings.paths.root)
        },
        # the files the next `aka kb build` indexes: a difference means the index is stale
        "on_disk": on_disk,
        "index_stale": on_disk != indexed,
        **data,
    }
    if summary["index_stale"]:
        err_console.print(
            f"the index differs from the files ({indexed['reference_kernels']} kernels and "
            f"{indexed['documents']} documents indexed, {on_disk['reference_kernels']} and "
            f"{on_disk['documents']} on disk): run `aka kb build`",
            highlight=False,
        )
    if as_json:
        out_console.print_json(data=summary)
        return
    for key, value in summary.items():
        out_console.print(f"{key}: {value}", highlight=False)


@app.command("lint")
def lint(ctx: typer.Context) -> None:
    """Validate every knowledge document and reference kernel; list all problems."""
    from aka.core.console import out_console
    from aka.kb import lint_problems, load_docs, load_kernels

    root = settings_from(ctx).paths.root
    problems = lint_problems(root / "knowledge_base", root / "reference_kernels")
    docs, _ = load_docs(root / "knowledge_base")
    kernels, _ = load_kernels(root / "reference_kernels")
    for problem in problems:
        out_console.print(problem, markup=False, highlight=False)
    out_console.print(f"{len(docs)} documents, {len(kernels)} kernels, {len(problems)} problem(s)")
    if problems:
        raise typer.Exit(1)


@app.command("ingest-upstream")
def ingest_upstream_cmd(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A local checkout of the upstream project.")],
    name: Annotated[
        str, typer.Option("--name", help="Its name (see upstream_refs/manifest.yaml).")
    ],
) -> None:
    """Index a local checkout (source by symbol, docs by section) into the upstream layer."""
    from aka.core.console import out_console
    from aka.kb import ingest_upstream

    stats = ingest_upstream(settings_from(ctx), path, name)
    out_console.print(
        f"upstream '{name}': {stats.embedded_chunks} chunks embedded"
        + (" (unchanged)" if not stats.updated_sources else ""),
        highlight=False,
    )
