"""The service under load, under fuzzing and under crashing jobs (issue #8 point 6).

All against a real ``aka serve`` on 127.0.0.1 (tests/fakes/service_server.py); jobs run the real
service runner and agent graph with the fake evaluator.
"""

from __future__ import annotations

import json
import string
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes.service_server import Server, start_server, stop_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLIENTS = 50


def _client_session(url: str, token: str, n: int) -> tuple[str, list[int]]:
    """One client: submit a job, poll it to the end; return its id and every status code seen."""
    codes: list[int] = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                      timeout=60.0) as c:  # fmt: skip
        r = c.post("/v1/jobs", json={"operator": "rms_norm", "shapes": ["0"],
                                     "budget": {"max_iters": 1}},
                   headers={"Idempotency-Key": f"client-{n}"})  # fmt: skip
        codes.append(r.status_code)
        job_id = r.json()["id"]
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            r = c.get(f"/v1/jobs/{job_id}")
            codes.append(r.status_code)
            if r.json()["status"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.2)
        return job_id, codes


def test_fifty_concurrent_clients_lose_no_job_and_see_no_5xx(tmp_path: Path) -> None:
    server = start_server(
        tmp_path, "run_job", AKA_SERVICE__WORKERS="3", AKA_SERVICE__RATE_LIMIT_PER_MINUTE="100000"
    )
    try:
        token = server.token("read,submit")
        started = time.monotonic()
        with ThreadPoolExecutor(CLIENTS) as pool:
            sessions = list(
                pool.map(lambda n: _client_session(server.url, token, n), range(CLIENTS))
            )
        wall_s = time.monotonic() - started
        ids = [job_id for job_id, _ in sessions]
        codes = [code for _, cs in sessions for code in cs]
        assert len(set(ids)) == CLIENTS  # one job per client, none merged or lost
        assert not [c for c in codes if c >= 500]
        client = server.client(token)
        jobs = {j["id"]: j for j in client.get("/v1/jobs", params={"limit": 1000}).json()["jobs"]}
        assert set(jobs) == set(ids)
        assert {j["status"] for j in jobs.values()} == {"succeeded"}, wall_s
        assert all(j["attempts"] == 1 for j in jobs.values())
    finally:
        stop_server(server)


def test_twenty_crashing_jobs_in_a_row_leave_the_service_serving(tmp_path: Path) -> None:
    server = start_server(tmp_path, "crash_always", AKA_SERVICE__MAX_ATTEMPTS="1",
                          AKA_SERVICE__RATE_LIMIT_PER_MINUTE="100000")  # fmt: skip
    try:
        client = server.client(server.token("read,submit"))
        ids = [client.post("/v1/jobs", json={"operator": "rms_norm"}).json()["id"]
               for _ in range(20)]  # fmt: skip
        for job_id in ids:
            deadline = time.monotonic() + 120
            while (job := client.get(f"/v1/jobs/{job_id}").json())["status"] != "failed":
                assert time.monotonic() < deadline, job
                time.sleep(0.1)
            assert "exit code 9" in job["error"]
        ready = client.get("/readyz").json()
        assert ready == {"status": "ready", "queued": 0, "running": 0}
    finally:
        stop_server(server)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=4),
    max_leaves=12,
)  # fmt: skip
_KEYS = ["operator", "suite", "problem", "shapes", "dsl", "budget", "model", "device",
         "candidate", "format", "source", "max_iters"]  # fmt: skip
_BODY = st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=8), _JSON, max_size=6)
_SEGMENT = st.text(string.ascii_letters + string.digits + "-_.%~", min_size=1, max_size=12)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(tmp_path_factory.mktemp("fuzz"), "slow", "--no-jobs",
                          AKA_SERVICE__RATE_LIMIT_PER_MINUTE="1000000")  # fmt: skip
    yield server
    stop_server(server)


_FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_FUZZ
@given(body=_BODY, route=st.sampled_from(["/v1/jobs", "/v1/evaluations"]))
def test_fuzzed_bodies_never_get_a_server_error(
    fuzz_server: Server, body: dict, route: str
) -> None:
    client = _client(fuzz_server)
    r = client.post(route, content=json.dumps(body), headers={"Content-Type": "application/json"})
    assert r.status_code < 500, (body, r.text)
    assert r.status_code in (202, 403, 413, 422), (body, r.status_code, r.text)
    assert set(r.json()) >= ({"id", "status"} if r.status_code == 202 else {"code", "message"})


@_FUZZ
@given(
    method=st.sampled_from(["GET", "POST"]),
    path=st.lists(_SEGMENT, min_size=1, max_size=4).map(lambda parts: "/v1/" + "/".join(parts)),
    query=st.dictionaries(st.sampled_from(["status", "limit", "after", "q", "k", "format"]),
                          st.text(max_size=12), max_size=3),
)  # fmt: skip
def test_fuzzed_paths_and_queries_never_get_a_server_error(
    fuzz_server: Server, method: str, path: str, query: dict
) -> None:
    client = _client(fuzz_server)
    r = client.request(method, path, params=query)
    assert r.status_code < 500 or r.json()["code"] == "kb.index_not_built", (path, r.text)


_CLIENTS: dict[str, httpx.Client] = {}


def _client(server: Server) -> httpx.Client:
    """One client per server for all examples (stop_server closes it)."""
    if server.url not in _CLIENTS:
        _CLIENTS[server.url] = server.client(server.token("read,submit,custom-code"))
    return _CLIENTS[server.url]


def test_one_job_end_to_end_in_cpu_mode_with_the_real_scorer(tmp_path: Path) -> None:
    """The default runner: the real agent, the real scorer's CPU workers (Triton's interpreter)."""
    server = start_server(
        tmp_path, "run_job", AKA_SERVICE__RUNNER="aka.service.runner:run_job",
        AKA_SERVICE__USE_KB="false",
    )  # fmt: skip
    try:
        client = server.client(server.token("read,submit"))
        r = client.post(
            "/v1/jobs",
            json={
                "operator": "rms_norm",
                "shapes": ["0"],
                "budget": {"max_iters": 1},
                "device": "cpu",
            },
        )
        job_id = r.json()["id"]
        deadline = time.monotonic() + 600
        while (job := client.get(f"/v1/jobs/{job_id}").json())["status"] not in (
            "succeeded",
            "failed",
            "cancelled",
        ):
            assert time.monotonic() < deadline, job
            time.sleep(0.5)
        assert job["status"] == "succeeded", job
        assert job["result"]["mode"] == "cpu_interpreter"
        assert job["result"]["performance_measured"] is False
        assert job["result"]["produced_kernel"] is True
        kernel = client.get(f"/v1/jobs/{job_id}/kernel")
        assert kernel.status_code == 200 and "triton" in kernel.text
    finally:
        stop_server(server)
