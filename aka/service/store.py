"""The service's durable state: jobs, their progress events, and API tokens.

Owns the schema and every query, for two databases: SQLite (the default, one file; WAL mode, so
readers never wait on the one writer and the app, the dispatcher and the job processes share it
safely) and PostgreSQL (``postgresql://...``, for API servers on several hosts sharing one store;
claims use ``FOR UPDATE SKIP LOCKED``). Each thread opens its own connection. Must not run jobs
or know HTTP.

A job moves ``queued`` -> ``running`` -> ``succeeded`` | ``failed`` | ``cancelled``. A job whose
process dies goes back to ``queued`` until it has used ``max_attempts``; a server that stops with
jobs ``running`` puts them back to ``queued`` when it starts again (``recover``), and their next
attempt resumes from the run's checkpoint.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from aka.core import NotFoundError, ServiceConfig, SpecError

__all__ = ["EventRow", "JobRow", "JobStatus", "JobStore", "TokenRow", "open_store"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    token_id TEXT NOT NULL,
    idempotency_key TEXT,
    request TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    result TEXT,
    error TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idempotency ON jobs (token_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs (status, created_at);
CREATE TABLE IF NOT EXISTS events (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
);
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    scopes TEXT NOT NULL,
    created_at TEXT NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0
);
"""


class _PgConnection:
    """A psycopg connection that takes SQLite's ``?`` placeholders."""

    _PLACEHOLDER = re.compile(r"\?")

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.conn.execute(self._PLACEHOLDER.sub("%s", sql), params)

    def close(self) -> None:
        self.conn.close()


def open_store(service: ServiceConfig) -> JobStore:
    """The store a ``ServiceConfig`` names: its ``database_url``, else SQLite in its data dir."""
    if service.database_url is not None:
        return JobStore(service.database_url.get_secret_value())
    return JobStore(service.resolved_data_dir() / "service.sqlite")


class JobStatus(StrEnum):
    """Where a job is in its life."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        """Whether the job will not change any more."""
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True)
class JobRow:
    """One job as stored."""

    id: str
    kind: str
    status: JobStatus
    token_id: str
    idempotency_key: str | None
    request: dict[str, Any]
    created_at: str
    updated_at: str
    started_at: str | None
    finished_at: str | None
    attempts: int
    cancel_requested: bool
    worker: str | None
    result: dict[str, Any] | None
    error: str | None


@dataclass(frozen=True)
class EventRow:
    """One progress event of a job; ``seq`` counts from 1 per job (the SSE event id)."""

    job_id: str
    seq: int
    created_at: str
    kind: str
    data: dict[str, Any]


@dataclass(frozen=True)
class TokenRow:
    """An API token as stored: only its hash, never the token."""

    id: str
    name: str
    scopes: frozenset[str]
    created_at: str
    revoked: bool


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _job(row: Any) -> JobRow:
    return JobRow(
        id=row["id"],
        kind=row["kind"],
        status=JobStatus(row["status"]),
        token_id=row["token_id"],
        idempotency_key=row["idempotency_key"],
        request=json.loads(row["request"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        attempts=row["attempts"],
        cancel_requested=bool(row["cancel_requested"]),
        worker=row["worker"],
        result=json.loads(row["result"]) if row["result"] else None,
        error=row["error"],
    )


class JobStore:
    """Jobs, events and tokens in SQLite (a path) or PostgreSQL (a ``postgresql://`` URL).

    Safe to share across threads (a connection per thread) and processes (the database's own
    locking). SQL is written once with ``?`` placeholders; PostgreSQL gets ``%s``.
    """

    def __init__(self, location: Path | str) -> None:
        text = str(location)
        self.postgres = text.startswith(("postgresql://", "postgres://"))
        self.location = text
        self._local = threading.local()
        if not self.postgres:
            Path(text).parent.mkdir(parents=True, exist_ok=True)
            self._db().executescript(_SCHEMA)  # executescript commits on its own
        else:
            with self._tx() as db:
                db.execute("SELECT pg_advisory_xact_lock(4242)")  # one creator at a time
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    db.execute(statement)

    @property
    def path(self) -> Path:
        """The SQLite file (not for PostgreSQL)."""
        return Path(self.location)

    def _db(self) -> Any:
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._connect()
            self._local.db = db
        return db

    def _connect(self) -> Any:
        if self.postgres:
            import psycopg
            from psycopg.rows import dict_row

            return _PgConnection(psycopg.connect(self.location, autocommit=True,
                                                 row_factory=dict_row))  # fmt: skip
        db = sqlite3.connect(self.location, timeout=30.0, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=30000")
        return db

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        """One write transaction, taken up front so claims cannot race (SQLite: BEGIN IMMEDIATE)."""
        db = self._db()
        db.execute("BEGIN" if self.postgres else "BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def close(self) -> None:
        """Close this thread's connection."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # ------------------------------------------------------------------ jobs
    def submit(
        self, kind: str, request: dict[str, Any], token_id: str, idempotency_key: str | None
    ) -> tuple[JobRow, bool]:
        """Queue a job; return it and whether it is new.

        With an idempotency key the token already used, the earlier job comes back (not new) when
        the request is the same, and a different request under the same key is refused.

        Raises:
            SpecError: The key was used for a different request.
        """
        body = json.dumps(request, sort_keys=True)
        with self._tx() as db:
            if idempotency_key is not None:
                old = db.execute(
                    "SELECT * FROM jobs WHERE token_id = ? AND idempotency_key = ?",
                    (token_id, idempotency_key),
                ).fetchone()
                if old is not None:
                    if old["request"] != body:
                        raise SpecError(
                            f"Idempotency-Key {idempotency_key!r} was used for another request "
                            f"(job {old['id']}); send a new key for a new job",
                            field="Idempotency-Key",
                        )
                    return _job(old), False
            job_id = uuid.uuid4().hex[:16]
            now = _now()
            db.execute(
                "INSERT INTO jobs (id, kind, status, token_id, idempotency_key, request, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, kind, JobStatus.QUEUED, token_id, idempotency_key, body, now, now),
            )
            self._append(db, job_id, "status", {"status": JobStatus.QUEUED})
        return self.get(job_id), True

    def get(self, job_id: str) -> JobRow:
        """Return a job.

        Raises:
            NotFoundError: No such job.
        """
        row = self._db().execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no job {job_id!r}; list jobs with GET /v1/jobs")
        return _job(row)

    def list_jobs(
        self, *, token_id: str | None = None, status: JobStatus | None = None, limit: int = 100
    ) -> list[JobRow]:
        """Jobs, newest first, optionally of one token or one status."""
        query, args = "SELECT * FROM jobs WHERE 1=1", list[Any]()
        if token_id is not None:
            query += " AND token_id = ?"
            args.append(token_id)
        if status is not None:
            query += " AND status = ?"
            args.append(str(status))
        query += " ORDER BY created_at DESC, id LIMIT ?"
        args.append(limit)
        return [_job(r) for r in self._db().execute(query, args).fetchall()]

    def count(self, status: JobStatus) -> int:
        """How many jobs are in ``status``."""
        row = self._db().execute("SELECT COUNT(*) AS n FROM jobs WHERE status = ?", (str(status),))
        return int(row.fetchone()["n"])

    def claim(self, worker: str, max_attempts: int) -> JobRow | None:
        """Take the oldest queued job for ``worker`` (one attempt more), or None if none waits."""
        with self._tx() as db:
            row = db.execute(
                "SELECT id, attempts FROM jobs WHERE status = ? ORDER BY created_at, id LIMIT 1"
                + (" FOR UPDATE SKIP LOCKED" if self.postgres else ""),
                (JobStatus.QUEUED,),
            ).fetchone()
            if row is None:
                return None
            now = _now()
            db.execute(
                "UPDATE jobs SET status = ?, worker = ?, attempts = attempts + 1, "
                "started_at = COALESCE(started_at, ?), updated_at = ? WHERE id = ?",
                (JobStatus.RUNNING, worker, now, now, row["id"]),
            )
            self._append(
                db,
                row["id"],
                "status",
                {"status": JobStatus.RUNNING, "attempt": row["attempts"] + 1, "worker": worker,
                 "max_attempts": max_attempts},
            )  # fmt: skip
        return self.get(row["id"])

    def finish(
        self,
        job_id: str,
        status: JobStatus,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """Put a job in a final state (or back to ``queued`` for another attempt)."""
        now = _now()
        final = status.final
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET status = ?, result = COALESCE(?, result), error = ?, "
                "updated_at = ?, finished_at = ?, worker = CASE WHEN ? THEN worker ELSE NULL END "
                "WHERE id = ?",
                (status, json.dumps(result) if result is not None else None, error, now,
                 now if final else None, final, job_id),
            )  # fmt: skip
            data: dict[str, Any] = {"status": status}
            if error:
                data["error"] = error
            self._append(db, job_id, "status", data)

    def request_cancel(self, job_id: str) -> JobRow:
        """Ask for a job to stop: a queued job is cancelled now, a running one by its worker.

        Raises:
            NotFoundError: No such job.
        """
        job = self.get(job_id)
        if job.status.final:
            return job
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET cancel_requested = 1, updated_at = ? WHERE id = ?",
                (_now(), job_id),
            )
            if job.status is JobStatus.QUEUED:
                db.execute(
                    "UPDATE jobs SET status = ?, finished_at = ? WHERE id = ? AND status = ?",
                    (JobStatus.CANCELLED, _now(), job_id, JobStatus.QUEUED),
                )
                self._append(db, job_id, "status", {"status": JobStatus.CANCELLED})
        return self.get(job_id)

    def recover(self) -> list[str]:
        """Put jobs left ``running`` by a stopped server back in the queue; return their ids.

        The attempt they were on is not counted against them: the job did not fail, the server
        went away.
        """
        rows = self._db().execute("SELECT id FROM jobs WHERE status = ?", (JobStatus.RUNNING,))
        ids = [r["id"] for r in rows.fetchall()]
        for job_id in ids:
            self.recover_one(job_id)
        return ids

    def recover_one(self, job_id: str) -> None:
        """Put one ``running`` job back in the queue without counting its attempt."""
        with self._tx() as db:
            done = db.execute(
                "UPDATE jobs SET status = ?, worker = NULL, "
                "attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, "
                "updated_at = ? WHERE id = ? AND status = ?",
                (JobStatus.QUEUED, _now(), job_id, JobStatus.RUNNING),
            )
            if done.rowcount:
                self._append(db, job_id, "status", {"status": JobStatus.QUEUED, "recovered": True})

    # ---------------------------------------------------------------- events
    def _append(self, db: Any, job_id: str, kind: str, data: dict[str, Any]) -> int:
        if self.postgres:  # serialise appends to one job (SQLite's BEGIN IMMEDIATE already does)
            db.execute("SELECT id FROM jobs WHERE id = ? FOR UPDATE", (job_id,))
        row = db.execute(
            "SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM events WHERE job_id = ?", (job_id,)
        ).fetchone()
        seq = int(row["seq"])
        db.execute(
            "INSERT INTO events (job_id, seq, created_at, kind, data) VALUES (?, ?, ?, ?, ?)",
            (job_id, seq, _now(), kind, json.dumps(data, default=str)),
        )
        return seq

    def add_event(self, job_id: str, kind: str, data: dict[str, Any]) -> int:
        """Append an event to a job; return its sequence number."""
        with self._tx() as db:
            return self._append(db, job_id, kind, data)

    def events(self, job_id: str, after: int = 0, limit: int = 500) -> list[EventRow]:
        """A job's events with ``seq`` greater than ``after``, oldest first."""
        rows = self._db().execute(
            "SELECT * FROM events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (job_id, after, limit),
        )
        return [
            EventRow(r["job_id"], r["seq"], r["created_at"], r["kind"], json.loads(r["data"]))
            for r in rows.fetchall()
        ]

    # ---------------------------------------------------------------- tokens
    def add_token(self, token_hash: str, name: str, scopes: frozenset[str]) -> TokenRow:
        """Store a token's hash and scopes; return its row."""
        token_id = uuid.uuid4().hex[:12]
        with self._tx() as db:
            db.execute(
                "INSERT INTO tokens (id, hash, name, scopes, created_at) VALUES (?, ?, ?, ?, ?)",
                (token_id, token_hash, name, ",".join(sorted(scopes)), _now()),
            )
        token = self.token_by_hash(token_hash)
        if token is None:  # pragma: no cover - the insert above committed
            raise NotFoundError(f"token {token_id} vanished after it was stored")
        return token

    def token_by_hash(self, token_hash: str) -> TokenRow | None:
        """The live or revoked token with this hash, if any."""
        row = self._db().execute("SELECT * FROM tokens WHERE hash = ?", (token_hash,)).fetchone()
        if row is None:
            return None
        return TokenRow(
            id=row["id"],
            name=row["name"],
            scopes=frozenset(s for s in row["scopes"].split(",") if s),
            created_at=row["created_at"],
            revoked=bool(row["revoked"]),
        )

    def revoke_token(self, token_id: str) -> None:
        """Revoke a token (it then gets 401 everywhere)."""
        with self._tx() as db:
            db.execute("UPDATE tokens SET revoked = 1 WHERE id = ?", (token_id,))
