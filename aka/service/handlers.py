"""The one place the service turns errors into HTTP responses (STYLE E5).

``AkaError`` -> ``{code, message}`` with: SpecError 422, NotFoundError 404, AuthError its own
401/403/400, HardwareError and IndexNotBuiltError 503 (the server cannot serve it yet: the message
says what to run), anything else 500. A request the API models reject is 422 ``request.invalid``.
Must not hold routes.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from aka.core import (
    AkaError,
    AuthError,
    HardwareError,
    IndexNotBuiltError,
    NotFoundError,
    SpecError,
)

__all__ = ["install_handlers", "status_of"]

logger = logging.getLogger(__name__)


def status_of(err: AkaError) -> int:
    """The HTTP status of an aka error."""
    if isinstance(err, AuthError):
        return err.status
    if isinstance(err, SpecError):
        return 422
    if isinstance(err, NotFoundError):
        return 404
    if isinstance(err, HardwareError | IndexNotBuiltError):
        return 503
    return 500


def install_handlers(app: FastAPI) -> None:
    """Register the error handlers on ``app``."""

    @app.exception_handler(AkaError)
    async def _aka(_: Request, err: AkaError) -> JSONResponse:
        status = status_of(err)
        if status >= 500:
            logger.error("request failed: %s: %s", err.code, err.message)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse(
            {"code": err.code, "message": err.message}, status_code=status, headers=headers
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        parts = []
        for e in err.errors()[:5]:
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
            parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
        return JSONResponse(
            {"code": "request.invalid", "message": "; ".join(parts) or "invalid request"},
            status_code=422,
        )

    @app.exception_handler(Exception)
    async def _internal(_: Request, err: Exception) -> JSONResponse:  # boundary (STYLE E4)
        logger.exception("unhandled error")
        return JSONResponse(
            {"code": "internal", "message": f"{type(err).__name__}; see the server log"},
            status_code=500,
        )
