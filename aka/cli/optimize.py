"""``aka optimize``: run the agent on a problem and write a run directory.

Exit codes: 0 a correct kernel was produced; 1 the run ended without one; 2 bad usage or an invalid
problem; 3 a harness failure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from aka.cli.state import settings_from
from aka.core import ProgressCallback, ProgressEvent, SpecError

__all__ = ["optimize", "parse_budget", "parse_workers"]

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")
_COUNT = re.compile(r"^(\d+(?:\.\d+)?)([kKmM])?$")
_BUDGET_KEYS = {
    "wall": "wall_time_s",
    "tokens": "max_tokens",
    "cost": "max_cost_usd",
    "gpu": "max_gpu_s",
    "iters": "max_iters",
}


def _seconds(text: str, key: str) -> float:
    m = _DURATION.match(text)
    if not m:
        raise SpecError(
            f"budget {key}={text!r} is not a duration; write e.g. {key}=90s, {key}=30m or {key}=2h",
            field="--budget",
        )
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def parse_workers(text: str) -> int | Literal["auto"]:
    """Parse ``--workers``: ``auto`` or a count of at least 1.

    Raises:
        SpecError: Anything else (the message shows the accepted forms).
    """
    value = text.strip().lower()
    if value == "auto":
        return "auto"
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise SpecError(
        f"--workers {text!r}: give a count of at least 1 or 'auto' (one per visible GPU)",
        field="--workers",
    )


def parse_budget(items: list[str]) -> dict[str, Any]:
    """Parse ``--budget`` items such as ``wall=30m,tokens=200k,cost=5,gpu=10m,iters=12``.

    Raises:
        SpecError: An unknown key or a malformed value (the message shows the accepted forms).
    """
    out: dict[str, Any] = {}
    for item in ",".join(items).split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or key not in _BUDGET_KEYS:
            raise SpecError(
                f"budget item {item!r}: use KEY=VALUE with KEY one of "
                f"{', '.join(_BUDGET_KEYS)} (e.g. --budget wall=30m,tokens=200k,cost=5)",
                field="--budget",
            )
        if key in ("wall", "gpu"):
            out[_BUDGET_KEYS[key]] = _seconds(value, key)
        elif key == "cost":
            try:
                out["max_cost_usd"] = float(value.lstrip("$"))
            except ValueError as err:
                raise SpecError(
                    f"budget cost={value!r} is not a dollar amount (e.g. cost=5)", field="--budget"
                ) from err
        else:
            m = _COUNT.match(value)
            if not m:
                raise SpecError(
                    f"budget {key}={value!r} is not a count (e.g. {key}=200k)", field="--budget"
                )
            mult = {"k": 1e3, "m": 1e6, None: 1}[m.group(2).lower() if m.group(2) else None]
            out[_BUDGET_KEYS[key]] = int(float(m.group(1)) * mult)
    return out


@dataclass
class _View:
    """What the live view shows, updated from agent progress events."""

    problem: str
    max_iters: int
    round: int = 0
    best_sol: float | None = None
    speedup: float | None = None
    incumbent: str | None = None
    stall: int = 0
    dropouts: int = 0
    candidates: int = 0
    correct: int = 0
    last: str = "starting"
    bench: str = ""
    log: list[str] = field(default_factory=list)

    def on_event(self, event: ProgressEvent) -> None:
        if event.source == "bench":
            whose = f"{event.data['candidate']}: " if "candidate" in event.data else ""
            self.bench = f"{whose}{event.stage}: {event.message}"
            return
        if event.source != "agent":
            self.bench = event.message
            return
        self.round = event.done or self.round
        self.last = f"{event.stage}: {event.message}"
        data = event.data
        if event.stage == "evaluate" and "verdict" in data:
            self.candidates += 1
            self.correct += data["verdict"] == "accepted"
            self.log.append(f"r{self.round} {data.get('candidate')}: {data['verdict']}")
        if event.stage == "decide":
            self.best_sol = data.get("best_sol", self.best_sol)
            self.speedup = data.get("speedup_eager", self.speedup)
            self.incumbent = data.get("incumbent", self.incumbent)
            self.stall = data.get("stall", self.stall)
            if data.get("promoted"):
                self.log.append(f"r{self.round} promoted {self.incumbent}")
        if event.stage == "dropout":
            self.dropouts += 1
            self.log.append(f"r{self.round} dropout: {event.message}")
        self.log = self.log[-6:]

    def render(self) -> Any:
        from rich.table import Table

        table = Table(title=f"aka optimize {self.problem}", show_header=False, expand=False)
        table.add_column(style="bold")
        table.add_column()
        sol = f"{self.best_sol:.3f}" if self.best_sol is not None else "—"
        spd = f"{self.speedup:.2f}×" if self.speedup is not None else "—"
        table.add_row("round", f"{self.round} / {self.max_iters}")
        table.add_row("incumbent", self.incumbent or "none yet")
        table.add_row("best SOL", sol)
        table.add_row("speedup vs eager", spd)
        table.add_row("candidates", f"{self.candidates} ({self.correct} correct)")
        table.add_row("stalled rounds", str(self.stall))
        table.add_row("dropouts", str(self.dropouts))
        table.add_row("now", self.last[:100])
        if self.bench:
            table.add_row("scorer", self.bench[:100])
        for line in self.log:
            table.add_row("", line[:100])
        return table


@contextmanager
def _live(view: _View, enabled: bool) -> Iterator[ProgressCallback]:
    if not enabled:
        yield lambda _e: None
        return
    from rich.live import Live

    from aka.core.console import err_console

    with Live(view.render(), console=err_console, refresh_per_second=4, transient=False) as live:

        def on_event(event: ProgressEvent) -> None:
            view.on_event(event)
            live.update(view.render())

        yield on_event


def optimize(
    ctx: typer.Context,
    problem: Annotated[
        Path | None,
        typer.Argument(help="op.yaml, KernelBench .py or Atrex-Bench dir (omit with --resume)."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="litellm model string; none = offline search.")
    ] = None,
    api_base: Annotated[
        str | None, typer.Option("--api-base", help="OpenAI-compatible server URL (vLLM, Ollama).")
    ] = None,
    max_iters: Annotated[int | None, typer.Option("--max-iters", min=1, help="Rounds.")] = None,
    budget: Annotated[
        list[str] | None,
        typer.Option(
            "--budget", help="Limits: wall=30m,tokens=200k,cost=5,gpu=10m,iters=12 (repeatable)."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="The run directory (default: under runs_dir).")
    ] = None,
    dsl: Annotated[str, typer.Option("--dsl", help="triton or cuda (cuda needs --model).")] = (
        "triton"
    ),
    from_kernel: Annotated[
        Path | None, typer.Option("--from", help="Start from this kernel (candidate file).")
    ] = None,
    resume: Annotated[
        str | None, typer.Option("--resume", help="Continue a killed run (id or directory).")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")] = "auto",
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of search and dropout.")] = None,
    candidates: Annotated[
        int | None, typer.Option("--candidates", min=1, help="Candidates per round.")
    ] = None,
    workers: Annotated[
        str | None,
        typer.Option(
            "--workers",
            help="Candidates scored at once, one per GPU: N or auto (every visible GPU; 1 on the "
            "CPU, where N runs N interpreter evaluations).",
        ),
    ] = None,
    target_sol: Annotated[
        float | None, typer.Option("--target-sol", help="Stop at this SOL fraction (0-1].")
    ] = None,
    no_dropout: Annotated[
        bool, typer.Option("--no-dropout", help="Switch optimization dropout off.")
    ] = False,
    no_kb: Annotated[bool, typer.Option("--no-kb", help="Do not use the knowledge base.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print run.json on stdout.")] = False,
) -> None:
    """Optimize PROBLEM: propose, score, profile and revise kernels; write the best one."""
    from aka.agent.runner import plan_run, resume_run, run_optimize
    from aka.core.console import err_console, out_console

    settings = settings_from(ctx)
    updates: dict[str, Any] = parse_budget(budget or [])
    for key, value in (
        ("max_iters", max_iters),
        ("seed", seed),
        ("candidates_per_round", candidates),
        ("target_sol", target_sol),
    ):
        if value is not None:
            updates[key] = value
    if workers is not None:
        updates["workers"] = parse_workers(workers)
    if no_dropout:
        updates["dropout"] = False
    agent = settings.agent.model_validate({**settings.agent.model_dump(), **updates})
    settings = settings.model_copy(update={"agent": agent})
    live = not as_json and err_console.is_terminal
    if resume:
        view = _View(problem=resume, max_iters=agent.max_iters)
        with _live(view, live) as on_event:
            outcome = resume_run(settings, resume, progress=on_event)
    else:
        if problem is None:
            raise SpecError(
                "give a PROBLEM (op.yaml, KernelBench .py, Atrex-Bench dir) or --resume"
            )
        options = plan_run(
            settings,
            problem,
            out=out,
            model=model,
            api_base=api_base,
            dsl=dsl,
            from_kernel=from_kernel,
            device=device,
            use_kb=not no_kb,
        )
        err_console.print(f"run {options.run_id} → {options.out_dir}", highlight=False)
        view = _View(problem=problem.name, max_iters=agent.max_iters)
        with _live(view, live) as on_event:
            outcome = run_optimize(settings, options, progress=on_event)
    record = outcome.record
    if as_json:
        out_console.print_json(record.model_dump_json())
    else:
        _summary(outcome)
    raise typer.Exit(0 if outcome.produced_kernel else 1)


def _summary(outcome: Any) -> None:
    from aka.core.console import out_console

    record = outcome.record
    lines = [
        f"run {record.run_id}: {record.problem_name} — stopped: {record.stop_reason}",
        f"rounds {record.usage.iters}, candidates {record.usage.candidates}, "
        f"wall {record.usage.wall_s:.0f} s, tokens {record.usage.tokens.total_tokens}, "
        f"cost ${record.usage.tokens.cost_usd:.4f}, GPU {record.usage.gpu_s:.0f} s",
    ]
    if record.workers > 1:
        on = f"GPUs {', '.join(record.worker_gpus)}" if record.worker_gpus else "the CPU"
        lines.append(f"{record.workers} candidates scored at once on {on}")
    if record.incumbent_id is None:
        lines.append("no correct kernel was produced")
    else:
        best = next(c for c in record.candidates if c.id == record.incumbent_id)
        perf = (
            f"SOL {best.score:.3f}, {best.speedup_eager or 0:.2f}× vs eager"
            + (f", {best.speedup_compile:.2f}× vs torch.compile" if best.speedup_compile else "")
            if best.score is not None
            else "performance not measured (CPU interpreter)"
        )
        lines.append(f"best kernel {best.id} ({best.family}): {perf}")
    lines.append(f"kernel: {outcome.run_dir / 'kernel.py'}")
    lines.append(f"report: {outcome.run_dir / 'report.html'}")
    for line in lines:
        out_console.print(line, highlight=False, markup=False)
