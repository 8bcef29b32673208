"""The OpenAI tool schemas, and a tool call from a real OpenAI client run against a real server.

The model is ``ScriptedOpenAIServer`` (OpenAI's HTTP protocol on 127.0.0.1, scripted replies);
the ``openai`` package sends it ``tools=openai_tools()``, the scripted reply calls a tool, and
``tool_message`` runs that call against the shared ``aka serve`` (tests/tools/conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

from aka.core import ServiceError
from aka.tools import AkaClient, dispatch, openai_tools, tool_message
from tests.fakes.openai_server import ScriptedOpenAIServer, ScriptedReply, ScriptedToolCall
from tests.tools.conftest import REPO, RMS_NORM_CANDIDATE, ToolServer

NAMES = ["aka_optimize", "aka_evaluate", "aka_kb_search"]


def test_openai_tools_are_valid_function_schemas() -> None:
    tools = openai_tools()

    assert [t["function"]["name"] for t in tools] == NAMES
    for tool in tools:
        assert tool["type"] == "function" and tool["function"]["description"]
        parameters = tool["function"]["parameters"]
        jsonschema.Draft202012Validator.check_schema(parameters)
        assert parameters["type"] == "object" and parameters["additionalProperties"] is False
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert by_name["aka_optimize"].get("required", []) == []  # operator or problem: the server
    assert set(by_name["aka_optimize"]["properties"]) == {
        "operator", "problem", "problem_format", "shapes", "max_iters", "model", "dsl",
    }  # fmt: skip
    assert by_name["aka_evaluate"]["required"] == ["candidate"]
    assert by_name["aka_kb_search"]["required"] == ["query"]
    assert by_name["aka_kb_search"]["properties"]["k"]["maximum"] == 50


def test_openai_schema_arguments_validate_as_the_schema_says() -> None:
    schema = openai_tools()[1]["function"]["parameters"]
    validator = jsonschema.Draft202012Validator(schema)

    assert validator.is_valid({"candidate": "x", "operator": "rms_norm"})
    assert not validator.is_valid({"operator": "rms_norm"})  # no candidate
    assert not validator.is_valid({"candidate": "x", "colour": "red"})  # made-up argument


def test_openai_schema_cli_prints_the_same_json() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "aka", "tools", "openai-schema"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip

    assert json.loads(done.stdout) == openai_tools()


@pytest.mark.integration
def test_openai_tool_call_runs_against_the_service(aka_server: ToolServer) -> None:
    from openai import OpenAI

    candidate = RMS_NORM_CANDIDATE.read_text()
    call = ScriptedToolCall("aka_evaluate", {"operator": "rms_norm", "candidate": candidate})
    with (
        ScriptedOpenAIServer([ScriptedReply(tool_calls=(call,))]) as llm,
        OpenAI(base_url=llm.url, api_key="sk-test", max_retries=0) as openai_client,
        AkaClient(aka_server.url, aka_server.token, poll_interval_s=0.05) as aka,
    ):
        completion = openai_client.chat.completions.create(
            model="scripted",
            messages=[{"role": "user", "content": "Score my rms_norm kernel."}],
            tools=openai_tools(),
        )
        [tool_call] = completion.choices[0].message.tool_calls or []
        answer = tool_message(aka, tool_call)
        direct = dispatch(aka, tool_call.function.name, tool_call.function.arguments)

    assert llm.requests[0]["tools"] == openai_tools()  # what the model was offered
    assert completion.choices[0].finish_reason == "tool_calls"
    assert answer["role"] == "tool" and answer["tool_call_id"] == tool_call.id
    result = json.loads(answer["content"])
    assert result["status"] == "succeeded" and result["result"]["verdict"] == "accepted"
    assert direct["result"]["verdict"] == "accepted"


@pytest.mark.integration
def test_openai_refused_calls_become_error_content(aka_server: ToolServer) -> None:
    with AkaClient(aka_server.url, aka_server.token) as aka:
        refused = tool_message(aka, _call("aka_evaluate", {"operator": "no_such_op",
                                                           "candidate": "x"}))  # fmt: skip
        bad_args = tool_message(aka, _call("aka_kb_search", {"query": "x", "k": 0}))
        unknown = tool_message(aka, _call("aka_delete_everything", {}))
        with pytest.raises(ServiceError) as err:
            dispatch(aka, "aka_kb_search", "{not json")

    error = json.loads(refused["content"])["error"]
    assert error["code"] == "spec.invalid" and error["status"] == 422
    error = json.loads(bad_args["content"])["error"]
    assert error["code"] == "tools.invalid_arguments" and "k" in error["message"]
    assert json.loads(unknown["content"])["error"]["code"] == "tools.unknown_tool"
    assert err.value.code == "tools.invalid_arguments"


def _call(name: str, arguments: dict[str, object]) -> dict[str, object]:
    return {"id": "call_1", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip
