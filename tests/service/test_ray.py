"""The job slots as Ray actors (``aka serve --ray``), on a real local Ray cluster.

One ``ray start --head`` on 127.0.0.1 (tests/fakes/ray_cluster.py) and one
``aka serve --ray 127.0.0.1:<port>`` (one CPU actor, two attempts a job) serve the module's
cluster tests, driven over HTTP. Their runner, ``by_model``, crashes its job process, sleeps, or
runs the real agent with the fake evaluator, as the request's ``model`` says. The cluster costs
about 5 s to start and the server about 5 s more.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aka.core import ConfigError, ServiceConfig, Settings
from aka.service import Dispatcher, LocalExecutor, RayExecutor, make_executor
from tests.fakes.ray_cluster import RAY_TEST_ENV, ray_cluster
from tests.fakes.service_server import REPO, Server, _free_port, start_server, stop_server

pytestmark = pytest.mark.integration
needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="ray is not installed (pip install 'aka[ray]'): no cluster to run the actors on",
)
JOB = {"operator": "rms_norm", "shapes": ["0"], "budget": {"max_iters": 1}}


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    with ray_cluster() as address:
        yield address


def _start(tmp: Path, address: str) -> Server:
    return start_server(tmp, "by_model", "--ray", address, AKA_SERVICE__MAX_ATTEMPTS="2",
                        AKA_SERVICE__RATE_LIMIT_PER_MINUTE="100000", **RAY_TEST_ENV)  # fmt: skip


@pytest.fixture(scope="module")
def server(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = _start(tmp_path_factory.mktemp("ray"), cluster)
    yield s
    stop_server(s)


def _wait(client: httpx.Client, job_id: str, until: str = "final", timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = client.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        job = r.json()
        if job["status"] == until or (until == "final" and job["status"] in
                                      ("succeeded", "failed", "cancelled")):  # fmt: skip
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} not {until} in {timeout_s} s: {job}")


def _events(
    client: httpx.Client, job_id: str, stop_at: str | None = None, nth: int = 1
) -> list[dict]:
    """A job's events (SSE) as {event, data}: to the end, or to the ``nth`` stage ``stop_at``."""
    events: list[dict] = []
    with client.stream("GET", f"/v1/jobs/{job_id}/events") as r:
        kind = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append({"event": kind, "data": json.loads(line.removeprefix("data: "))})
                if stop_at is not None and events[-1]["data"].get("stage") == stop_at:
                    nth -= 1
                    if nth == 0:
                        break
    return events


def _statuses(events: list[dict]) -> list[dict]:
    return [e["data"] for e in events if e["event"] == "status"]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return not Path(f"/proc/{pid}/stat").read_text().split(")")[-1].startswith(" Z")
    except FileNotFoundError:
        return False


def _gone(pid: int, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@needs_ray
def test_a_job_runs_on_a_ray_actor_with_its_events(server: Server) -> None:
    client = server.client(server.token("read,submit"))
    job_id = client.post("/v1/jobs", json=JOB).json()["id"]
    events = _events(client, job_id)
    running = [s for s in _statuses(events) if s["status"] == "running"]
    assert len(running) == 1 and running[0]["worker"].startswith("ray:"), running
    actor_pid = int(running[0]["worker"].split(":")[2])
    assert actor_pid != server.proc.pid and _alive(actor_pid)  # the actor, not the server
    assert any(e["event"] == "progress" and e["data"]["source"] == "agent" for e in events)
    assert events[-1] == {"event": "end", "data": {"status": "succeeded"}}
    job = _wait(client, job_id)
    assert job["status"] == "succeeded" and job["attempts"] == 1
    assert job["result"]["produced_kernel"] is True
    assert "class ModelNew" in client.get(f"/v1/jobs/{job_id}/kernel").text


@needs_ray
def test_a_crashing_job_is_retried_then_failed_and_the_actor_keeps_serving(
    server: Server,
) -> None:
    client = server.client(server.token("read,submit"))
    crash = client.post("/v1/jobs", json={**JOB, "model": "crash"}).json()["id"]
    job = _wait(client, crash)
    assert job["status"] == "failed" and job["attempts"] == 2, job
    assert "exit code 9" in job["error"] and "2 attempts" in job["error"]
    statuses = _statuses(_events(client, crash))
    assert [(s["status"], s.get("attempt")) for s in statuses] == [
        ("queued", None), ("running", 1), ("queued", None), ("running", 2), ("failed", None)
    ]  # fmt: skip
    assert statuses[2]["error"] == "attempt 1 died (exit code 9); retrying"
    workers = {s["worker"] for s in statuses if s["status"] == "running"}
    ok = client.post("/v1/jobs", json=JOB).json()["id"]
    assert _wait(client, ok)["status"] == "succeeded"
    after = {s["worker"] for s in _statuses(_events(client, ok)) if s["status"] == "running"}
    assert after == workers and len(workers) == 1  # the same actor ran all three attempts


@needs_ray
def test_cancel_stops_the_job_on_its_actor(server: Server) -> None:
    client = server.client(server.token("read,submit"))
    slow = client.post("/v1/jobs", json={**JOB, "model": "slow"}).json()["id"]
    events = _events(client, slow, stop_at="sleeping")
    sleeping, worker = events[-1]["data"], _statuses(events)[-1]["worker"]
    assert _alive(sleeping["pid"])
    assert client.post(f"/v1/jobs/{slow}/cancel").status_code == 202
    job = _wait(client, slow, timeout_s=30)
    assert job["status"] == "cancelled" and job["error"] == "cancelled on request"
    assert _gone(sleeping["pid"])  # the job's process, on the actor's host
    ok = client.post("/v1/jobs", json=JOB).json()["id"]
    assert _wait(client, ok)["status"] == "succeeded"
    # the actor killed its job and kept serving (no new actor was needed)
    assert [s["worker"] for s in _statuses(_events(client, ok)) if "worker" in s] == [worker]


@needs_ray
def test_an_actor_that_dies_costs_an_attempt_and_is_replaced(server: Server) -> None:
    client = server.client(server.token("read,submit"))
    slow = client.post("/v1/jobs", json={**JOB, "model": "slow"}).json()["id"]
    events = _events(client, slow, stop_at="sleeping")
    job_pid = events[-1]["data"]["pid"]
    first = [s for s in _statuses(events) if s["status"] == "running"][-1]["worker"]
    os.kill(int(first.split(":")[2]), signal.SIGKILL)  # the actor's process, not the job's
    assert _gone(job_pid)  # the job process dies with its actor (its watchdog)
    deadline = time.monotonic() + 30
    while (job := client.get(f"/v1/jobs/{slow}").json())["attempts"] < 2:
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
    statuses = _statuses(_events(client, slow, stop_at="sleeping", nth=2))
    assert statuses[2]["status"] == "queued"
    assert statuses[2]["error"].startswith("attempt 1 died (its Ray actor died: ")
    second = statuses[3]["worker"]
    assert statuses[3]["attempt"] == 2 and second.startswith("ray:") and second != first
    assert client.post(f"/v1/jobs/{slow}/cancel").status_code == 202
    assert _wait(client, slow, timeout_s=30)["status"] == "cancelled"
    ok = client.post("/v1/jobs", json=JOB).json()["id"]
    assert _wait(client, ok)["status"] == "succeeded"


@needs_ray
def test_a_killed_server_takes_its_actors_jobs_along_and_the_next_one_recovers_them(
    cluster: str, server: Server, tmp_path: Path
) -> None:
    first = _start(tmp_path, cluster)  # beside the module's server: one CPU actor each
    client = first.client(first.token("read,submit"))
    slow = client.post("/v1/jobs", json={**JOB, "model": "slow"}).json()["id"]
    job_pid = _events(client, slow, stop_at="sleeping")[-1]["data"]["pid"]
    stop_server(first, signal.SIGKILL)  # no shutdown hook runs
    assert _gone(job_pid, 30)  # Ray kills a dead driver's actors; the job dies with its actor
    second = _start(tmp_path, cluster)
    try:
        client = second.client(client.headers["Authorization"].split()[-1])
        statuses = _statuses(_events(client, slow, stop_at="sleeping", nth=2))
        assert statuses[-2]["status"] == "queued" and statuses[-2]["recovered"] is True
        assert statuses[-1]["attempt"] == 1 and statuses[-1]["worker"].startswith("ray:")
        assert client.post(f"/v1/jobs/{slow}/cancel").status_code == 202
        assert _wait(client, slow, timeout_s=30)["status"] == "cancelled"
    finally:
        stop_server(second)


def _serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **RAY_TEST_ENV, "COLUMNS": "400",
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "AKA_SERVICE__DATA_DIR": str(tmp_path / "service"), **env}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "aka", "serve", "--port", str(_free_port()), *args],
        env=full, cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_ray_client_address_with_the_sqlite_store_is_refused(tmp_path: Path) -> None:
    done = _serve(tmp_path, "--ray", "ray://127.0.0.1:10001")
    message = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr[-3000:]
    assert "service.database_url" in message and "AKA_SERVICE__DATABASE_URL" in message
    assert "SQLite" in message and "ray://127.0.0.1:10001" in message


@needs_ray
def test_an_address_where_no_cluster_answers_is_refused_at_once(tmp_path: Path) -> None:
    done = _serve(tmp_path, "--ray", f"127.0.0.1:{_free_port()}")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "no Ray cluster answers" in " ".join(done.stderr.split())


def test_serve_with_ray_but_no_ray_installed_says_how_to_install_it(tmp_path: Path) -> None:
    shadow = tmp_path / "no-ray"
    (shadow / "ray").mkdir(parents=True)
    (shadow / "ray" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'ray'\", name='ray')\n"
    )
    path = os.pathsep.join([str(shadow), str(REPO), os.environ.get("PYTHONPATH", "")])
    done = _serve(tmp_path, "--ray", "auto", PYTHONPATH=path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "pip install 'aka[ray]'" in " ".join(done.stderr.split())


def test_the_executor_follows_ray_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # local slots without asking torch

    def settings(**service: object) -> Settings:
        return Settings(service=ServiceConfig(data_dir=tmp_path, workers=1, **service))

    assert isinstance(make_executor(settings()), LocalExecutor)
    assert isinstance(Dispatcher(settings()).executor, LocalExecutor)
    on_cluster = make_executor(settings(ray_address="127.0.0.1:6379"))
    assert isinstance(on_cluster, RayExecutor) and on_cluster.address == "127.0.0.1:6379"
    assert on_cluster.ray is None  # nothing connects before the dispatcher starts
    assert isinstance(Dispatcher(settings(ray_address="auto")).executor, RayExecutor)
    with pytest.raises(ConfigError, match="service.database_url"):
        make_executor(settings(ray_address="ray://head:10001"))  # SQLite: refused
    shared = settings(ray_address="ray://head:10001", database_url="postgresql://u@db/aka")
    assert isinstance(make_executor(shared), RayExecutor)
