"""aka.tools: aka's operations as tools for other agent frameworks, over aka's REST API.

``AkaClient`` calls a running ``aka serve``; the three tools (``aka_optimize``, ``aka_evaluate``,
``aka_kb_search``) are defined once in ``specs`` and adapted to OpenAI function calling
(``openai_tools``, ``tool_message``), LangChain (``langchain_tools``) and MCP (``aka mcp``,
``build_mcp_server``). Every candidate still runs in the service's sandboxed job processes. Must
not duplicate service logic: the service checks requests and runs jobs; the tools only call it.
Importing this package loads neither langchain_core nor mcp (each adapter imports its own).
"""

from aka.tools.client import FINAL_STATUSES, AkaClient, JsonObject, ProblemFormat
from aka.tools.langchain import langchain_tools
from aka.tools.mcp_server import build_mcp_server, run_mcp_stdio, serve_mcp_stdio
from aka.tools.openai_schema import ToolCall, openai_tools, tool_message
from aka.tools.specs import (
    TOOLS,
    EvaluateInput,
    KBSearchInput,
    OptimizeInput,
    ToolSpec,
    dispatch,
    error_result,
    tool_spec,
)

__all__ = [
    "FINAL_STATUSES",
    "TOOLS",
    "AkaClient",
    "EvaluateInput",
    "JsonObject",
    "KBSearchInput",
    "OptimizeInput",
    "ProblemFormat",
    "ToolCall",
    "ToolSpec",
    "build_mcp_server",
    "dispatch",
    "error_result",
    "langchain_tools",
    "openai_tools",
    "run_mcp_stdio",
    "serve_mcp_stdio",
    "tool_message",
    "tool_spec",
]
