"""``ScriptedOpenAIServer``: a real OpenAI-compatible HTTP server on 127.0.0.1, scripted replies.

It speaks ``POST /v1/chat/completions`` (non-streaming) the way OpenAI does, so any client that
talks to vLLM, Ollama or llama.cpp (litellm with ``model="openai/<name>"`` and ``api_base=url``)
can be tested end to end without a provider. Each request takes the next item of the script:

- a ``str``: a reply with that content;
- a ``ScriptedReply``: a reply with chosen usage numbers and/or a delay (to provoke timeouts),
  or with ``tool_calls`` (``ScriptedToolCall``s: the assistant calls functions);
- a ``ScriptedError``: an HTTP error status (500, 429, 401...) with an OpenAI-style error body.

When the script runs out the server answers 400 with a message saying so (a non-transient status,
so a client does not retry it into a hang). Every request body is recorded in ``requests``.

Usage::

    with ScriptedOpenAIServer(["Family: x\\n```python\\n...\\n```"]) as server:
        litellm.completion(model="openai/fake", api_base=server.url, api_key="k", messages=...)
        assert server.requests[0]["messages"][-1]["role"] == "user"
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = [
    "ScriptedError",
    "ScriptedOpenAIServer",
    "ScriptedReply",
    "ScriptedToolCall",
    "count_tokens",
]

_COMPLETIONS_PATH = "/v1/chat/completions"


def count_tokens(text: str) -> int:
    """The fake's token count: whitespace-separated words (deterministic, tokenizer-free)."""
    return len(text.split())


@dataclass(frozen=True)
class ScriptedToolCall:
    """One function call of an assistant reply: the tool's name and its arguments (a dict)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScriptedReply:
    """A successful reply with explicit usage numbers or a delay before answering.

    Attributes:
        content: The assistant message text.
        prompt_tokens: Reported prompt tokens; None = the words in all request messages.
        completion_tokens: Reported completion tokens; None = the words in ``content``.
        delay_s: Seconds to wait before answering (a client timeout shorter than this fails).
        finish_reason: ``"stop"``, or ``"length"`` to play a reply cut by the token limit
            (``"tool_calls"`` whenever ``tool_calls`` is set).
        tool_calls: Function calls of the reply (OpenAI's ``message.tool_calls``, ids
            ``call_<n>``); ``content`` may then be empty (sent as null).
    """

    content: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    delay_s: float = 0.0
    finish_reason: str = "stop"
    tool_calls: tuple[ScriptedToolCall, ...] = ()


@dataclass(frozen=True)
class ScriptedError:
    """An HTTP error answer, e.g. ``ScriptedError(500)`` or ``ScriptedError(429, "slow down")``."""

    status: int
    message: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict)


Script = str | ScriptedReply | ScriptedError

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


class ScriptedOpenAIServer:
    """An OpenAI-compatible chat-completions server serving a scripted queue of replies.

    Args:
        replies: The script, consumed one item per ``POST /v1/chat/completions``.
        model: The ``model`` field of every reply (a client's requested name is echoed when
            None).

    Attributes:
        requests: Every chat-completion request body (parsed JSON), in arrival order.
        request_headers: The matching request headers (lower-cased names).
        responses: Every body the server answered with (replies and errors), in order.
    """

    def __init__(self, replies: Iterable[Script] = (), *, model: str | None = None) -> None:
        self._script: deque[Script] = deque(replies)
        self._model = model
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self.responses: list[dict[str, Any]] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- script ---------------------------------------------------------------------------------

    def push(self, *replies: Script) -> None:
        """Append replies to the end of the script."""
        with self._lock:
            self._script.extend(replies)

    @property
    def remaining(self) -> int:
        """How many scripted items are still unserved."""
        with self._lock:
            return len(self._script)

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The OpenAI base URL, ``http://127.0.0.1:<port>/v1`` (pass it as ``api_base``)."""
        if self._httpd is None:
            raise RuntimeError("ScriptedOpenAIServer is not running; call start() or use `with`")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> ScriptedOpenAIServer:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread; returns self."""
        if self._httpd is not None:
            return self
        handler = _make_handler(self)
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="scripted-openai-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        httpd, thread = self._httpd, self._thread
        self._httpd, self._thread = None, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- request handling (called from the handler thread) --------------------------------------

    def _answer(
        self, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, dict[str, Any], dict[str, str], float]:
        with self._lock:
            self.requests.append(body)
            self.request_headers.append(headers)
            served = len(self.requests)
            item: Script | None = self._script.popleft() if self._script else None
        if item is None:
            status, payload = (
                400,
                _error_body(
                    400,
                    f"ScriptedOpenAIServer: script exhausted (request {served} has no scripted "
                    "reply); push() more replies",
                ),
            )
            extra: dict[str, str] = {}
            delay = 0.0
        elif isinstance(item, ScriptedError):
            status, payload, extra, delay = (
                item.status,
                _error_body(item.status, item.message),
                dict(item.headers),
                0.0,
            )
        else:
            reply = item if isinstance(item, ScriptedReply) else ScriptedReply(item)
            status, payload, extra, delay = 200, self._completion(body, reply), {}, reply.delay_s
        with self._lock:
            self.responses.append(payload)
        return status, payload, extra, delay

    def _completion(self, body: dict[str, Any], reply: ScriptedReply) -> dict[str, Any]:
        prompt_words = sum(
            count_tokens(str(m.get("content") or "")) for m in body.get("messages", [])
        )
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None else prompt_words
        completion = (
            reply.completion_tokens
            if reply.completion_tokens is not None
            else count_tokens(reply.content)
        )
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        finish_reason = reply.finish_reason
        if reply.tool_calls:
            message["content"] = reply.content or None
            message["tool_calls"] = [
                {
                    "id": f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in reply.tool_calls
            ]
            finish_reason = "tool_calls"
        return {
            "id": f"chatcmpl-scripted-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self._model or str(body.get("model", "scripted")),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": str(status)}}


def _make_handler(server: ScriptedOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            """Stay quiet: tests run with warnings as errors and read stderr."""

        def _send(self, status: int, payload: dict[str, Any], extra: dict[str, str]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in extra.items():
                self.send_header(key, value)
            self.end_headers()
            # the client may have given up (its timeout): nothing to tell it then
            with contextlib.suppress(OSError):
                self.wfile.write(data)

        def do_POST(self) -> None:
            if self.path.rstrip("/") != _COMPLETIONS_PATH:
                self._send(404, _error_body(404, f"no route POST {self.path}"), {})
                return
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError as err:
                self._send(400, _error_body(400, f"request body is not JSON: {err}"), {})
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, payload, extra, delay = server._answer(body, headers)
            if delay:
                time.sleep(delay)
            self._send(status, payload, extra)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                model = server._model or "scripted"
                self._send(200, {"object": "list", "data": [{"id": model, "object": "model"}]}, {})
                return
            self._send(404, _error_body(404, f"no route GET {self.path}"), {})

    return _Handler
