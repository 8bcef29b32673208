"""A real ``aka serve`` process on 127.0.0.1 for tests, with jobs run by a fake-evaluator runner.

``start_server(tmp, runner)`` starts it (``runner`` names a function of
``tests/fakes/service_runner.py``) and waits for ``/healthz``; ``Server.token(scopes)`` makes a
token through ``aka token create``; ``stop_server`` stops it (SIGKILL to simulate a crash).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A running ``aka serve`` and how to reach it."""

    url: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    log: Path
    clients: list[httpx.Client] = field(default_factory=list)

    def token(self, scopes: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "aka", "token", "create", "--scopes", scopes],
            env=self.env, capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        return done.stdout.strip().splitlines()[-1].split()[-1]

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=30.0)
        self.clients.append(client)
        return client


def start_server(tmp: Path, runner: str = "run_job", *args: str, **env: str) -> Server:
    port = _free_port()
    full = {
        **os.environ,
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "AKA_SERVICE__DATA_DIR": str(tmp / "service"),
        "AKA_SERVICE__PORT": str(port),
        "AKA_SERVICE__WORKERS": "1",
        "AKA_SERVICE__POLL_INTERVAL_S": "0.05",
        "AKA_SERVICE__RUNNER": f"tests.fakes.service_runner:{runner}",
        "AKA_PATHS__RUNS_DIR": str(tmp / "runs"),
        "CUDA_VISIBLE_DEVICES": "",
        **env,
    }
    log = tmp / f"server-{port}.log"
    tmp.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "aka", "serve", *args], env=full, cwd=REPO,
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"aka serve exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return Server(url, full, proc, log)
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"aka serve did not answer in 60 s:\n{log.read_text()[-3000:]}")


def stop_server(server: Server, sig: int = signal.SIGTERM) -> None:
    for client in server.clients:
        client.close()
    if server.proc.poll() is None:
        os.killpg(server.proc.pid, sig)
        server.proc.wait(30)
