"""``AkaClient``: a small synchronous client of aka's REST API (httpx), the one the tools use.

Owns the HTTP calls, waiting for a job to finish (polling with backoff, gentle with the rate
limit) and turning an error answer into ``ServiceError`` with the server's ``{code, message}`` and
status. Must not validate requests beyond their shape, nor run anything itself: the service
checks every request and runs every candidate in its own sandboxed job processes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Literal

import httpx

from aka.core import ConfigError, ServiceError, ToolsConfig

__all__ = ["FINAL_STATUSES", "AkaClient", "EventCallback", "JsonObject", "ProblemFormat"]

logger = logging.getLogger(__name__)

#: A JSON object as the API sends it (the I/O edge, STYLE T3).
JsonObject = dict[str, Any]
ProblemFormat = Literal["kernelbench", "op.yaml"]
#: Called with each of a job's server-sent events (``{"id", "event", "data"}``) while waiting.
EventCallback = Callable[[JsonObject], None]

#: Job statuses after which nothing changes.
FINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})

_RATE_LIMITED_WAIT_S = 2.0


class AkaClient:
    """A client of one aka service, authenticated by one bearer token.

    Args:
        base_url: The service's base URL, e.g. ``http://127.0.0.1:8000``.
        token: A bearer token (``aka token create``); ``read`` and ``submit`` scopes for the tools,
            ``custom-code`` too for inline problems.
        timeout_s: Limit of one HTTP request, seconds.
        job_timeout_s: How long ``optimize``, ``evaluate`` and ``wait`` wait for a job by default.
        poll_interval_s: First pause between two looks at a running job; it grows by half each
            time up to ``max_poll_interval_s``, so a long job costs a few requests a minute.
        max_poll_interval_s: Longest pause between two looks.
        transport: An httpx transport to use instead of the network (tests, proxies).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 30.0,
        job_timeout_s: float = 3600.0,
        poll_interval_s: float = 0.25,
        max_poll_interval_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        from aka import __version__

        self.base_url = base_url.rstrip("/")
        self.poll_interval_s = poll_interval_s
        self.max_poll_interval_s = max(max_poll_interval_s, poll_interval_s)
        self.job_timeout_s = job_timeout_s
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}", "User-Agent": f"aka-tools/{__version__}"},
            timeout=timeout_s,
            transport=transport,
        )

    @classmethod
    def from_config(cls, config: ToolsConfig) -> AkaClient:
        """Build a client from the ``tools`` settings (``AKA_TOOLS__URL``, ``AKA_TOOLS__TOKEN``).

        Raises:
            ConfigError: No token is set.
        """
        if config.token is None:
            raise ConfigError(
                "the tools need a bearer token of the aka service: make one with `aka token "
                "create --scopes read,submit` and set AKA_TOOLS__TOKEN (or pass --token)"
            )
        return cls(
            config.url,
            config.token.get_secret_value(),
            timeout_s=config.request_timeout_s,
            job_timeout_s=config.job_timeout_s,
        )

    # -- the operations ---------------------------------------------------------------------------

    def optimize(
        self,
        operator: str | None = None,
        problem: str | None = None,
        shapes: list[str] | None = None,
        max_iters: int = 3,
        model: str | None = None,
        dsl: Literal["triton", "cuda"] = "triton",
        wait: bool = True,
        timeout_s: float | None = None,
        *,
        problem_format: ProblemFormat = "kernelbench",
        suite: str | None = None,
        on_event: EventCallback | None = None,
    ) -> JsonObject:
        """Queue an optimization (POST /v1/jobs) and, with ``wait``, follow it to its end.

        Args:
            operator: A suite operator, e.g. ``rms_norm`` (exactly one of it and ``problem``).
            problem: The text of an inline problem file (needs the ``custom-code`` scope).
            shapes: Shape ids of ``operator`` to keep; None keeps all.
            max_iters: Propose-evaluate rounds.
            model: The LLM (a litellm name); None = the server's choice.
            dsl: ``triton`` or ``cuda``.
            wait: Follow the job until it is final; False returns the queued job at once.
            timeout_s: How long to wait, seconds; None = ``job_timeout_s``.
            problem_format: The format of ``problem``: ``kernelbench`` or ``op.yaml``.
            suite: The suite of ``operator``; None = the server's default.
            on_event: Called with each of the job's events while waiting (see ``wait``).

        Returns:
            The job as the API shows it (``id``, ``status``, ``result``, ``error``, ``links``),
            plus ``kernel``, the kernel file's text, when the job produced one.

        Raises:
            ServiceError: The service refused the request (its code and status), could not be
                reached, or the job did not finish within ``timeout_s``.
        """
        body = _problem_body(operator, problem, problem_format, shapes, suite)
        body |= {"dsl": dsl, "budget": {"max_iters": max_iters}}
        if model is not None:
            body["model"] = model
        job = self._json("POST", "/v1/jobs", json=body)
        logger.info("queued optimization job %s", job["id"])
        if not wait:
            return job
        job = self.wait(job["id"], timeout_s, on_event=on_event)
        kernel = self._kernel_if_any(job)
        return job if kernel is None else job | {"kernel": kernel}

    def evaluate(
        self,
        candidate: str,
        operator: str | None = None,
        problem: str | None = None,
        wait: bool = True,
        timeout_s: float | None = None,
        *,
        problem_format: ProblemFormat = "kernelbench",
        suite: str | None = None,
        on_event: EventCallback | None = None,
    ) -> JsonObject:
        """Queue the scoring of one candidate (POST /v1/evaluations); with ``wait``, its verdict.

        Args:
            candidate: The candidate file's text (``class ModelNew``).
            operator: A suite operator (exactly one of it and ``problem``).
            problem: The text of an inline problem file (needs the ``custom-code`` scope).
            wait: Follow the evaluation until it is final; False returns it queued.
            timeout_s: How long to wait, seconds; None = ``job_timeout_s``.
            problem_format: The format of ``problem``: ``kernelbench`` or ``op.yaml``.
            suite: The suite of ``operator``; None = the server's default.
            on_event: Called with each of the evaluation's events while waiting (see ``wait``).

        Returns:
            The evaluation job; once succeeded its ``result`` holds the verdict, the score and
            each shape's verdict.

        Raises:
            ServiceError: Refused, unreachable, or not finished within ``timeout_s``.
        """
        body = _problem_body(operator, problem, problem_format, None, suite)
        body["candidate"] = candidate
        job = self._json("POST", "/v1/evaluations", json=body)
        logger.info("queued evaluation job %s", job["id"])
        return self.wait(job["id"], timeout_s, on_event=on_event) if wait else job

    def kb_search(
        self, query: str, k: int = 5, op_family: str | None = None, arch: str | None = None
    ) -> list[JsonObject]:
        """Search the knowledge base (GET /v1/kb/search).

        Args:
            query: What to look for, in words (a symptom, a technique, an operator).
            k: How many hits.
            op_family: Only documents about this operator family (e.g. ``norm``).
            arch: Only documents for this architecture (e.g. ``sm_90``).

        Returns:
            The hits, best first: ``id``, ``kind``, ``title``, ``score``, ``text``.

        Raises:
            ServiceError: Refused (503 ``kb.index_not_built`` until the server ran
                ``aka kb build``) or unreachable.
        """
        params: dict[str, str | int] = {"q": query, "k": k}
        if op_family is not None:
            params["op_family"] = op_family
        if arch is not None:
            params["arch"] = arch
        hits: list[JsonObject] = self._json("GET", "/v1/kb/search", params=params)["hits"]
        return hits

    def job(self, job_id: str) -> JsonObject:
        """One job as the API shows it (GET /v1/jobs/{id}).

        Raises:
            ServiceError: No such job of this token (404), or unreachable.
        """
        return self._json("GET", f"/v1/jobs/{job_id}")

    def kernel(self, job_id: str) -> str:
        """The kernel file a job produced (GET /v1/jobs/{id}/kernel).

        Raises:
            ServiceError: The job has no kernel (404), or unreachable.
        """
        return self._request("GET", f"/v1/jobs/{job_id}/kernel").text

    def cancel(self, job_id: str) -> JsonObject:
        """Cancel a job (POST /v1/jobs/{id}/cancel): a queued one at once, a running one soon.

        Raises:
            ServiceError: No such job of this token, or unreachable.
        """
        return self._json("POST", f"/v1/jobs/{job_id}/cancel")

    def wait(
        self, job_id: str, timeout_s: float | None = None, on_event: EventCallback | None = None
    ) -> JsonObject:
        """Wait until a job's status is final.

        Without ``on_event`` it looks at the job with growing pauses between looks; with it, it
        follows the job's server-sent events instead (``events``), calling ``on_event`` with each,
        and reconnects after the last one it saw when the stream drops. A 429 (rate limit) or a
        moment without an answer while waiting only lengthens the pause: the job runs on
        regardless.

        Args:
            job_id: The job.
            timeout_s: How long to wait, seconds; None = ``job_timeout_s``.
            on_event: Called with each event (``{"id", "event", "data"}``), in order, once each.

        Returns:
            The final job.

        Raises:
            ServiceError: ``service.job_timeout`` when it is not final in time (the job goes on;
                the message says how to follow or cancel it), or the job cannot be read.
        """
        limit_s = self.job_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit_s
        pause_s = self.poll_interval_s
        status = "unknown"
        seen = 0  # the last event id passed to on_event
        while True:
            try:
                if on_event is not None:
                    for event in self.events(job_id, after=seen, deadline=deadline):
                        if event["id"] is not None:
                            seen = event["id"]
                        on_event(event)
                job = self.job(job_id)
                status = job["status"]
                if status in FINAL_STATUSES:
                    logger.info("job %s ended: %s", job_id, status)
                    return job
            except ServiceError as err:
                if err.status != 429 and err.code != "service.unreachable":
                    raise
                logger.warning("job %s: %s; looking again later", job_id, err.message)
                pause_s = max(pause_s, _RATE_LIMITED_WAIT_S)
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                raise ServiceError(
                    f"job {job_id} did not finish in {limit_s:g} s (last status: {status}); it "
                    f"goes on: follow it with GET /v1/jobs/{job_id} or stop it with "
                    f"POST /v1/jobs/{job_id}/cancel",
                    code="service.job_timeout",
                )
            time.sleep(min(pause_s, left_s))
            pause_s = min(pause_s * 1.5, self.max_poll_interval_s)

    def events(
        self, job_id: str, after: int = 0, deadline: float | None = None
    ) -> Iterator[JsonObject]:
        """A job's server-sent events after ``after`` (GET /v1/jobs/{id}/events), until its end.

        Yields ``{"id": int | None, "event": str, "data": object}`` per event; the last is the
        ``end`` event (``id`` None). Stops early, without an error, when the stream drops or
        ``deadline`` (a ``time.monotonic()`` value) passes; resume with the last ``id`` seen.

        Raises:
            ServiceError: The service refused (no such job of this token...) or is unreachable.
        """
        path = f"/v1/jobs/{job_id}/events"
        try:
            with self._http.stream("GET", path, headers={"Last-Event-ID": str(after)}) as response:
                if not response.is_success:
                    response.read()
                    raise _error_of(response)
                frame: JsonObject = {"id": None, "event": "message", "data": None}
                for line in response.iter_lines():
                    if deadline is not None and time.monotonic() > deadline:
                        return
                    if line:
                        field, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if field == "id" and value.isdigit():
                            frame["id"] = int(value)
                        elif field == "event":
                            frame["event"] = value
                        elif field == "data":
                            frame["data"] = _json_or_text(value)
                        continue  # ": keep-alive" comments and unknown fields are skipped
                    if frame["data"] is not None or frame["event"] != "message":
                        yield frame
                        if frame["event"] == "end":
                            return
                    frame = {"id": None, "event": "message", "data": None}
        except httpx.HTTPError as err:  # a dropped or silent stream: the caller resumes
            logger.info("events of job %s: stream ended (%s: %s)", job_id,
                        type(err).__name__, err)  # fmt: skip

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def __enter__(self) -> AkaClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AkaClient({self.base_url!r})"  # never the token

    # -- HTTP -------------------------------------------------------------------------------------

    def _kernel_if_any(self, job: JsonObject) -> str | None:
        result = job.get("result") or {}
        if job["status"] != "succeeded" or "kernel" not in job.get("links", {}):
            return None
        if result.get("produced_kernel") is False:
            return None
        try:
            return self.kernel(job["id"])
        except ServiceError as err:
            if err.status == 404:
                return None
            raise

    def _json(self, method: str, path: str, **kwargs: Any) -> JsonObject:
        answer: JsonObject = self._request(method, path, **kwargs).json()
        return answer

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            raise ServiceError(
                f"{method} {self.base_url}{path} got no answer ({type(err).__name__}: {err}); "
                "is `aka serve` running there? Check the URL (--url / AKA_TOOLS__URL)",
                code="service.unreachable",
            ) from err
        if response.is_success:
            return response
        raise _error_of(response)


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _problem_body(
    operator: str | None,
    problem: str | None,
    problem_format: ProblemFormat,
    shapes: list[str] | None,
    suite: str | None,
) -> JsonObject:
    """The problem part of a request; the service checks that exactly one problem is given."""
    body: JsonObject = {}
    if operator is not None:
        body["operator"] = operator
    if problem is not None:
        body["problem"] = {"format": problem_format, "source": problem}
    if shapes is not None:
        body["shapes"] = shapes
    if suite is not None:
        body["suite"] = suite
    return body


def _error_of(response: httpx.Response) -> ServiceError:
    """The server's ``{code, message}`` as a ``ServiceError`` (a body of another shape is kept)."""
    where = f"{response.request.method} {response.request.url.path}"
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        message = str(body.get("message", ""))
        return ServiceError(message, status=response.status_code, code=body["code"])
    return ServiceError(
        f"{where} answered {response.status_code}: {response.text[:500]}",
        status=response.status_code,
        code=f"http.{response.status_code}",
    )
