"""Bearer tokens, scopes and the per-token rate limit of the service.

Owns token creation (shown once, stored as a SHA-256 hash), scope checks and a token bucket per
token. Must not know routes: the app asks ``authorize`` for a scope.

Scopes: ``read`` (list and follow jobs, fetch kernels and reports, search the KB), ``submit``
(create jobs and evaluations, cancel jobs), ``custom-code`` (submit a problem or candidate whose
code is inline: it runs in sandboxed workers, but it is still code from the caller), ``admin``
(see every token's jobs).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass

from aka.core import AuthError, SpecError
from aka.service.store import JobStore, TokenRow

__all__ = [
    "SCOPES",
    "RateLimiter",
    "create_token",
    "hash_token",
    "parse_scopes",
    "verify_token",
]

SCOPES = frozenset({"read", "submit", "custom-code", "admin"})
_PREFIX = "aka_"


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
