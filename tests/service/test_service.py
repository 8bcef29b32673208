"""The service end to end: ``aka serve`` as a real process on 127.0.0.1, driven over HTTP.

Jobs run the real service runner and agent graph in their own processes; the evaluator is
``SyntheticScorer`` (tests/fakes/service_runner.py), so a job takes about a second on a CPU.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aka.service import gpu_slots
from aka.service.auth import RateLimiter
from tests.fakes.service_server import Server, start_server, stop_server

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = start_server(tmp_path, "run_job")
    yield s
    stop_server(s)


def _wait(client: httpx.Client, job_id: str, timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish in {timeout_s} s: {job}")


def _sse(client: httpx.Client, job_id: str, headers: dict[str, str] | None = None) -> list[dict]:
    """Read a job's event stream to its end; each event as {id, event, data}."""
    events, current = [], {}
    with client.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers or {}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line:
                if current:
                    events.append(current)
                current = {}
            elif line.startswith(":"):
                continue
            else:
                key, _, value = line.partition(": ")
                current[key] = json.loads(value) if key == "data" else value
    return events


def test_every_route_but_healthz_needs_a_token(server: Server) -> None:
    anon = server.client(None)
    assert anon.get("/healthz").json() == {"status": "ok"}
    for method, path in [("GET", "/readyz"), ("GET", "/v1/jobs"), ("POST", "/v1/jobs"),
                         ("GET", "/v1/jobs/x"), ("GET", "/v1/jobs/x/events"),
                         ("GET", "/v1/jobs/x/kernel"), ("GET", "/v1/jobs/x/report"),
                         ("POST", "/v1/jobs/x/cancel"), ("POST", "/v1/evaluations"),
                         ("GET", "/v1/kb/search?q=x"), ("GET", "/ui/jobs/x")]:  # fmt: skip
        r = anon.request(method, path, json={})
        assert r.status_code == 401, (method, path, r.text)
        assert r.json()["code"] == "auth.unauthorized"
    bogus = server.client("aka_not-a-token")
    assert bogus.get("/v1/jobs").status_code == 401


def test_scopes_are_enforced_per_route(server: Server) -> None:
    reader = server.client(server.token("read"))
    assert reader.get("/v1/jobs").status_code == 200
    refused = reader.post("/v1/jobs", json={"operator": "rms_norm"})
    assert refused.status_code == 403 and "'submit'" in refused.json()["message"]
    submitter = server.client(server.token("read,submit"))
    inline = {"problem": {"format": "kernelbench", "source": "import torch\n"}}
    refused = submitter.post("/v1/jobs", json=inline)
    assert refused.status_code == 403 and "custom-code" in refused.json()["message"]


def test_a_job_runs_to_a_kernel_and_a_report_with_live_events(server: Server) -> None:
    client = server.client(server.token("read,submit"))
    r = client.post(
        "/v1/jobs", json={"operator": "rms_norm", "shapes": ["0", "1"], "budget": {"max_iters": 2}}
    )
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert r.json()["status"] == "queued" and r.json()["links"]["kernel"].endswith("/kernel")
    events = _sse(client, job_id)
    statuses = [e["data"]["status"] for e in events if e.get("event") == "status"]
    assert statuses[:2] == ["queued", "running"] and statuses[-1] == "succeeded"
    assert any(e.get("event") == "progress" and e["data"]["source"] == "agent" for e in events)
    assert events[-1]["event"] == "end" and events[-1]["data"] == {"status": "succeeded"}
    ids = [int(e["id"]) for e in events if "id" in e]
    assert ids == sorted(ids) and ids[0] == 1
    # resuming the stream after an event id sends only what came after it
    later = _sse(client, job_id, {"Last-Event-ID": str(ids[2])})
    assert [int(e["id"]) for e in later if "id" in e] == ids[3:]

    job = _wait(client, job_id)
    assert job["status"] == "succeeded" and job["attempts"] == 1
    assert job["result"]["produced_kernel"] is True and job["result"]["candidates"] == 2
    kernel = client.get(f"/v1/jobs/{job_id}/kernel")
    assert kernel.status_code == 200 and "class ModelNew" in kernel.text
    report = client.get(f"/v1/jobs/{job_id}/report")
    assert report.status_code == 200 and report.headers["content-type"].startswith("text/markdown")
    record = client.get(f"/v1/jobs/{job_id}/report", params={"format": "json"}).json()
    assert record["run_id"] == job_id and len(record["candidates"]) == 2
    # the shapes filter reached the problem the job ran
    problem = (server.env["AKA_SERVICE__DATA_DIR"], "jobs", job_id, "problem", "rms_norm")
    assert (
        "'0'" in Path(*problem, "op.yaml").read_text()
        or "id: '0'" in Path(*problem, "op.yaml").read_text()
    )
    assert [j["id"] for j in client.get("/v1/jobs").json()["jobs"]] == [job_id]


def test_bad_requests_say_what_to_fix(server: Server) -> None:
    client = server.client(server.token("read,submit,custom-code"))
    r = client.post("/v1/jobs", json={"operator": "no_such_op"})
    assert r.status_code == 422 and "rms_norm" in r.json()["message"]
    r = client.post("/v1/jobs", json={"operator": "rms_norm", "shapes": ["nope"]})
    assert r.status_code == 422 and r.json()["code"] == "spec.invalid" and "nope" in r.text
    r = client.post("/v1/jobs", json={"operator": "rms_norm", "budget": {"max_iters": 0}})
    assert r.status_code == 422 and r.json()["code"] == "request.invalid"
    assert "max_iters" in r.json()["message"]
    r = client.post("/v1/jobs", json={})
    assert r.status_code == 422 and "exactly one" in r.json()["message"]
    assert client.get("/v1/jobs/nope").status_code == 404
    big = {"problem": {"format": "kernelbench", "source": "#" * 2_000_000}}
    r = client.post("/v1/jobs", json=big)
    assert r.status_code == 413 and r.json()["code"] == "request.too_large"


def test_an_idempotency_key_returns_the_first_job(server: Server) -> None:
    client = server.client(server.token("read,submit"))
    body = {"operator": "rms_norm", "shapes": ["0"], "budget": {"max_iters": 1}}
    first = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k1"})
    again = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    changed = {**body, "shapes": ["1"]}
    other = client.post("/v1/jobs", json=changed, headers={"Idempotency-Key": "k1"})
    assert other.status_code == 422 and "Idempotency-Key" in other.json()["message"]
    # another token's key space is its own, and it cannot see the first token's job
    stranger = server.client(server.token("read,submit"))
    assert stranger.get(f"/v1/jobs/{first.json()['id']}").status_code == 404
    mine = stranger.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k1"})
    assert mine.json()["id"] != first.json()["id"]
    _wait(client, first.json()["id"])
    _wait(stranger, mine.json()["id"])


def test_the_openapi_schema_lists_every_route_with_examples(server: Server) -> None:
    schema = server.client(None).get("/openapi.json").json()
    paths = schema["paths"]
    for path in ["/healthz", "/readyz", "/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/events",
                 "/v1/jobs/{job_id}/kernel", "/v1/jobs/{job_id}/report",
                 "/v1/jobs/{job_id}/cancel", "/v1/evaluations", "/v1/kb/search",
                 "/ui/jobs/{job_id}"]:  # fmt: skip
        assert path in paths, path
    assert schema["components"]["schemas"]["JobRequest"]["examples"]
    assert "401" in paths["/v1/jobs"]["post"]["responses"]


def test_a_crashed_job_process_is_retried_then_fails(tmp_path: Path) -> None:
    once = start_server(tmp_path / "a", "crash_once")
    try:
        client = once.client(once.token("read,submit"))
        job_id = client.post("/v1/jobs", json={"operator": "rms_norm", "budget": {"max_iters": 1}}
                             ).json()["id"]  # fmt: skip
        job = _wait(client, job_id)
        assert job["status"] == "succeeded" and job["attempts"] == 2
    finally:
        stop_server(once)
    always = start_server(tmp_path / "b", "crash_always", AKA_SERVICE__MAX_ATTEMPTS="2")
    try:
        client = always.client(always.token("read,submit"))
        ids = [client.post("/v1/jobs", json={"operator": "rms_norm"}).json()["id"]
               for _ in range(3)]  # fmt: skip
        for job_id in ids:
            job = _wait(client, job_id)
            assert job["status"] == "failed" and job["attempts"] == 2
            assert "exit code 9" in job["error"]
        assert client.get("/readyz").json()["status"] == "ready"  # still serving
    finally:
        stop_server(always)


def test_cancel_stops_a_running_job_and_a_queued_one(tmp_path: Path) -> None:
    s = start_server(tmp_path, "slow")
    try:
        client = s.client(s.token("read,submit"))
        running = client.post("/v1/jobs", json={"operator": "rms_norm"}).json()["id"]
        queued = client.post("/v1/jobs", json={"operator": "rms_norm"}).json()["id"]
        deadline = time.monotonic() + 60
        while client.get(f"/v1/jobs/{running}").json()["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert client.post(f"/v1/jobs/{queued}/cancel").json()["status"] == "cancelled"
        assert client.post(f"/v1/jobs/{running}/cancel").status_code == 202
        assert _wait(client, running, 30)["status"] == "cancelled"
    finally:
        stop_server(s)


def test_a_job_survives_a_server_kill_and_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    slow_rounds = {"AKA_TEST_ROUND_DELAY_S": "1.0"}
    first = start_server(tmp_path, "run_job", **slow_rounds)
    client = first.client(first.token("read,submit"))
    job_id = client.post("/v1/jobs", json={"operator": "rms_norm", "shapes": ["0"],
                                           "budget": {"max_iters": 4}}).json()["id"]  # fmt: skip
    deadline = time.monotonic() + 60
    while not any(e.data.get("stage") == "evaluate" for e in _events_in_store(first, job_id)):
        assert time.monotonic() < deadline, "the job never reached its first evaluation"
        time.sleep(0.1)
    stop_server(first, signal.SIGKILL)  # no shutdown hook runs
    second = start_server(tmp_path, "run_job", **slow_rounds)
    try:
        client = second.client(client.headers["Authorization"].split()[-1])
        job = _wait(client, job_id)
        assert job["status"] == "succeeded", job
        assert job["result"]["candidates"] == 4
        stages = [e.data.get("stage") for e in _events_in_store(second, job_id)]
        assert "resume" in stages
    finally:
        stop_server(second)


def _events_in_store(server: Server, job_id: str) -> list:
    from aka.service.store import JobStore

    return JobStore(Path(server.env["AKA_SERVICE__DATA_DIR"]) / "service.sqlite").events(job_id)


def test_the_rate_limiter_refills_at_its_rate() -> None:
    limiter = RateLimiter(per_minute=3)
    assert [limiter.check("t") for _ in range(3)] == [None, None, None]
    wait = limiter.check("t")
    assert wait is not None and 0 < wait <= 20.0
    assert limiter.check("other") is None  # buckets are per token


def test_an_evaluation_scores_one_candidate(server: Server) -> None:
    client = server.client(server.token("read,submit"))
    candidate = (REPO / "configs" / "examples" / "rms_norm" / "candidate.py").read_text()
    r = client.post("/v1/evaluations", json={"operator": "rms_norm", "candidate": candidate})
    assert r.status_code == 202 and r.json()["kind"] == "evaluate", r.text
    job = _wait(client, r.json()["id"])
    assert job["status"] == "succeeded", job
    assert job["result"]["verdict"] == "accepted" and job["result"]["shapes"]
    assert "kernel" not in job["links"]  # an evaluation produces a verdict, not a kernel


def test_a_job_runs_with_its_store_in_postgresql(tmp_path: Path) -> None:
    from tests.fakes.postgres import postgres_server

    with postgres_server() as url:
        s = start_server(tmp_path, "run_job", AKA_SERVICE__DATABASE_URL=url)
        try:
            client = s.client(s.token("read,submit"))
            job_id = client.post(
                "/v1/jobs",
                json={"operator": "rms_norm", "shapes": ["0"], "budget": {"max_iters": 1}},
            ).json()["id"]
            job = _wait(client, job_id)
            assert job["status"] == "succeeded", job
            assert "class ModelNew" in client.get(f"/v1/jobs/{job_id}/kernel").text
            events = _sse(client, job_id)
            assert events[-1]["data"] == {"status": "succeeded"}
            assert not (tmp_path / "service" / "service.sqlite").exists()  # nothing in SQLite
        finally:
            stop_server(s)


def test_one_slot_per_visible_gpu_runs_jobs_at_once_each_pinned(tmp_path: Path) -> None:
    # Fake GPUs: nothing in the fake runner touches CUDA, so the entries need not exist. The
    # parent's NCCL_NVLS_ENABLE=1 must not reach a job (multicast stays off everywhere).
    s = start_server(tmp_path, "pinned", AKA_SERVICE__WORKERS="auto",
                     CUDA_VISIBLE_DEVICES="3,5", NCCL_NVLS_ENABLE="1")  # fmt: skip
    try:
        client = s.client(s.token("read,submit"))
        ids = [client.post("/v1/jobs", json={"operator": "rms_norm"}).json()["id"]
               for _ in range(2)]  # fmt: skip
        results = [_wait(client, job_id)["result"] for job_id in ids]
    finally:
        stop_server(s)
    assert sorted(r["visible"] for r in results) == ["3", "5"]
    assert all(r["nvls"] == "0" and r["symm_multicast_off"] == "1" for r in results)
    (a0, a1), (b0, b1) = (r["interval"] for r in results)
    assert min(a1, b1) > max(a0, b0)  # the two jobs held their slots at the same time


@pytest.mark.parametrize(
    ("visible", "workers", "slots"),
    [("0,1", "auto", ["0", "1"]), ("0,-1,1", "auto", ["0"]), ("", "auto", [None]),
     ("-1", 2, [None, None]), ("2,3", 3, ["2", "3", "2"]),
     ("GPU-8f2e,GPU-11aa", "auto", ["GPU-8f2e", "GPU-11aa"])],
)  # fmt: skip
def test_gpu_slots_follow_cuda_visible_devices_as_cuda_reads_it(
    monkeypatch: pytest.MonkeyPatch, visible: str, workers: int | str, slots: list[str | None]
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpu_slots(workers) == slots
