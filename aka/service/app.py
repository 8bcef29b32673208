"""The FastAPI app: jobs, their events (server-sent), kernels and reports, evaluations, KB search.

Owns routes, auth per route, the body size limit and CORS. Must not contain optimization logic:
jobs go to the store, the dispatcher's slots run them (``aka.service.worker``).

Every route but ``/healthz`` needs a bearer token; a token sees its own jobs (``admin`` sees all);
an inline problem needs the ``custom-code`` scope. The job page (``/ui/jobs/{id}``, a browser
navigation, which cannot send a header) also takes it as ``?access_token=``; the access log
redacts it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, PlainTextResponse, StreamingResponse

from aka.core import AuthError, NotFoundError, Settings
from aka.service.auth import QUERY_TOKEN, QueryTokenRedactor, RateLimiter, verify_token
from aka.service.handlers import install_handlers
from aka.service.models import (
    ErrorBody,
    EvaluationRequest,
    JobList,
    JobRequest,
    JobView,
    KBHit,
    KBSearchResult,
)
from aka.service.page import page_headers, render_job_page
from aka.service.runner import check_request, job_dir
from aka.service.store import JobRow, JobStatus, JobStore, TokenRow, open_store

__all__ = ["create_app"]

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in {
        401: "no valid bearer token",
        403: "the token lacks the scope",
        404: "no such job (or not yours)",
        413: "body over the size limit",
        422: "invalid request",
        429: "rate limit: retry after Retry-After seconds",
    }.items()
}


class _BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes, declared or streamed."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and int(declared) > self.limit:
            await _too_large(send, self.limit)
            return
        seen = 0

        async def limited() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await _too_large(send, self.limit)


class _TooLarge(Exception):
    pass


async def _too_large(send: Any, limit: int) -> None:
    body = json.dumps(
        {"code": "request.too_large", "message": f"the body is over {limit} bytes; send less"}
    ).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def _authorize(request: Request, authorization: str | None, scope: str) -> TokenRow:
    """The request's token, checked for ``scope`` and the rate limit."""
    state = request.app.state
    token = verify_token(state.store, authorization, scope)
    wait = state.limiter.check(token.id)
    if wait is not None:
        raise AuthError(
            f"rate limit of {state.limiter.per_minute} requests a minute reached; retry in "
            f"{wait:.1f} s",
            status=429,
            code="auth.rate_limited",
        )
    return token


def _need(scope: str) -> Any:
    """A dependency: the ``Authorization`` header's token, checked for ``scope``."""

    def check(request: Request, authorization: Annotated[str | None, Header()] = None) -> TokenRow:
        return _authorize(request, authorization, scope)

    return check


def _need_in_page(scope: str) -> Any:
    """A dependency for a page a browser opens: the header's token, else ``?access_token=``."""

    def check(
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        access_token: Annotated[
            str | None,
            Query(
                alias=QUERY_TOKEN,
                description="The bearer token, for a browser that cannot send the header "
                "(RFC 6750 section 2.3); the page removes it from the address bar.",
            ),
        ] = None,
    ) -> TokenRow:
        if authorization is None and access_token:
            authorization = f"Bearer {access_token}"
        return _authorize(request, authorization, scope)

    return check


Read = Annotated[TokenRow, Depends(_need("read"))]
ReadPage = Annotated[TokenRow, Depends(_need_in_page("read"))]
Submit = Annotated[TokenRow, Depends(_need("submit"))]


def _redact_access_log() -> None:
    """Keep ``?access_token=`` values out of uvicorn's access log (once per process).

    A filter on the logger, not a handler: ``logging.config.dictConfig``, which uvicorn runs
    when it starts, replaces a logger's handlers but keeps its filters.
    """
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, QueryTokenRedactor) for f in access.filters):
        access.addFilter(QueryTokenRedactor())


def _problem_text(job: JobRow) -> str:
    request = job.request
    if request.get("operator"):
        return f"{request['operator']} (suite {request.get('suite') or 'atrex30'})"
    return f"inline problem ({(request.get('problem') or {}).get('format', '?')})"


def _view(job: JobRow) -> JobView:
    base = f"/v1/jobs/{job.id}"
    links = {"self": base, "events": f"{base}/events", "cancel": f"{base}/cancel"}
    if job.kind == "optimize":
        links |= {"kernel": f"{base}/kernel", "report": f"{base}/report"}
    return JobView(
        id=job.id,
        kind=job.kind,
        status=job.status.value,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        attempts=job.attempts,
        cancel_requested=job.cancel_requested,
        error=job.error,
        result=job.result,
        links=links,
    )


def create_app(settings: Settings, store: JobStore | None = None) -> FastAPI:
    """Build the app over the store under ``settings.service`` (the dispatcher runs apart)."""
    config = settings.service
    store = store or open_store(config)
    app = FastAPI(
        title="aka",
        version="1",
        summary="Optimize GPU kernels and score them with a harness they cannot fool.",
        description="Send `Authorization: Bearer <token>` (make one with `aka token create`).",
    )
    app.state.store = store
    app.state.limiter = RateLimiter(config.rate_limit_per_minute)
    _redact_access_log()
    install_handlers(app)
    if config.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=config.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"],
        )
    app.add_middleware(_BodyLimit, limit=config.max_request_bytes)

    def owned(job_id: str, token: TokenRow) -> JobRow:
        job = store.get(job_id)
        if job.token_id != token.id and "admin" not in token.scopes:
            raise NotFoundError(f"no job {job_id!r}; list jobs with GET /v1/jobs")
        return job

    def submit(kind: str, body: JobRequest | EvaluationRequest, token: TokenRow,
               key: str | None, response: Response) -> JobView:  # fmt: skip
        if body.problem is not None and "custom-code" not in token.scopes:
            raise AuthError(
                "an inline problem carries code; it needs a token with the 'custom-code' scope",
                status=403,
                code="auth.forbidden",
            )
        request = body.model_dump(mode="json")
        check_request(request)
        job, new = store.submit(kind, request, token.id, key)
        response.status_code = 202
        if not new:
            response.headers["Idempotent-Replayed"] = "true"
        return _view(job)

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers (no token needed)."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], responses=_ERRORS)
    def readyz(token: Read) -> dict[str, Any]:
        """Readiness: the job store answers; counts of queued and running jobs."""
        return {
            "status": "ready",
            "queued": store.count(JobStatus.QUEUED),
            "running": store.count(JobStatus.RUNNING),
        }

    @app.post("/v1/jobs", status_code=202, tags=["jobs"], responses=_ERRORS)
    def create_job(
        body: JobRequest,
        response: Response,
        token: Submit,
        idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
    ) -> JobView:
        """Queue an optimization of a suite operator or an inline problem."""
        return submit("optimize", body, token, idempotency_key, response)

    @app.get("/v1/jobs", tags=["jobs"], responses=_ERRORS)
    def list_jobs(
        token: Read,
        status: JobStatus | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> JobList:
        """Your jobs, newest first (every job with the ``admin`` scope)."""
        mine = None if "admin" in token.scopes else token.id
        return JobList(jobs=[_view(j) for j in store.list_jobs(token_id=mine, status=status,
                                                             limit=limit)])  # fmt: skip

    @app.get("/v1/jobs/{job_id}", tags=["jobs"], responses=_ERRORS)
    def get_job(job_id: str, token: Read) -> JobView:
        """One job: status, attempts, result summary once finished."""
        return _view(owned(job_id, token))

    @app.post("/v1/jobs/{job_id}/cancel", status_code=202, tags=["jobs"], responses=_ERRORS)
    def cancel_job(job_id: str, token: Submit) -> JobView:
        """Cancel a job: at once when queued, by its worker when running."""
        owned(job_id, token)
        return _view(store.request_cancel(job_id))

    @app.get(
        "/v1/jobs/{job_id}/events",
        tags=["jobs"],
        responses=_ERRORS | {200: {"content": {"text/event-stream": {}}}},
    )
    def job_events(
        request: Request,
        job_id: str,
        token: Read,
        last_event_id: Annotated[int | None, Header()] = None,
        after: Annotated[int | None, Query(ge=0)] = None,
    ) -> StreamingResponse:
        """Server-sent events of a job's progress until it ends.

        Each event's ``id`` is its sequence number: reconnect with ``Last-Event-ID`` (or
        ``?after=``) to get only what came since.
        """
        owned(job_id, token)
        start = last_event_id if last_event_id is not None else (after or 0)
        return StreamingResponse(
            _event_stream(store, request, job_id, start, config.poll_interval_s),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get("/v1/jobs/{job_id}/kernel", tags=["jobs"], responses=_ERRORS,
             response_class=PlainTextResponse)  # fmt: skip
    def job_kernel(job_id: str, token: Read) -> PlainTextResponse:
        """The kernel file the job produced (404 until it has one)."""
        owned(job_id, token)
        return PlainTextResponse(_artifact(settings, job_id, "kernel.py"))

    @app.get("/v1/jobs/{job_id}/report", tags=["jobs"], responses=_ERRORS,
             response_class=PlainTextResponse)  # fmt: skip
    def job_report(
        job_id: str,
        token: Read,
        format: Annotated[str, Query(pattern="^(md|html|json)$")] = "md",
    ) -> Response:
        """The job's report: Markdown (default), HTML, or the run record as JSON."""
        owned(job_id, token)
        name = {"md": "report.md", "html": "report.html", "json": "run.json"}[format]
        media = {"md": "text/markdown", "html": "text/html", "json": "application/json"}[format]
        return Response(_artifact(settings, job_id, name), media_type=media)

    @app.get(
        "/ui/jobs/{job_id}",
        tags=["ui"],
        response_class=HTMLResponse,
        responses=_ERRORS | {200: {"content": {"text/html": {}}}},
    )
    def job_page(job_id: str, token: ReadPage) -> HTMLResponse:
        """A page for a browser that follows one job: status, live events, result, SOL chart.

        Open it as ``/ui/jobs/{id}?access_token=<token>`` (a navigation cannot send a header);
        its script removes the token from the address bar and calls the JSON API with it.
        """
        job = owned(job_id, token)
        return HTMLResponse(render_job_page(job.id, _problem_text(job)), headers=page_headers())

    @app.post("/v1/evaluations", status_code=202, tags=["evaluations"], responses=_ERRORS)
    def create_evaluation(
        body: EvaluationRequest,
        response: Response,
        token: Submit,
        idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
    ) -> JobView:
        """Queue the scoring of one candidate; follow it like a job (its result has the verdict)."""
        return submit("evaluate", body, token, idempotency_key, response)

    @app.get("/v1/kb/search", tags=["kb"], responses=_ERRORS | {503: {"model": ErrorBody}})
    def kb_search(
        q: Annotated[str, Query(min_length=1, max_length=2000)],
        token: Read,
        k: Annotated[int, Query(ge=1, le=50)] = 8,
        op_family: str | None = None,
        arch: str | None = None,
    ) -> KBSearchResult:
        """Hybrid search of the knowledge base (503 until `aka kb build` has run)."""
        from aka.kb import KBFilter, open_retriever

        hits = open_retriever(settings).search(
            q, k=k, filters=KBFilter(arch=arch, op_family=op_family)
        )
        return KBSearchResult(
            query=q,
            hits=[KBHit(id=h.id, kind=h.kind, title=h.title, score=h.score, text=h.text)
                  for h in hits],
        )  # fmt: skip

    return app


def _artifact(settings: Settings, job_id: str, name: str) -> str:
    path: Path = job_dir(settings, job_id) / "run" / name
    if not path.is_file():
        raise NotFoundError(f"job {job_id} has no {name} yet; wait until its status is succeeded")
    return path.read_text(encoding="utf-8")


async def _event_stream(
    store: JobStore, request: Request, job_id: str, after: int, poll_s: float
) -> AsyncIterator[str]:
    """SSE frames for events after ``after``, until the job is final and all are sent."""
    seq = after
    idle = 0.0
    while True:
        events = await asyncio.to_thread(store.events, job_id, seq)
        for ev in events:
            seq = ev.seq
            payload = json.dumps({"seq": ev.seq, "at": ev.created_at, **ev.data})
            yield f"id: {ev.seq}\nevent: {ev.kind}\ndata: {payload}\n\n"
        if not events:
            job = await asyncio.to_thread(store.get, job_id)
            if job.status.final and not await asyncio.to_thread(store.events, job_id, seq):
                yield f"event: end\ndata: {json.dumps({'status': job.status.value})}\n\n"
                return
            if await request.is_disconnected():
                return
            idle += poll_s
            if idle >= 15.0:  # a comment line keeps proxies from closing a quiet stream
                idle = 0.0
                yield ": keep-alive\n\n"
            await asyncio.sleep(poll_s)
