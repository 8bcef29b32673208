"""The job store on both databases: SQLite (a file) and PostgreSQL (a real server, Debian's)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from aka.core import NotFoundError, SpecError
from aka.service.store import JobStatus, JobStore
from tests.fakes.postgres import postgres_server


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    if request.param == "sqlite":
        yield JobStore(tmp_path / "service.sqlite")
        return
    url = request.getfixturevalue("pg_url")
    s = JobStore(url)
    for table in ("events", "jobs", "tokens"):  # each test starts empty
        s._db().execute(f"DELETE FROM {table}")
    yield s
    s.close()


def test_submit_is_idempotent_per_token_and_key(store: JobStore) -> None:
    first, new = store.submit("optimize", {"operator": "rms_norm"}, "t1", "k")
    again, new_again = store.submit("optimize", {"operator": "rms_norm"}, "t1", "k")
    assert new and not new_again and again.id == first.id
    other, _ = store.submit("optimize", {"operator": "rms_norm"}, "t2", "k")
    assert other.id != first.id
    with pytest.raises(SpecError, match="Idempotency-Key"):
        store.submit("optimize", {"operator": "l2_norm"}, "t1", "k")
    with pytest.raises(NotFoundError):
        store.get("nope")
    assert [j.id for j in store.list_jobs(token_id="t1")] == [first.id]


def test_concurrent_claims_take_each_job_once(store: JobStore) -> None:
    ids = {store.submit("optimize", {"n": i}, "t", None)[0].id for i in range(24)}
    claimed: list[str] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        mine = JobStore(store.location)
        while (job := mine.claim(f"w{n}", 3)) is not None:
            with lock:
                claimed.append(job.id)
        mine.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(ids)  # every job once, none twice
    assert store.count(JobStatus.RUNNING) == 24 and store.count(JobStatus.QUEUED) == 0


def test_concurrent_events_get_consecutive_sequence_numbers(store: JobStore) -> None:
    job, _ = store.submit("optimize", {}, "t", None)

    def writer(n: int) -> None:
        mine = JobStore(store.location)
        for i in range(15):
            mine.add_event(job.id, "progress", {"writer": n, "i": i})
        mine.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = store.events(job.id)
    assert [e.seq for e in events] == list(range(1, 62))  # the submit's event, then 60
    assert [e.seq for e in store.events(job.id, after=50)] == list(range(51, 62))


def test_a_server_restart_requeues_running_jobs_without_charging_an_attempt(
    store: JobStore,
) -> None:
    job, _ = store.submit("optimize", {}, "t", None)
    claimed = store.claim("w", 3)
    assert claimed is not None and claimed.attempts == 1
    assert store.recover() == [job.id]
    back = store.get(job.id)
    assert back.status is JobStatus.QUEUED and back.attempts == 0
    store.finish(job.id, JobStatus.FAILED, error="boom")
    assert store.request_cancel(job.id).status is JobStatus.FAILED  # final stays final


def test_tokens_are_stored_as_hashes(store: JobStore) -> None:
    row = store.add_token("ab" * 32, "ci", frozenset({"read"}))
    found = store.token_by_hash("ab" * 32)
    assert found is not None and found.id == row.id and found.scopes == {"read"}
    store.revoke_token(row.id)
    revoked = store.token_by_hash("ab" * 32)
    assert revoked is not None and revoked.revoked
