"""A job submitted over HTTP to ``aka serve`` on the GPU, its kernel and report fetched over HTTP.

Issue #8's "done when": starts the real service (``python -m aka serve``, SQLite store in a temp
directory, one job slot per visible GPU), creates a bearer token with ``aka token create``, POSTs an
atrex30 operator with a few tune shapes and a small budget, follows the job's server-sent events to
the end, then GETs the job, its kernel and its report (Markdown and HTML). Prints a table of the
job's timings (queue wait, run time, wall time from POST to the last byte of the report) and writes
``service_gpu_<date>.json`` (device, versions, timings, the job's result, every event's kind and
time) plus the fetched kernel and report in ``service_gpu_<date>/`` (``kernel.py.txt``: a fetched
artifact, not project code; ``report.md``, ``report.html``).

    PYTHONPATH=$PWD python3 benchmarks/service_gpu.py --operator rms_norm --shapes 0,7 \
        --max-iters 2 --out $OUT

The agent runs offline (its search proposer: no LLM is reachable from the GPU machine) and without
the knowledge base (``AKA_SERVICE__USE_KB=false``: the GPU machine has no built index).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_token(env: dict[str, str]) -> str:
    """A ``read,submit`` token from ``aka token create`` for the service that ``env`` configures."""
    made = subprocess.run(
        [sys.executable, "-m", "aka", "token", "create", "--name", "bench", "--scopes", "read,submit"],
        env=env, capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    return made.stdout.strip().splitlines()[-1].split()[-1]


def wait_healthy(base: str, server: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Wait for ``aka serve`` at ``base`` to answer /healthz.

    Raises:
        RuntimeError: The server exited, or did not answer within ``timeout_s``.
    """
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"aka serve exited with {server.returncode} before it was healthy")
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"aka serve was not healthy within {timeout_s:.0f} s")


def follow(client: Any, job_id: str, t0: float, echo: bool = True) -> list[dict[str, Any]]:
    """A job's server-sent events to its ``end`` (``AkaClient.events``), each with ``t_s``."""
    events: list[dict[str, Any]] = []
    for event in client.events(job_id):
        event["t_s"] = round(time.monotonic() - t0, 3)
        events.append(event)
        if echo:
            print(
                f"[{event['t_s']:7.1f}s] {event['event']}: {str(event['data'])[:110]}", flush=True
            )
    return events


def main(argv: list[str] | None = None) -> int:
    """Run one job through the service; return the exit code (0 when it succeeded)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--operator", default="rms_norm")
    parser.add_argument("--shapes", default="0,7", help="Comma-separated tune shape ids.")
    parser.add_argument("--max-iters", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)

    import httpx

    from aka.hardware import library_versions
    from aka.tools import AkaClient

    data = Path(tempfile.mkdtemp(prefix="aka-service-gpu-"))
    env = os.environ | {
        "AKA_SERVICE__DATA_DIR": str(data),
        "AKA_SERVICE__USE_KB": "false",
        "AKA_PATHS__CACHE_DIR": str(data / "cache"),
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    }
    aka = [sys.executable, "-m", "aka"]
    token = make_token(env)
    headers = {"Authorization": f"Bearer {token}"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(data / "serve.log", "wb")  # noqa: SIM115 - closed in finally
    server = subprocess.Popen([*aka, "serve", "--host", "127.0.0.1", "--port", str(port)],
                              env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "benchmark": "service_gpu",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": library_versions(),
    }
    try:
        t_start = time.monotonic()
        wait_healthy(base, server, 120)
        record["server_ready_s"] = round(time.monotonic() - t_start, 3)
        body = {
            "operator": args.operator,
            "shapes": [s for s in args.shapes.split(",") if s],
            "budget": {"max_iters": args.max_iters},
        }
        t0 = time.monotonic()
        posted = httpx.post(f"{base}/v1/jobs", json=body, headers=headers, timeout=30)
        print(f"POST /v1/jobs -> {posted.status_code} {posted.text[:200]}", flush=True)
        posted.raise_for_status()
        job_id = posted.json()["id"]
        with AkaClient(base, token, timeout_s=900) as client:
            events = follow(client, job_id, t0)
        job = httpx.get(f"{base}/v1/jobs/{job_id}", headers=headers, timeout=30).json()
        kernel = httpx.get(f"{base}/v1/jobs/{job_id}/kernel", headers=headers, timeout=30)
        report_md = httpx.get(f"{base}/v1/jobs/{job_id}/report", headers=headers, timeout=30)
        report_html = httpx.get(f"{base}/v1/jobs/{job_id}/report", params={"format": "html"},
                                headers=headers, timeout=30)  # fmt: skip
        t_end = time.monotonic() - t0
        fetched = args.out / f"service_gpu_{datetime.now(UTC).date().isoformat()}"
        fetched.mkdir(exist_ok=True)
        for name, resp in (("kernel.py.txt", kernel), ("report.md", report_md),
                           ("report.html", report_html)):  # fmt: skip
            if resp.status_code == 200:
                (fetched / name).write_text(resp.text)
        running = next((e["t_s"] for e in events if e.get("event") == "status"
                        and isinstance(e.get("data"), dict)
                        and e["data"].get("status") == "running"), None)  # fmt: skip
        record |= {
            "request": body,
            "job": job,
            "fetched": {
                "kernel": [kernel.status_code, len(kernel.content)],
                "report_md": [report_md.status_code, len(report_md.content)],
                "report_html": [report_html.status_code, len(report_html.content)],
            },
            "timings_s": {
                "post_to_running": running,
                "post_to_end_event": events[-1]["t_s"] if events else None,
                "post_to_report_fetched": round(t_end, 3),
            },
            "events": [
                {
                    "t_s": e["t_s"],
                    "event": e.get("event"),
                    "data": e.get("data")
                    if e.get("event") != "progress"
                    else str(e.get("data"))[:160],
                }
                for e in events
            ],  # fmt: skip
        }
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        record["serve_log_tail"] = (data / "serve.log").read_text(errors="replace")[-4000:]
        date = datetime.now(UTC).date().isoformat()
        (args.out / f"service_gpu_{date}.json").write_text(json.dumps(record, indent=1))
    job = record.get("job") or {}
    print("\n| job | status | device | POST→running | POST→end | POST→report | kernel | report |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    tm = record.get("timings_s", {})
    f = record.get("fetched", {})
    result = job.get("result") or {}
    print(f"| {job.get('id', '?')[:8]} | {job.get('status')} | {result.get('device')} | "
          f"{tm.get('post_to_running')} s | {tm.get('post_to_end_event')} s | "
          f"{tm.get('post_to_report_fetched')} s | {f.get('kernel')} | {f.get('report_html')} |")  # fmt: skip
    print(f"result: {json.dumps(result)[:600]}")
    return 0 if job.get("status") == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
