"""The LangChain tools inside a LangGraph ReAct agent, every hop over a real protocol.

No LangChain chat model for OpenAI's HTTP API is installed (no langchain-openai), so
``_OpenAIHTTPChat`` below is a minimal one over the ``openai`` package; it talks to
``ScriptedOpenAIServer``, whose first reply calls a tool and whose second is the final answer.
The tool itself calls the shared real ``aka serve`` (tests/tools/conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from aka.tools import AkaClient, OptimizeInput, langchain_tools, openai_tools
from tests.fakes.openai_server import ScriptedOpenAIServer, ScriptedReply, ScriptedToolCall
from tests.tools.conftest import RMS_NORM_CANDIDATE, ToolServer

pytestmark = pytest.mark.integration


class _OpenAIHTTPChat(BaseChatModel):
    """A chat model that calls an OpenAI-compatible ``/v1/chat/completions`` (tools included)."""

    base_url: str
    model_name: str = "scripted"

    @property
    def _llm_type(self) -> str:
        return "openai-http-test"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:  # fmt: skip
        from openai import OpenAI

        with OpenAI(base_url=self.base_url, api_key="sk-test", max_retries=0) as client:
            reply = (
                client.chat.completions.create(
                    model=self.model_name, messages=convert_to_openai_messages(messages), **kwargs
                )
                .choices[0]
                .message
            )
        calls = [
            {"name": c.function.name, "args": json.loads(c.function.arguments), "id": c.id}
            for c in reply.tool_calls or []
        ]
        message = AIMessage(content=reply.content or "", tool_calls=calls)
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_langchain_tools_share_the_specs(aka_server: ToolServer) -> None:
    with AkaClient(aka_server.url, aka_server.token) as client:
        tools: list[BaseTool] = list(langchain_tools(client))

    assert [t.name for t in tools] == [t["function"]["name"] for t in openai_tools()]
    assert tools[0].args_schema is OptimizeInput
    for tool, schema in zip(tools, openai_tools(), strict=True):
        offered = convert_to_openai_tool(tool)["function"]["parameters"]
        assert set(offered["properties"]) == set(schema["function"]["parameters"]["properties"])


def test_langchain_react_agent_calls_aka_and_answers(aka_server: ToolServer) -> None:
    from langgraph.prebuilt import create_react_agent
    from langgraph.warnings import LangGraphDeprecatedSinceV10

    candidate = RMS_NORM_CANDIDATE.read_text()
    script = [
        ScriptedReply(tool_calls=(ScriptedToolCall("aka_evaluate", {"operator": "rms_norm",
                                                                   "candidate": candidate}),)),
        ScriptedReply(tool_calls=(ScriptedToolCall("aka_kb_search", {"query": "rmsnorm"}),)),
        "The kernel is accepted.",
    ]  # fmt: skip
    with (
        ScriptedOpenAIServer(script) as llm,
        AkaClient(aka_server.url, aka_server.token, poll_interval_s=0.05) as client,
    ):
        # langchain (with its create_agent) is not installed; langgraph's prebuilt one warns
        with pytest.warns(LangGraphDeprecatedSinceV10):
            agent = create_react_agent(_OpenAIHTTPChat(base_url=llm.url), langchain_tools(client))
        state = agent.invoke({"messages": [("user", "Score my rms_norm kernel.")]})

    messages = state["messages"]
    evaluated, searched = [m for m in messages if isinstance(m, ToolMessage)]
    assert evaluated.name == "aka_evaluate" and evaluated.status == "success"
    assert evaluated.artifact["result"]["verdict"] == "accepted"
    assert json.loads(evaluated.content)["status"] == "succeeded"
    # the KB index is not built on the test server: the agent sees the error and carries on
    assert searched.status == "error" and "kb.index_not_built" in searched.content
    assert messages[-1].content == "The kernel is accepted."
    # the model was offered the three tools, and it got the tool results back
    assert [t["function"]["name"] for t in llm.requests[0]["tools"]] == [
        "aka_optimize", "aka_evaluate", "aka_kb_search",
    ]  # fmt: skip
    assert llm.requests[2]["messages"][-1]["role"] == "tool"
