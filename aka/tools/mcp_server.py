"""aka's tools as an MCP server over stdio (``aka mcp``), built on the official ``mcp`` SDK.

The SDK's low-level ``Server`` is used (not ``MCPServer``, which derives schemas from function
signatures) so that each tool's ``inputSchema`` is exactly its argument model's schema from
``aka.tools.specs``, the same one the OpenAI and LangChain adapters publish. A call runs
``dispatch`` in a worker thread (the client is synchronous; the event loop keeps answering pings).
When the caller asks for progress (a ``progressToken`` in the request's ``_meta``), a tool that
waits for a job follows the job's server-sent events and sends each as an MCP progress
notification (``progress`` counts the events, ``message`` says what happened); without a token the
job is polled and nothing is sent.
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
from aka.tools.client import AkaClient, EventCallback, JsonObject
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
        return await _call(client, params.name, params.arguments or {}, ctx)

    return Server(
        "aka",
        version=__version__,
        instructions=_INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def _call(
    client: AkaClient,
    name: str,
    arguments: JsonObject,
    ctx: ServerRequestContext[Any] | None = None,
) -> mcp_types.CallToolResult:
    import anyio.to_thread
    import mcp_types as types

    try:
        result = await anyio.to_thread.run_sync(
            functools.partial(dispatch, client, name, arguments, _progress_sender(ctx))
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


def _progress_sender(ctx: ServerRequestContext[Any] | None) -> EventCallback | None:
    """A job-event callback that reports MCP progress, or None when the caller asked for none.

    It runs in the tool's worker thread and hands each notification to the event loop
    (``anyio.from_thread``); ``progress`` grows by one per event, as the protocol wants it to
    increase. A notification that cannot be sent (the client went away) is logged, not raised:
    the job goes on either way.
    """
    meta = (ctx.meta or {}) if ctx is not None else {}
    if ctx is None or meta.get("progress_token") is None:
        return None
    import anyio.from_thread

    session = ctx.session
    count = 0

    def send(event: JsonObject) -> None:
        nonlocal count
        count += 1
        try:
            anyio.from_thread.run(session.report_progress, float(count), None, describe(event))
        except Exception as err:  # a lost client must not fail the job's wait
            logger.info("progress notification not sent: %s: %s", type(err).__name__, err)

    return send


def describe(event: JsonObject) -> str:
    """One line for a job event: ``status: running (attempt 1)``, ``agent/evaluate: ...``."""
    data = event.get("data")
    kind = event.get("event", "message")
    if not isinstance(data, dict):
        return f"{kind}: {data}"
    if kind in ("status", "end"):
        attempt = f" (attempt {data['attempt']})" if data.get("attempt") else ""
        return f"{kind}: {data.get('status')}{attempt}"
    where = "/".join(str(data[k]) for k in ("source", "stage") if data.get(k))
    return f"{where or kind}: {data.get('message', '')}".strip()


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
