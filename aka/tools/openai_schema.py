"""aka's tools for any OpenAI-compatible function calling: schemas out, tool calls in.

``openai_tools()`` gives the ``tools=`` list of a chat-completions request; ``tool_message`` runs
one tool call the model made and gives the ``role: tool`` message to send back. Owns the OpenAI
wire shapes only; the tools themselves are ``aka.tools.specs`` (this module must not define or
change one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from aka.core import AkaError
from aka.tools.client import AkaClient, JsonObject
from aka.tools.specs import TOOLS, dispatch, error_result

__all__ = ["ToolCall", "dispatch", "openai_tools", "tool_message"]


class _CalledFunction(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> str: ...


class ToolCall(Protocol):
    """One item of an assistant message's ``tool_calls``, as the ``openai`` package gives it."""

    @property
    def id(self) -> str:
        """The call's id, echoed in the answer."""
        ...

    @property
    def function(self) -> _CalledFunction:
        """The tool's name and its arguments as JSON text."""
        ...


def openai_tools() -> list[JsonObject]:
    """The tools as OpenAI function tools, for ``chat.completions.create(tools=...)``.

    Returns:
        ``[{"type": "function", "function": {"name", "description", "parameters"}}, ...]``
        with each ``parameters`` a JSON schema.
    """
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters(),
            },
        }
        for spec in TOOLS
    ]


def tool_message(client: AkaClient, tool_call: ToolCall | Mapping[str, Any]) -> JsonObject:
    """Run one tool call of an assistant message and answer it as a ``role: tool`` message.

    A refused call (a bad argument, an unknown operator, a missing KB index...) becomes an
    ``{"error": {code, message, status}}`` content, so the model can correct itself.

    Args:
        client: The service to call.
        tool_call: One item of ``message.tool_calls``: the ``openai`` package's object or its
            JSON form ``{"id", "function": {"name", "arguments"}}``.

    Returns:
        ``{"role": "tool", "tool_call_id": ..., "content": <JSON text of the result>}``.
    """
    if isinstance(tool_call, Mapping):
        call_id, function = tool_call["id"], tool_call["function"]
        name, arguments = function["name"], function.get("arguments") or "{}"
    else:
        call_id, name = tool_call.id, tool_call.function.name
        arguments = tool_call.function.arguments or "{}"
    try:
        result = dispatch(client, name, arguments)
    except AkaError as err:
        result = error_result(err)
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)}
