"""A throwaway local Ray cluster for tests: a real ``ray start --head`` reached at 127.0.0.1.

``ray_cluster()`` runs ``ray start --head --block`` (2 CPUs, no GPU, no dashboard, no usage stats,
free ports, its own temp dir) in a session of its own and yields ``127.0.0.1:<port>``. At the end
it sends SIGTERM to that one process, which stops every Ray process it started (``--block``'s
shutdown), then SIGKILLs by pid whatever of its session is still alive. It does not use
``ray stop``, which stops every Ray cluster of the machine's user, not only this one. Skips the
test when Ray is not installed.

Ray registers the node under the host's address (it resolves 127.0.0.1 to a reachable one), but
every port listens on all interfaces, so 127.0.0.1 reaches it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Set in every process a Ray test starts (the cluster and the server that drives it).
RAY_TEST_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session_pids(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) == sid:
                pids.append(int(entry.name))
        except (ProcessLookupError, PermissionError):
            continue
    return pids


@contextmanager
def ray_cluster(num_cpus: int = 2) -> Iterator[str]:
    """Start a one-node Ray cluster; yield its address (``127.0.0.1:<port>``)."""
    ray_bin = Path(sys.executable).with_name("ray")
    if not ray_bin.is_file():
        pytest.skip("ray is not installed (pip install 'aka[ray]')")
    port = _free_port()
    temp = Path(tempfile.mkdtemp(prefix="aka-ray-", dir="/tmp"))  # short: Ray's socket paths
    env = {
        **os.environ,
        **RAY_TEST_ENV,
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "CUDA_VISIBLE_DEVICES": "",
    }
    log = temp / "ray-start.log"
    args = [
        str(ray_bin), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
        "--port", str(port), "--num-cpus", str(num_cpus), "--num-gpus", "0",
        "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", str(temp),
        "--ray-client-server-port", str(_free_port()),
        "--dashboard-agent-listen-port", str(_free_port()),
    ]  # fmt: skip
    with log.open("wb") as sink:
        proc = subprocess.Popen(args, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while b"Ray runtime started" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        deadline = time.monotonic() + 15  # workers exit once their raylet is gone
        while (left := _session_pids(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"Ray processes still ran 15 s after SIGTERM (now killed): {left}"
