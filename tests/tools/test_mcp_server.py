"""``aka mcp`` as a real stdio subprocess, driven by the official MCP client against a real server.

The MCP server calls the shared ``aka serve`` (tests/tools/conftest.py), whose KB index is not
built: ``aka_kb_search`` must come back as a tool error (``isError``), not a broken session.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from aka.tools import openai_tools
from aka.tools.mcp_server import describe
from tests.tools.conftest import REPO, RMS_NORM_CANDIDATE, ToolServer

pytestmark = pytest.mark.integration


def _session_run(server: ToolServer, log: Path, token: str | None = None) -> dict[str, Any]:
    """Start ``aka mcp``, list its tools and call two of them; what came back, by step."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "aka", "mcp", "--url", server.url, "--token", token or server.token],
        env={"PYTHONPATH": str(REPO)},
        cwd=REPO,
    )
    seen: dict[str, Any] = {}

    async def main() -> None:
        with anyio.fail_after(120), log.open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                seen["init"] = await session.initialize()
                seen["tools"] = (await session.list_tools()).tools
                seen["kb"] = await session.call_tool("aka_kb_search", {"query": "rmsnorm"})
                seen["evaluate"] = await session.call_tool(
                    "aka_evaluate",
                    {"operator": "rms_norm", "candidate": RMS_NORM_CANDIDATE.read_text()},
                )
                seen["bad"] = await session.call_tool("aka_kb_search", {"k": 3})
                progress: list[tuple[float, float | None, str | None]] = []

                async def on_progress(
                    done: float, total: float | None, message: str | None
                ) -> None:
                    progress.append((done, total, message))

                seen["followed"] = await session.call_tool(
                    "aka_evaluate",
                    {"operator": "rms_norm", "candidate": RMS_NORM_CANDIDATE.read_text()},
                    progress_callback=on_progress,
                )
                seen["progress"] = progress

    # In a thread of its own: asyncio.run in the main thread would drop the main thread's current
    # event loop (one that an earlier test's library, e.g. litellm, left set), which then dies
    # unclosed and fails the session with a ResourceWarning.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, main).result()
    return seen


def test_mcp_server_lists_the_tools_and_runs_them(aka_server: ToolServer, tmp_path: Path) -> None:
    seen = _session_run(aka_server, tmp_path / "mcp.log")

    assert seen["init"].server_info.name == "aka"
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in openai_tools()}
    assert {t.name: t.input_schema for t in seen["tools"]} == schemas

    kb = seen["kb"]  # the index is not built on the test server: a clean tool error
    assert kb.is_error and "kb.index_not_built" in kb.content[0].text
    assert kb.structured_content["error"]["status"] == 503

    evaluated = seen["evaluate"]
    assert not evaluated.is_error, evaluated.content
    assert evaluated.structured_content["result"]["verdict"] == "accepted"
    assert json.loads(evaluated.content[0].text)["status"] == "succeeded"

    bad = seen["bad"]  # a missing argument: the server answers, the session goes on
    assert bad.is_error and "query" in bad.content[0].text

    # Asked for progress, the same call reports the job's events as they happen, in order.
    followed, progress = seen["followed"], seen["progress"]
    assert not followed.is_error and followed.structured_content["status"] == "succeeded"
    counts = [p[0] for p in progress]
    assert counts == [float(i) for i in range(1, len(progress) + 1)], progress
    messages = [p[2] or "" for p in progress]
    assert messages[0] == "status: queued" and "status: running (attempt 1)" in messages
    assert messages[-2:] == ["status: succeeded", "end: succeeded"]


def test_mcp_cli_without_a_token_says_how_to_get_one() -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "aka", "mcp", "--url", "http://127.0.0.1:9"],
        cwd=REPO, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(REPO / "no-home")},
    )  # fmt: skip

    assert done.returncode == 2, done.stderr
    assert "AKA_TOOLS__TOKEN" in done.stderr and "aka token create" in done.stderr


def test_progress_messages_name_what_happened() -> None:
    progress = {
        "id": 7,
        "event": "progress",
        "data": {"seq": 7, "source": "bench", "stage": "correctness", "message": "shape 0 ok"},
    }
    assert describe(progress) == "bench/correctness: shape 0 ok"
    running = {"id": 2, "event": "status", "data": {"status": "running", "attempt": 2}}
    assert describe(running) == "status: running (attempt 2)"
    assert describe({"id": None, "event": "end", "data": {"status": "failed"}}) == "end: failed"
    assert describe({"id": 3, "event": "progress", "data": "plain"}) == "progress: plain"
