"""LLMProposer through real litellm against a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import SecretStr

from aka.agent.llm import (
    LLMProposer,
    PromptLimits,
    bound_conversation,
    history_lines,
    is_transient,
    render_system_prompt,
    render_user_prompt,
)
from aka.agent.records import (
    CandidateRecord,
    KBSnippet,
    ProfileReport,
    ProposalContext,
    ShapeSummary,
)
from aka.core import ConfigError, LLMConfig, LLMError
from tests.fakes.openai_server import (
    ScriptedError,
    ScriptedOpenAIServer,
    ScriptedReply,
    count_tokens,
)

REPO = Path(__file__).resolve().parents[2]
REFERENCE = (REPO / "configs" / "examples" / "rms_norm" / "reference.py").read_text()

CANDIDATE = """import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self, eps=1e-06):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        y = torch.empty_like(x)
        _kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
"""


def reply(family: str, note: str = "Rows stay in registers.", kb: str = "none") -> str:
    return f"Family: {family}\nKnowledge: {kb}\n{note}\n\n```python\n{CANDIDATE}```\n"


def make_ctx(**update: Any) -> ProposalContext:
    incumbent = CandidateRecord(
        id="c1_0",
        round=1,
        origin="llm:x",
        family="rowwise-single-pass",
        verdict="accepted",
        score=0.412,
        speedup_eager=1.87,
        speedup_compile=1.13,
        shapes=[
            ShapeSummary(
                shape_id="tok4096_h4096",
                verdict="accepted",
                latency_us=17.25,
                sol_fraction=0.412,
                speedup_eager=1.87,
                speedup_compile=1.13,
                bound="memory",
            )
        ],
    )
    wrong = CandidateRecord(
        id="c1_1",
        round=1,
        origin="llm:x",
        family="split-row",
        verdict="wrong_output",
        message="max abs error 0.31 on tok4096_h4096",
        lesson="the partial sums of squares must accumulate in fp32",
    )
    values: dict[str, Any] = {
        "problem_name": "rms_norm",
        "problem_path": "configs/examples/rms_norm/op.yaml",
        "op_family": "norm",
        "description": "RMSNorm over the hidden dimension of bf16 tokens.",
        "reference_source": REFERENCE,
        "forward_signature": "forward(self, x, weight)",
        "init_signature": "__init__(self, eps=1e-06)",
        "arch": "sm_90",
        "hardware": {
            "device": "NVIDIA H200",
            "ceilings": {"hbm_tb_s": 4.27, "bf16_tflops": 709.0},
            "launch_floor_us": 4.6,
        },
        "round": 2,
        "n": 1,
        "incumbent": incumbent,
        "incumbent_source": CANDIDATE,
        "history": [incumbent, wrong],
        "profile": ProfileReport(
            candidate_id="c1_0",
            bound="memory",
            summary="memory-bound: 41% of HBM bandwidth; one row per program leaves SMs idle",
            hints=["raise rows per program"],
        ),
        "kb": [
            KBSnippet(
                id="persistent-rowwise-softmax",
                title="Persistent row-wise kernels",
                kind="technique",
                text="Launch about SMs x occupancy programs that stride over rows.",
            ),
            KBSnippet(
                id="bf16-interpreter-pitfall",
                title="bf16 in the interpreter",
                kind="pitfall",
                text="Upcast bf16 to fp32 right after tl.load.",
            ),
        ],
        "forbidden_families": ["rowwise-single-pass", "split_row_v2"],
    }
    values.update(update)
    return ProposalContext(**values)


def make_config(server: ScriptedOpenAIServer, **update: Any) -> LLMConfig:
    values: dict[str, Any] = {
        "model": "openai/fake-model",
        "api_base": server.url,
        "api_key": SecretStr("sk-test-secret-123"),
        "temperature": 0.3,
        "max_retries": 2,
        "timeout_s": 10.0,
        "max_output_tokens": 2048,
    }
    values.update(update)
    return LLMConfig(**values)


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make_proposer(server: ScriptedOpenAIServer, **config: Any) -> tuple[LLMProposer, Sleeps]:
    sleeps = Sleeps()
    proposer = LLMProposer(make_config(server, **config), backoff_s=0.01, sleep=sleeps, seed=0)
    return proposer, sleeps


# ------------------------------------------------------------------------- prompts over HTTP


def test_llm_proposer_prompt_carries_the_context(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.push(reply("persistent-rows", kb="persistent-rowwise-softmax"))
    proposer, _ = make_proposer(openai_server)

    batch = proposer.propose(make_ctx())

    assert proposer.name == "llm:openai/fake-model"
    [request] = openai_server.requests
    assert request["model"] == "fake-model"
    assert request["temperature"] == 0.3
    assert request["max_tokens"] == 2048
    assert openai_server.request_headers[0]["authorization"] == "Bearer sk-test-secret-123"
    roles = [m["role"] for m in request["messages"]]
    assert roles == ["system", "user"]
    system, user = (m["content"] for m in request["messages"])
    assert "class ModelNew(torch.nn.Module)" in system
    assert "@triton.jit" in system and "Family:" in system
    # the reference code, the signatures and the problem
    assert "inv = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)" in user
    assert "`forward(self, x, weight)`" in user and "`__init__(self, eps=1e-06)`" in user
    assert "RMSNorm over the hidden dimension" in user and "sm_90" in user
    # hardware facts and the incumbent's per-shape results
    assert "NVIDIA H200" in user and "ceilings.hbm_tb_s: 4.27" in user
    assert "| tok4096_h4096 | accepted | 17.25 | 0.412 | 1.87x | 1.13x | memory |" in user
    assert "SOL 0.412, 1.87x vs eager, 1.13x vs torch.compile" in user
    assert "def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr)" in user  # incumbent source
    # profile, history with its lesson, KB ids, forbidden families
    assert "41% of HBM bandwidth" in user and "raise rows per program" in user
    assert "c1_1 [split-row] wrong_output" in user
    assert "must accumulate in fp32" in user
    assert "[persistent-rowwise-softmax]" in user and "[bf16-interpreter-pitfall]" in user
    assert "different technique family than:" in user
    assert "rowwise-single-pass, split_row_v2" in user
    assert "NOT measured" not in user

    [proposal] = batch.proposals
    assert proposal.error is None
    assert proposal.source == CANDIDATE
    assert proposal.family == "persistent-rows"
    assert proposal.origin == "llm:openai/fake-model"
    assert proposal.params["kb_cited"] == ["persistent-rowwise-softmax"]
    assert proposal.reply == openai_server.responses[0]["choices"][0]["message"]["content"]
    assert proposal.prompt is not None
    assert system.strip() in proposal.prompt and user.strip() in proposal.prompt


def test_llm_proposer_prompt_for_cpu_and_cuda(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.push(reply("a"), reply("b"))
    proposer, _ = make_proposer(openai_server)

    proposer.propose(make_ctx(performance_measured=False))
    proposer.propose(make_ctx(dsl="cuda", forbidden_families=[]))

    cpu_user = openai_server.requests[0]["messages"][-1]["content"]
    assert "Performance is NOT measured" in cpu_user and "interpreter" in cpu_user
    cuda_system = openai_server.requests[1]["messages"][0]["content"]
    cuda_user = openai_server.requests[1]["messages"][-1]["content"]
    assert "torch.utils.cpp_extension.load_inline" in cuda_system
    assert "@triton.jit" not in cuda_system
    assert "CUDA C++ kernels for sm_90" in cuda_user
    assert "different technique family" not in cuda_user


def test_llm_proposer_n_candidates_are_n_requests(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.push(
        reply("persistent-rows"),
        "I would use a persistent kernel, but here is no code.",
        ScriptedReply(reply("Two Pass"), prompt_tokens=1000, completion_tokens=250),
    )
    proposer, _ = make_proposer(openai_server)

    batch = proposer.propose(make_ctx(n=3))

    assert len(openai_server.requests) == 3
    assert [p.family for p in batch.proposals] == ["persistent-rows", "llm", "two-pass"]
    assert batch.proposals[1].source is None
    assert "no fenced code block" in (batch.proposals[1].error or "")
    # later candidates of the round are told which families their siblings took
    second_user = openai_server.requests[1]["messages"][-1]["content"]
    third_user = openai_server.requests[2]["messages"][-1]["content"]
    assert "candidate 2 of 3" in second_user and "already use: persistent-rows" in second_user
    assert "already use: persistent-rows." in third_user  # the failed one took no family
    # usage: the sum of what the server reported
    reported = [r["usage"] for r in openai_server.responses]
    assert batch.usage.calls == 3
    assert batch.usage.prompt_tokens == sum(u["prompt_tokens"] for u in reported)
    assert batch.usage.completion_tokens == sum(u["completion_tokens"] for u in reported)
    assert reported[2]["prompt_tokens"] == 1000
    assert batch.usage.cost_usd == 0.0  # fake-model has no price
    # the round's turns: one short user request, one assistant turn with every reply
    assert [m["role"] for m in batch.messages] == ["user", "assistant"]
    assert "Round 2" in batch.messages[0]["content"]
    assert len(batch.messages[0]["content"]) < 400
    for i in (1, 2, 3):
        assert f"Candidate {i} of round 2" in batch.messages[1]["content"]
    assert "here is no code" in batch.messages[1]["content"]


def test_llm_proposer_sends_the_bounded_conversation(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    conversation = [
        {"role": "user", "content": "Round 0 request " + "x" * 500},
        {"role": "assistant", "content": "Round 0 reply " + "y" * 500},
        {"role": "user", "content": "Round 1 request"},
        {"role": "assistant", "content": "Round 1 reply"},
    ]
    openai_server.push(reply("a"), reply("b"))
    proposer, _ = make_proposer(openai_server)
    proposer.propose(make_ctx(conversation=conversation))
    small = LLMProposer(
        make_config(openai_server), limits=PromptLimits(conversation_chars=600), backoff_s=0
    )
    small.propose(make_ctx(conversation=conversation))

    full = openai_server.requests[0]["messages"]
    assert [m["role"] for m in full] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert full[1]["content"] == conversation[0]["content"]
    assert full[4]["content"] == "Round 1 reply"
    bounded = openai_server.requests[1]["messages"]
    # the old pair no longer fits; what remains starts with a user turn
    assert [m["content"] for m in bounded[1:-1]] == ["Round 1 request", "Round 1 reply"]


# ---------------------------------------------------------------------------- failure modes


def test_llm_proposer_retries_transient_errors(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.push(ScriptedError(500), ScriptedError(429, "slow down"), reply("a"))
    proposer, sleeps = make_proposer(openai_server, max_retries=2)

    batch = proposer.propose(make_ctx())

    assert len(openai_server.requests) == 3
    assert batch.proposals[0].source == CANDIDATE
    assert batch.usage.calls == 1
    # exponential backoff with jitter: 0.01 * 2**k * [0.5, 1.5)
    assert len(sleeps) == 2
    assert 0.005 <= sleeps[0] < 0.015
    assert 0.01 <= sleeps[1] < 0.03


def test_llm_proposer_retries_timeouts(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.push(ScriptedReply(reply("slow"), delay_s=3.0), reply("fast"))
    proposer, sleeps = make_proposer(openai_server, timeout_s=0.6)

    batch = proposer.propose(make_ctx())

    assert len(openai_server.requests) == 2
    assert [p.family for p in batch.proposals] == ["fast"]
    assert len(sleeps) == 1


def test_llm_proposer_honours_retry_after(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.push(ScriptedError(429, "later", headers={"Retry-After": "2"}), reply("a"))
    proposer, sleeps = make_proposer(openai_server)

    proposer.propose(make_ctx())

    assert sleeps == [2.0]


def test_llm_proposer_raises_after_max_retries(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.push(*[ScriptedError(503, "overloaded")] * 3)
    proposer, sleeps = make_proposer(openai_server, max_retries=2)

    with pytest.raises(LLMError) as info:
        proposer.propose(make_ctx())

    assert len(openai_server.requests) == 3
    assert len(sleeps) == 2
    message = info.value.message
    assert "openai/fake-model" in message and openai_server.url in message
    assert "3 attempt(s)" in message and "overloaded" in message and "HTTP 503" in message
    assert "llm.max_retries" in message
    assert "sk-test-secret-123" not in message


def test_llm_proposer_retries_a_refused_connection(litellm_module: ModuleType) -> None:
    with ScriptedOpenAIServer() as gone:
        config = make_config(gone, max_retries=1)
    sleeps = Sleeps()
    proposer = LLMProposer(config, backoff_s=0.01, sleep=sleeps)

    with pytest.raises(LLMError) as info:
        proposer.propose(make_ctx())

    assert len(sleeps) == 1
    assert "2 attempt(s)" in info.value.message and str(config.api_base) in info.value.message
    assert "check that the server is up" in info.value.message


@pytest.mark.parametrize(
    ("status", "hint"),
    [(401, "API key"), (404, "llm.api_base ends in /v1"), (400, "litellm model string")],
)
def test_llm_proposer_fails_fast_on_permanent_errors(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer, status: int, hint: str
) -> None:
    openai_server.push(ScriptedError(status, "nope"), reply("never served"))
    proposer, sleeps = make_proposer(openai_server, max_retries=3)

    with pytest.raises(LLMError) as info:
        proposer.propose(make_ctx())

    assert len(openai_server.requests) == 1
    assert sleeps == []
    assert "1 attempt(s)" in info.value.message and hint in info.value.message


def test_llm_proposer_keeps_a_partial_round(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.push(reply("first"), ScriptedError(401, "key revoked"))
    proposer, _ = make_proposer(openai_server)

    batch = proposer.propose(make_ctx(n=3))

    assert [p.family for p in batch.proposals] == ["first"]
    assert len(openai_server.requests) == 2
    assert len(batch.notes) == 1 and "candidate 2 of 3" in batch.notes[0]
    assert "key revoked" in batch.notes[0]
    assert batch.messages[1]["content"].count("Candidate ") == 1


def test_llm_proposer_reports_a_cut_reply(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.push(ScriptedReply("Family: x\nLet me think step by", finish_reason="length"))
    proposer, _ = make_proposer(openai_server)

    [proposal] = proposer.propose(make_ctx()).proposals

    assert proposal.source is None
    assert "2048 tokens" in (proposal.error or "") and "max_output_tokens" in (proposal.error or "")


def test_llm_proposer_flags_a_forbidden_family(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.push(reply("persistent rows"), reply("**Rowwise Single Pass**"))
    proposer, _ = make_proposer(openai_server)

    allowed = proposer.propose(make_ctx())
    forbidden = proposer.propose(make_ctx())

    assert allowed.notes == []
    assert forbidden.proposals[0].family == "rowwise-single-pass"
    assert forbidden.notes == ["candidate 1 names the forbidden family 'rowwise-single-pass'"]


# --------------------------------------------------------------------------- usage and cost


def test_llm_proposer_prices_a_known_model(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.push(
        ScriptedReply(reply("a"), prompt_tokens=12_000, completion_tokens=3_000),
        ScriptedReply(reply("b"), prompt_tokens=8_000, completion_tokens=1_000),
    )
    proposer, _ = make_proposer(openai_server, model="openai/gpt-4o-mini")

    batch = proposer.propose(make_ctx(n=2))

    prompt_cost, completion_cost = litellm_module.cost_per_token(
        model="gpt-4o-mini", prompt_tokens=20_000, completion_tokens=4_000
    )
    assert batch.usage.prompt_tokens == 20_000 and batch.usage.completion_tokens == 4_000
    assert batch.usage.cost_usd > 0
    assert batch.usage.cost_usd == pytest.approx(prompt_cost + completion_cost, rel=1e-9)


def test_llm_proposer_cost_never_raises(openai_server: ScriptedOpenAIServer) -> None:
    def broken_cost(response: Any) -> float:
        raise RuntimeError("no price table")

    def completion(**kwargs: Any) -> dict[str, Any]:
        return {
            "choices": [{"message": {"content": reply("dict")}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 5},
        }

    proposer = LLMProposer(
        LLMConfig(model="anything/model"), completion=completion, cost=broken_cost
    )
    batch = proposer.propose(make_ctx())

    assert batch.usage.cost_usd == 0.0
    assert (batch.usage.prompt_tokens, batch.usage.completion_tokens) == (7, 5)
    assert batch.proposals[0].family == "dict"


# ------------------------------------------------------------------------- quiet and local


def test_llm_proposer_prints_nothing(
    litellm_module: ModuleType,
    openai_server: ScriptedOpenAIServer,
    capfd: pytest.CaptureFixture[str],
) -> None:
    openai_server.push(ScriptedError(500), reply("a"), ScriptedError(401))
    proposer, _ = make_proposer(openai_server)
    capfd.readouterr()

    proposer.propose(make_ctx())
    with pytest.raises(LLMError):
        proposer.propose(make_ctx())

    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_llm_proposer_local_server_needs_no_key(
    litellm_module: ModuleType, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.push(reply("a"))
    proposer = LLMProposer(make_config(openai_server, api_key=None))

    batch = proposer.propose(make_ctx())

    assert batch.proposals[0].source == CANDIDATE
    assert openai_server.request_headers[0]["authorization"] == "Bearer no-key"


def test_llm_proposer_requires_a_model() -> None:
    with pytest.raises(ConfigError, match="llm.model is not set"):
        LLMProposer(LLMConfig())


def test_is_transient_by_status_and_type() -> None:
    class StatusError(Exception):
        def __init__(self, status: int) -> None:
            super().__init__(f"HTTP {status}")
            self.status_code = status

    assert is_transient(StatusError(503)) and is_transient(StatusError(429))
    assert is_transient(ConnectionResetError()) and is_transient(TimeoutError())
    assert not is_transient(StatusError(400)) and not is_transient(StatusError(401))
    assert not is_transient(ValueError("bad"))
    assert is_transient(StatusError(500))


# ---------------------------------------------------------------------------- prompt bounds


def test_user_prompt_stays_bounded() -> None:
    history = [
        CandidateRecord(
            id=f"c{i}_0",
            round=i,
            origin="llm:x",
            family=f"fam{i}",
            verdict="wrong_output" if i == 3 else "accepted",
            message="error " * 200,
            lesson="keep the fp32 accumulator" if i == 3 else None,
        )
        for i in range(1, 41)
    ]
    kb = [
        KBSnippet(id=f"doc-{i}", title=f"Doc {i}", kind="technique", text="word " * 2000)
        for i in range(20)
    ]
    ctx = make_ctx(
        reference_source="# filler\n" * 20_000 + "REFERENCE_TAIL = 1\n",
        incumbent_source="# filler\n" * 20_000,
        history=history,
        kb=kb,
    )
    limits = PromptLimits(history_lines=5)

    prompt = render_user_prompt(ctx, limits=limits)

    assert len(prompt) < 50_000
    assert "REFERENCE_TAIL = 1" in prompt  # the tail of a clipped source survives
    assert "characters omitted" in prompt
    lines, omitted = history_lines(history, limits)
    assert omitted == 35 and len(lines) == 5
    assert lines[0].startswith("c3_0") and "lesson: keep the fp32 accumulator" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["c37_0", "c38_0", "c39_0", "c40_0"]
    assert "35 older records omitted" in prompt
    assert "[doc-0]" in prompt and "[doc-19]" not in prompt


def test_bound_conversation_starts_with_a_user_turn() -> None:
    turns = [
        {"role": "user", "content": "a" * 10},
        {"role": "assistant", "content": "b" * 10},
        {"role": "user", "content": "c" * 10},
        {"role": "assistant", "content": "d" * 10},
    ]
    assert bound_conversation(turns, 100) == turns
    assert bound_conversation(turns, 30) == turns[2:]  # 'b' fits by size but cannot lead
    assert bound_conversation(turns, 5) == []


def test_templates_dir_overrides_the_packaged_prompts(tmp_path: Path) -> None:
    (tmp_path / "system.md.j2").write_text("SYSTEM for {{ dsl }}\n")
    (tmp_path / "propose.md.j2").write_text(
        "{{ problem.name }} round {{ round }}; avoid {{ forbidden_families | join('+') }}\n"
    )
    ctx = make_ctx()
    assert render_system_prompt(ctx, templates_dir=tmp_path) == "SYSTEM for triton\n"
    assert render_user_prompt(ctx, templates_dir=tmp_path) == (
        "rms_norm round 2; avoid rowwise-single-pass+split_row_v2\n"
    )
    (tmp_path / "propose.md.j2").write_text("{{ no_such_value }}\n")
    with pytest.raises(ConfigError, match="propose.md.j2 failed to render"):
        render_user_prompt(ctx, templates_dir=tmp_path)


def test_packaged_prompts_are_package_data() -> None:
    from importlib.resources import files

    prompts = files("aka.agent") / "prompts"
    names = {p.name for p in prompts.iterdir()}
    assert {"system.md.j2", "propose.md.j2", "_contract_triton.md.j2"} <= names
    assert "_contract_cuda.md.j2" in names


# ------------------------------------------------------------------------ the fake itself


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def test_scripted_server_speaks_openai_and_says_when_the_script_ends() -> None:
    with ScriptedOpenAIServer(["two words"], model="served-model") as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/v1")
        body = {"model": "m", "messages": [{"role": "user", "content": "one two three"}]}
        status, answer = _post(server.url, body)
        assert status == 200
        assert answer["object"] == "chat.completion" and answer["model"] == "served-model"
        assert answer["id"].startswith("chatcmpl-") and isinstance(answer["created"], int)
        assert answer["choices"][0]["message"] == {"role": "assistant", "content": "two words"}
        assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        assert count_tokens("two words") == 2

        status, answer = _post(server.url, body)
        assert status == 400 and "script exhausted" in answer["error"]["message"]
        server.push(ScriptedError(500, "boom"))
        assert server.remaining == 1
        status, answer = _post(server.url, body)
        assert status == 500 and answer["error"]["message"] == "boom"
        assert server.requests == [body, body, body]
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.url
