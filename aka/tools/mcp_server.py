"""aka's tools as an MCP server over stdio (``aka mcp``), built on the official ``mcp`` SDK.

The SDK's low-level ``Server`` is used (not ``MCPServer``, which derives schemas from function
signatures) so that each tool's ``inputSchema`` is exactly its argument model's schema from
``aka.tools.specs``, the same one the OpenAI and LangChain adapters publish. A call runs
``dispatch`` in a worker thread (the client is synchronous; the event loop keeps answering pings).
A refused call (an unknown operator, a missing KB index, a timeout...) is a result with
``isError: true`` whose text is ``[code] message`` and whose ``structuredContent`` is
``{"error": {code, message, status}}``, so the model sees it and can correct itself. Owns this
wrapping only; the ``mcp`` package is imported here and nowhere else in ``aka``.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import TYPE_CHECKING, Any

from aka.core import AkaError, ToolsConfig
from aka.tools.client import AkaClient, JsonObject
from aka.tools.specs import TOOLS, dispatch, error_result

if TYPE_CHECKING:
    import mcp_types
    from mcp.server import Server, ServerRequestContext

__all__ = ["build_mcp_server", "run_mcp_stdio", "serve_mcp_stdio"]

logger = logging.getLogger(__name__)

_INSTRUCTIONS = (
    "aka optimizes GPU kernels and scores them with a harness kernels cannot fool. Use "
    "aka_kb_search for techniques and pitfalls, aka_evaluate to score a kernel you wrote, and "
    "aka_optimize to have aka's agent write one (minutes)."
)


def build_mcp_server(client: AkaClient) -> Server[Any]:
    """An MCP server exposing ``aka_optimize``, ``aka_evaluate`` and ``aka_kb_search``.

    Args:
        client: The aka service every tool call goes to (the caller closes it).

    Returns:
        The server; run it on a transport, e.g. ``serve_mcp_stdio``.
    """
    import mcp_types as types
    from mcp.server import Server

    from aka import __version__

    tools = [
        types.Tool(name=spec.name, description=spec.description, input_schema=spec.parameters())
        for spec in TOOLS
    ]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await _call(client, params.name, params.arguments or {})

    return Server(
        "aka",
        version=__version__,
        instructions=_INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def _call(client: AkaClient, name: str, arguments: JsonObject) -> mcp_types.CallToolResult:
    import anyio.to_thread
    import mcp_types as types

    try:
        result = await anyio.to_thread.run_sync(
            functools.partial(dispatch, client, name, arguments)
        )
    except AkaError as err:
        logger.info("tool %s refused: [%s] %s", name, err.code, err.message)
        return types.CallToolResult(
            content=[types.TextContent(text=f"[{err.code}] {err.message}")],
            structured_content=error_result(err),
            is_error=True,
        )
    except Exception as err:  # the tool-call boundary (STYLE E4): the session must go on
        logger.exception("tool %s failed", name)
        return types.CallToolResult(
            content=[types.TextContent(text=f"[internal] {type(err).__name__}: {err}")],
            is_error=True,
        )
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(result))], structured_content=result
    )


async def serve_mcp_stdio(client: AkaClient) -> None:
    """Serve the tools over this process's stdin and stdout until the MCP client hangs up.

    Args:
        client: The aka service every tool call goes to.
    """
    from mcp.server.stdio import stdio_server

    server = build_mcp_server(client)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def run_mcp_stdio(config: ToolsConfig) -> None:
    """Run ``aka mcp``: a client from ``config``, served over stdio until stdin closes.

    Raises:
        ConfigError: ``config`` has no token.
    """
    import anyio

    with AkaClient.from_config(config) as client:
        logger.info("MCP server on stdio, calling the aka service at %s", client.base_url)
        anyio.run(serve_mcp_stdio, client)
