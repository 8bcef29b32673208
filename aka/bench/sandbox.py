"""The sandbox: start one scorer worker process, feed it a task, collect what it leaves behind.

Owns process hygiene (ARCHITECTURE.md §4): a fresh process per task, its own process group, a fresh
temp directory as cwd and HOME, stdin closed, an environment built from an allow-list (no secrets),
one visible GPU (``aka.hardware.worker_device``: an index into the parent's own visible GPUs, so a
parent pinned by ``CUDA_VISIBLE_DEVICES`` keeps its workers on its GPU), NVLink multicast off,
rlimits on CPU time, file size and open files, and a group kill on timeout. The worker itself
drops into a new network namespace where the OS allows it. Must not interpret results: the
pipeline decides verdicts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aka.core import MULTICAST_OFF_ENV, OFFLINE_ENV_DEFAULTS, BenchConfig, SandboxError
from aka.hardware import worker_device

__all__ = ["WorkerHandle", "WorkerOutcome", "build_worker_env", "start_worker"]

logger = logging.getLogger(__name__)

#: Variables a worker may inherit. Everything else (keys, tokens, AKA_* credentials) stays out.
_ENV_ALLOW = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_VISIBLE_DEVICES",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
    "TRITON_PTXAS_PATH",
    "TRITON_LIBCUDA_PATH",
    "CC",
    "CXX",
    "OMP_NUM_THREADS",
)
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
_POLL_S = 0.02


def build_worker_env(
    workdir: Path,
    *,
    interpret: bool,
    gpu_index: int | None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """Build a worker's environment from the allow-list.

    Args:
        workdir: The worker's fresh directory (becomes HOME and TMPDIR; compiler caches live there).
        interpret: Set ``TRITON_INTERPRET=1`` (CPU workers only).
        gpu_index: The one GPU the worker may see, as an index into the parent's visible GPUs
            (``aka.hardware.visible_gpus``), or None to keep the parent's view.
        extra: Variables set last (e.g. the cold re-check's); ``MULTICAST_OFF_ENV`` wins over them.

    Raises:
        HardwareError: ``gpu_index`` is not one of the parent's visible GPUs.
    """
    env = {k: os.environ[k] for k in _ENV_ALLOW if k in os.environ}
    env = {k: v for k, v in env.items() if not any(m in k.upper() for m in _SECRET_MARKERS)}
    env.update(OFFLINE_ENV_DEFAULTS)
    # The worker must import this very aka (and whatever the parent's PYTHONPATH adds, e.g. wheels
    # unpacked beside a system Python): put aka's own location first.
    python_path = [
        str(Path(__file__).resolve().parents[2]),
        *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
    ]
    env.update(
        {
            "HOME": str(workdir),
            "TMPDIR": str(workdir),
            "PYTHONPATH": os.pathsep.join(python_path),
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "TRITON_CACHE_DIR": str(workdir / ".triton"),
            "TORCHINDUCTOR_CACHE_DIR": str(workdir / ".inductor"),
            "XDG_CACHE_HOME": str(workdir / ".cache"),
        }
    )
    if interpret:
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu_index is not None:
        env["CUDA_VISIBLE_DEVICES"] = worker_device(gpu_index)
    env.update(extra or {})
    env.update(MULTICAST_OFF_ENV)
    return env


def _limits(config: BenchConfig) -> Callable[[], None]:
    cpu_s, fsize, nofile = (
        config.cpu_time_limit_s,
        config.file_size_limit_mb << 20,
        config.open_files_limit,
    )
    as_bytes = (
        int(config.address_space_limit_gb * (1 << 30)) if config.address_space_limit_gb else None
    )

    def apply() -> None:  # runs in the child between fork and exec: no logging, no locks
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if as_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))

    return apply


@dataclass
class WorkerOutcome:
    """What a finished worker left: exit status, its result file, its events and its log."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    result: dict[str, Any] | None
    events: list[dict[str, Any]]
    log_tail: str
    workdir: Path

    @property
    def signal(self) -> int | None:
        """The signal that killed the worker, if one did."""
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None

    @property
    def last_stage(self) -> str | None:
        """The last stage the worker announced before it ended."""
        stages = [e["stage"] for e in self.events if "stage" in e]
        return stages[-1] if stages else None

    def describe(self) -> str:
        """One line on why the worker ended: its reported error, its timeout, or its exit."""
        err = (self.result or {}).get("error") or {}
        if err:
            kind, stage = err.get("kind", "?"), err.get("stage", "?")
            return f"{kind} in stage {stage}: {err.get('message', '')}"
        if self.timed_out:
            return f"timed out after {self.wall_s:.0f} s (stage {self.last_stage})"
        tail = self.log_tail.strip().splitlines()[-1:] or [""]
        return f"exit code {self.returncode} in stage {self.last_stage} {tail[0][:200]}".strip()


@dataclass
class WorkerHandle:
    """A running worker: the parent may talk to it through files while it runs."""

    proc: subprocess.Popen[bytes]
    workdir: Path
    started: float
    timeout_s: float
    on_event: Callable[[dict[str, Any]], None] | None
    _events: list[dict[str, Any]] = field(default_factory=list)
    _offset: int = 0

    def _read_events(self) -> None:
        path = self.workdir / "events.jsonl"
        if not path.exists():
            return
        with path.open("rb") as fh:
            fh.seek(self._offset)
            chunk = fh.read()
        complete, _, _ = chunk.rpartition(b"\n")
        if not complete:
            return
        self._offset += len(complete) + 1
        for line in complete.split(b"\n"):
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a candidate scribbling into the file is not the harness's problem
            if isinstance(event, dict):
                self._events.append(event)
                if self.on_event is not None:
                    self.on_event(event)

    @property
    def events(self) -> list[dict[str, Any]]:
        """Events read from the worker so far."""
        return list(self._events)

    def wait_for_stage(self, stage: str) -> bool:
        """Block until the worker announces ``stage`` (True) or exits or times out (False)."""
        while True:
            self._read_events()
            if any(e.get("stage") == stage for e in self._events):
                return True
            if self.proc.poll() is not None or self._expired():
                return False
            time.sleep(_POLL_S)

    def send(self, name: str, payload: dict[str, Any]) -> None:
        """Hand the worker a JSON message (it polls for the file)."""
        tmp = self.workdir / f".{name}.tmp"
        tmp.write_text(json.dumps(payload))
        tmp.rename(self.workdir / name)

    def _expired(self) -> bool:
        return time.monotonic() - self.started > self.timeout_s

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def finish(self) -> WorkerOutcome:
        """Wait for the worker to exit (killing its group on timeout) and collect its outcome."""
        timed_out = False
        while self.proc.poll() is None:
            self._read_events()
            if self._expired():
                timed_out = True
                self._kill_group()
                self.proc.wait()
                break
            time.sleep(_POLL_S)
        self._kill_group()  # stray children of the candidate die with the group
        self._read_events()
        return WorkerOutcome(
            returncode=self.proc.returncode,
            timed_out=timed_out,
            wall_s=time.monotonic() - self.started,
            result=_read_result(self.workdir / "result.json"),
            events=list(self._events),
            log_tail=_tail(self.workdir / "worker.log"),
            workdir=self.workdir,
        )

    def cleanup(self) -> None:
        """Kill anything left and remove the worker's directory."""
        if self.proc.poll() is None:
            self._kill_group()
            self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _read_result(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _tail(path: Path, max_chars: int = 4000) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - max_chars))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def start_worker(
    task: dict[str, Any],
    files: dict[str, str],
    *,
    config: BenchConfig,
    interpret: bool,
    gpu_index: int | None,
    timeout_s: float,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    launcher: Sequence[str] = (),
    extra_env: dict[str, str] | None = None,
) -> WorkerHandle:
    """Start a worker on ``task`` in a fresh sandbox directory.

    Args:
        task: The JSON task (role, problem, shapes, seeds...).
        files: File name -> text to place in the worker's directory (candidate, reference).
        config: Bench settings (rlimits).
        interpret: Run Triton's interpreter on the CPU.
        gpu_index: The GPU to expose (an index into the parent's visible GPUs).
        timeout_s: Wall-clock limit; the group is killed after it.
        on_event: Called with each event the worker writes.
        launcher: A command the worker runs under (e.g. an ``ncu ...`` prefix); it gets the same
            environment, rlimits, directory and process group.
        extra_env: Variables added to the worker's environment after the allow-list.

    Raises:
        SandboxError: The process could not be started.
        HardwareError: ``gpu_index`` is not one of the parent's visible GPUs.
    """
    workdir = Path(tempfile.mkdtemp(prefix="aka-worker-"))
    try:
        env = build_worker_env(workdir, interpret=interpret, gpu_index=gpu_index, extra=extra_env)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    for name, text in files.items():
        (workdir / name).write_text(text)
    (workdir / "task.json").write_text(json.dumps(task))
    log = (workdir / "worker.log").open("wb")
    try:
        proc = subprocess.Popen(
            [*launcher, sys.executable, "-m", "aka.bench._worker_main", str(workdir)],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_limits(config),  # noqa: PLW1509 - rlimits must be set in the child
        )
    except OSError as err:
        shutil.rmtree(workdir, ignore_errors=True)
        raise SandboxError(f"cannot start a scorer worker with {sys.executable}: {err}") from err
    finally:
        log.close()
    return WorkerHandle(
        proc=proc, workdir=workdir, started=time.monotonic(), timeout_s=timeout_s, on_event=on_event
    )
