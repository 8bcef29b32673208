"""The whole loop with an LLM proposer: litellm → a scripted OpenAI-compatible server on 127.0.0.1.

The scorer is the real one in CPU-interpreter mode (screen, sandboxed workers, correctness); only
the timing, which the CPU cannot measure, is declared by each candidate (``TimedCPUScorer``). The
replies walk the loop through every branch: a syntax error, a wrong kernel, a PyTorch fallback, a
correct slow kernel, a faster one, two stalled rounds, a dropout and a promotion after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import SecretStr

from aka.agent.runner import plan_run, resume_run, run_optimize
from aka.core import Settings, load_settings
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.fakes.scorer import TimedCPUScorer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "configs" / "examples" / "rms_norm"
PROBLEM = EXAMPLE / "op.yaml"
ROWWISE = (EXAMPLE / "candidate.py").read_text()
MULTIROW = (EXAMPLE / "candidate_multirow.py").read_text()

FALLBACK = """
import torch


class ModelNew(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * weight).to(x.dtype)
"""


# a candidate with a syntax error (the missing colon): the scorer's verdict is compile_error
SYNTAX = (
    "import torch\n\n\nclass ModelNew(torch.nn.Module):\n"
    "    def forward(self, x, weight)\n        return x\n"
)


def reply(family: str, source: str, why: str = "") -> str:
    return f"Family: {family}\n{why}\n\n```python\n{source}\n```\n"


def timed(source: str, latency: float) -> str:
    return f"{source}\n# fake-latency-us: {latency}\n"


def settings_for(tmp_path: Path, **agent: object) -> Settings:
    settings = load_settings()
    paths = settings.paths.model_copy(
        update={"runs_dir": tmp_path / "runs", "cache_dir": tmp_path / "cache"}
    )
    llm = settings.llm.model_copy(update={"api_key": SecretStr("test-key"), "max_retries": 1})
    base = {"candidates_per_round": 1, "target_sol": None, "patience": 2, **agent}
    return settings.model_copy(
        update={"paths": paths, "llm": llm, "agent": settings.agent.model_validate(base)}
    )


@pytest.fixture(scope="module")
def cpu_scorer(tmp_path_factory: pytest.TempPathFactory) -> TimedCPUScorer:
    from aka.bench import Scorer

    settings = load_settings()
    return TimedCPUScorer(Scorer(settings.bench, tmp_path_factory.mktemp("c"), device="cpu"))


def test_full_loop_routes_promotes_drops_out_and_stops(
    tmp_path: Path, cpu_scorer: TimedCPUScorer
) -> None:
    wrong = ROWWISE.replace("y = x * inv_rms * w", "y = x * inv_rms")
    assert wrong != ROWWISE
    script = [
        reply("rowwise", SYNTAX),  # 1 compile error
        reply("rowwise", wrong),  # 2 wrong output
        reply("torch", FALLBACK),  # 3 PyTorch fallback: screen rejects
        reply("rowwise", timed(ROWWISE, 80)),  # 4 first correct: promoted
        reply("multirow", timed(MULTIROW, 40)),  # 5 2x faster: promoted
        reply("rowwise-b", timed(ROWWISE + "\n# b", 41)),  # 6 slower: stall 1
        reply("multirow", timed(MULTIROW + "\n# b", 45)),  # 7 slower: stall 2 -> dropout
        reply("split-row", timed(MULTIROW + "\n# c", 30)),  # 8 after dropout: promoted
    ]
    settings = settings_for(tmp_path, max_iters=8)
    with ScriptedOpenAIServer(script) as server:
        options = plan_run(
            settings, PROBLEM, out=tmp_path / "run", model="openai/fake-coder",
            api_base=server.url, use_kb=False,
        )  # fmt: skip
        outcome = run_optimize(settings, options, scorer=cpu_scorer)
        requests = server.requests
    rec = outcome.record
    verdicts = [c.verdict for c in rec.candidates]
    assert verdicts[:4] == ["compile_error", "wrong_output", "screen_rejected", "accepted"]
    assert verdicts[4:] == ["accepted"] * 4
    assert [d.promoted for d in rec.decisions] == [False] * 3 + [True, True, False, False, True]
    assert rec.incumbent_id == "c8_0" and rec.stop_reason == "max_iters"
    # two stalls in a row: after rounds 1-2 (nothing correct yet) and after rounds 6-7
    assert [d.round for d in rec.dropouts] == [2, 7]
    assert rec.dropouts[0].forbidden_families == ["rowwise"]
    assert rec.dropouts[1].forbidden_families == ["multirow", "rowwise-b"]
    assert rec.proposer == "llm:openai/fake-coder"
    # the wrong kernel's lesson survives the dropout
    assert rec.candidates[1].lesson and not rec.candidates[1].masked
    # conversation: round 2 carried round 1's turns; the round after the dropout started clean
    assert len(requests) == 8
    assert len(requests[1]["messages"]) > len(requests[0]["messages"])
    assert [m["role"] for m in requests[2]["messages"]] == ["system", "user"]
    after = requests[7]["messages"]
    assert [m["role"] for m in after] == ["system", "user"]
    assert "multirow" in after[-1]["content"] and "rowwise-b" in after[-1]["content"]
    # every prompt carried the reference and the contract
    assert all("class Model" in r["messages"][-1]["content"] for r in requests)
    # artifacts: prompts, replies, candidates; the final kernel is the promoted source
    art = outcome.run_dir / "artifacts"
    assert (art / "prompts" / "c1_0.md").is_file() and (art / "replies" / "c8_0.md").is_file()
    assert "# fake-latency-us: 30" in (outcome.run_dir / "kernel.py").read_text()
    run_json = json.loads((outcome.run_dir / "run.json").read_text())
    assert run_json["usage"]["tokens"]["calls"] == 8
    assert run_json["usage"]["tokens"]["prompt_tokens"] > 0


def test_token_budget_stops_the_loop(tmp_path: Path, cpu_scorer: TimedCPUScorer) -> None:
    script = [reply("x", SYNTAX)] * 5
    settings = settings_for(tmp_path, max_iters=5, max_tokens=10)
    with ScriptedOpenAIServer(script) as server:
        options = plan_run(settings, PROBLEM, out=tmp_path / "run", model="openai/fake-coder",
                           api_base=server.url, use_kb=False)  # fmt: skip
        outcome = run_optimize(settings, options, scorer=cpu_scorer)
        assert len(server.requests) == 1
    assert outcome.record.stop_reason == "tokens"
    assert not outcome.produced_kernel


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"aka optimize exited early ({proc.returncode})")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear in {timeout} s")
        time.sleep(0.05)


def test_resume_after_the_process_was_killed(tmp_path: Path) -> None:
    """SIGKILL mid-evaluation, then ``aka optimize --resume RUN_ID`` finishes the same run."""
    wrong = ROWWISE.replace("y = x * inv_rms * w", "y = x * inv_rms")
    script = [
        reply("rowwise", SYNTAX),
        reply("rowwise", wrong),
        reply("rowwise", ROWWISE),
    ]
    env = {
        **os.environ,
        "AKA_PATHS__RUNS_DIR": str(tmp_path / "runs"),
        "AKA_PATHS__CACHE_DIR": str(tmp_path / "cache"),
        "AKA_LLM__API_KEY": "test-key",
        "AKA_AGENT__CANDIDATES_PER_ROUND": "1",
        "AKA_AGENT__MAX_ITERS": "4",
    }
    out = tmp_path / "run"
    with ScriptedOpenAIServer(script) as server:
        cmd = [sys.executable, "-m", "aka", "optimize", str(PROBLEM), "--model",
               "openai/fake-coder", "--api-base", server.url, "--device", "cpu", "--no-kb",
               "--out", str(out), "--json"]  # fmt: skip
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        try:
            # round 2's candidate is being scored: propose 2 is checkpointed, evaluate 2 is not
            _wait_for(out / "artifacts" / "candidates" / "c2_0.py", proc, timeout=120)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        assert not (out / "run.json").exists()
        assert len(server.requests) == 2
        run_id = json.loads((out / "options.json").read_text())["run_id"]
        done = subprocess.run(
            [sys.executable, "-m", "aka", "optimize", "--resume", run_id, "--json"],
            env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        # the replies already received were not asked for again
        assert len(server.requests) == 3
    record = json.loads((out / "run.json").read_text())
    assert [c["verdict"] for c in record["candidates"]] == [
        "compile_error",
        "wrong_output",
        "accepted",
    ]
    assert record["stop_reason"] == "correct_kernel_cpu"
    assert record["incumbent_id"] == "c3_0"
    assert (out / "kernel.py").is_file() and (out / "report.html").is_file()


def test_resume_of_an_unknown_run_is_a_clear_error(tmp_path: Path) -> None:
    from aka.core import NotFoundError

    with pytest.raises(NotFoundError, match="no run 'nope'"):
        resume_run(settings_for(tmp_path), "nope")
