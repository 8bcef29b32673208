"""The agent's final holdout scoring takes generated holdout shapes the optimization never saw."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aka.agent.runtime import AgentRuntime
from aka.agent.state import RunOptions
from aka.core.config import load_settings
from aka.spec import Split, load_suite


def _runtime(tmp_path: Path, *, cpu: bool, seed: int) -> AgentRuntime:
    settings = load_settings(
        paths={"cache_dir": str(tmp_path / "cache")}, bench={"holdout_seed": seed}
    )
    options = RunOptions(run_id="t", problem_path="p", out_dir=str(tmp_path / "run"))
    scorer: Any = SimpleNamespace(cpu=cpu)
    return AgentRuntime(
        settings=settings,
        options=options,
        problem=load_suite("atrex30").problem("rms_norm"),
        scorer=scorer,
        proposer_factory=lambda state: None,  # type: ignore[arg-type,return-value]
    )


def test_holdout_shapes_are_generated_from_the_user_seed_and_unseen_in_tune(
    tmp_path: Path,
) -> None:
    rt = _runtime(tmp_path, cpu=False, seed=7)
    problem, ids = rt.holdout_problem()
    assert len(ids) >= 8
    assert not set(ids) & set(rt.tune_ids())
    assert all(s.split is Split.HOLDOUT for s in problem.shapes_in(ids=ids))
    # The runtime's own problem (what the agent optimizes on) does not hold them.
    assert not rt.problem.shapes_in({Split.HOLDOUT})
    again, same = _runtime(tmp_path, cpu=False, seed=7).holdout_problem()
    assert same == ids and again.shapes_in(ids=ids) == problem.shapes_in(ids=ids)
    other, _ = _runtime(tmp_path, cpu=False, seed=8).holdout_problem()
    assert [s.input_kwargs for s in other.shapes_in({Split.HOLDOUT})] != [
        s.input_kwargs for s in problem.shapes_in({Split.HOLDOUT})
    ]


def test_no_holdout_in_the_cpu_interpreter(tmp_path: Path) -> None:
    problem, ids = _runtime(tmp_path, cpu=True, seed=7).holdout_problem()
    assert ids == [] and not problem.shapes_in({Split.HOLDOUT})
