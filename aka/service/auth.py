"""Bearer tokens, scopes and the per-token rate limit of the service.

Owns token creation (shown once, stored as a SHA-256 hash), scope checks and a token bucket per
token, and the log filter that keeps a token sent in a URL (``?access_token=``, accepted by the
job page only) out of the access log. Must not know routes: the app asks ``verify_token`` for a
scope.

Scopes: ``read`` (list and follow jobs, fetch kernels and reports, search the KB), ``submit``
(create jobs and evaluations, cancel jobs), ``custom-code`` (submit a problem or candidate whose
code is inline: it runs in sandboxed workers, but it is still code from the caller), ``admin``
(see every token's jobs).
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import threading
import time
from dataclasses import dataclass
from urllib.parse import unquote_plus

from aka.core import AuthError, SpecError
from aka.service.store import JobStore, TokenRow

__all__ = [
    "QUERY_TOKEN",
    "SCOPES",
    "QueryTokenRedactor",
    "RateLimiter",
    "create_token",
    "hash_token",
    "parse_scopes",
    "redact_query_token",
    "verify_token",
]

SCOPES = frozenset({"read", "submit", "custom-code", "admin"})
_PREFIX = "aka_"
QUERY_TOKEN = "access_token"  # RFC 6750 section 2.3: the token as a URI query parameter
_QUERY_PAIR = re.compile(r"([?&;])([^=&;?#\s\"]*)=([^&;#\s\"]*)")


def hash_token(token: str) -> str:
    """The stored form of a token: its SHA-256 (tokens are 256-bit random, so no salt is needed)."""
    return hashlib.sha256(token.encode()).hexdigest()


def parse_scopes(text: str) -> frozenset[str]:
    """``"read,submit"`` -> the scopes, each checked.

    Raises:
        SpecError: An unknown scope, or none (names the known ones).
    """
    scopes = frozenset(s.strip() for s in text.split(",") if s.strip())
    unknown = scopes - SCOPES
    if unknown or not scopes:
        raise SpecError(
            f"unknown or no scopes {sorted(unknown) or text!r}; choose from {sorted(SCOPES)}",
            field="--scopes",
        )
    return scopes


def create_token(store: JobStore, name: str, scopes: frozenset[str]) -> tuple[str, TokenRow]:
    """Make a token, store its hash; return the token (shown once) and its row."""
    token = _PREFIX + secrets.token_urlsafe(32)
    return token, store.add_token(hash_token(token), name, scopes)


def verify_token(store: JobStore, authorization: str | None, scope: str) -> TokenRow:
    """The token of an ``Authorization: Bearer ...`` header, if it is live and holds ``scope``.

    Raises:
        AuthError: 401 without a valid token, 403 without the scope.
    """
    if not authorization or not authorization.startswith("Bearer "):
        raise AuthError(
            "this route needs 'Authorization: Bearer <token>'; create one with "
            "`aka token create --scopes read,submit`"
        )
    token = store.token_by_hash(hash_token(authorization.removeprefix("Bearer ").strip()))
    if token is None or token.revoked:
        raise AuthError("the bearer token is unknown or revoked; create a new one")
    if scope not in token.scopes:
        raise AuthError(
            f"the token lacks the {scope!r} scope (it has {sorted(token.scopes)}); create one "
            f"with `aka token create --scopes {scope}`",
            status=403,
            code="auth.forbidden",
        )
    return token


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """A token bucket per API token: ``per_minute`` requests a minute, bursts up to that many."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def check(self, key: str) -> float | None:
        """Take one request from ``key``'s bucket; None if allowed, else seconds to wait."""
        rate = self.per_minute / 60.0
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.setdefault(key, _Bucket(float(self.per_minute), now))
            bucket.tokens = min(float(self.per_minute), bucket.tokens + (now - bucket.stamp) * rate)
            bucket.stamp = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return None
            return (1.0 - bucket.tokens) / rate


def redact_query_token(text: str) -> str:
    """``text`` with the value of every ``access_token=`` query parameter replaced.

    The name is compared after percent-decoding, as the server parses it, so ``access%5Ftoken``
    is redacted too.
    """

    def swap(m: re.Match[str]) -> str:
        if unquote_plus(m.group(2)) != QUERY_TOKEN:
            return m.group(0)
        return f"{m.group(1)}{m.group(2)}=[redacted]"

    return _QUERY_PAIR.sub(swap, text) if "=" in text else text


class QueryTokenRedactor(logging.Filter):
    """A log filter: redact ``access_token=`` values in a record's message and arguments.

    Installed on the ``uvicorn.access`` logger, whose records carry the request's path with its
    query string as an argument.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record in place; never drop it."""
        if isinstance(record.msg, str):
            record.msg = redact_query_token(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact_query_token(a) if isinstance(a, str) else a for a in record.args
            )
        elif isinstance(record.args, dict):
            record.args = {
                k: redact_query_token(v) if isinstance(v, str) else v
                for k, v in record.args.items()
            }
        return True
