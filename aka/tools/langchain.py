"""aka's tools as LangChain ``StructuredTool``s (for LangGraph agents and any LangChain runnable).

Each tool's ``args_schema`` is its argument model from ``aka.tools.specs`` and its body is
``dispatch``, so it sends exactly what the OpenAI and MCP adapters send. A tool answers
``(content, artifact)``: the result as JSON text for the model, and the same result as a dict on
``ToolMessage.artifact`` for code. A refused call is a ``ToolException`` whose text
(``[code] message``) goes back to the model as an error message instead of stopping the agent.
Owns this wrapping only; langchain_core is imported here and nowhere else in ``aka``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aka.core import AkaError
from aka.tools.client import AkaClient, JsonObject
from aka.tools.specs import TOOLS, ToolSpec, dispatch

if TYPE_CHECKING:
    from langchain_core.tools import StructuredTool

__all__ = ["langchain_tools"]


def langchain_tools(client: AkaClient) -> list[StructuredTool]:
    """The tools (``aka_optimize``, ``aka_evaluate``, ``aka_kb_search``) over ``client``.

    Args:
        client: The aka service the tools call; the caller keeps it open while they are used
            and closes it afterwards.

    Returns:
        One ``StructuredTool`` per tool, ready for ``create_react_agent(model, tools)`` or
        ``model.bind_tools(tools)``.
    """
    from langchain_core.tools import StructuredTool

    return [
        StructuredTool(
            name=spec.name,
            description=spec.description,
            args_schema=spec.input_model,
            func=_runner(client, spec),
            response_format="content_and_artifact",
            handle_tool_error=True,
        )
        for spec in TOOLS
    ]


def _runner(client: AkaClient, spec: ToolSpec[Any]) -> Callable[..., tuple[str, JsonObject]]:
    from langchain_core.tools import ToolException

    def run(**arguments: Any) -> tuple[str, JsonObject]:
        try:
            result = dispatch(client, spec.name, arguments)
        except AkaError as err:
            raise ToolException(f"[{err.code}] {err.message}") from err
        return json.dumps(result), result

    run.__name__ = spec.name
    return run
