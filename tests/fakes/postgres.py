"""A throwaway PostgreSQL server for tests: Debian's own binaries, a fresh cluster in /tmp.

``postgres_server()`` runs ``initdb`` and ``pg_ctl start`` (as the ``postgres`` user when the
tests run as root, which PostgreSQL refuses to run as), listening on a Unix socket only, and yields
a ``postgresql://`` URL; the cluster is stopped and deleted afterwards. Skips the test when the
PostgreSQL server binaries are not installed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_BIN_DIRS = ["/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin",
             "/usr/lib/postgresql/15/bin"]  # fmt: skip


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    return next((str(Path(d) / name) for d in _BIN_DIRS if (Path(d) / name).is_file()), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a PostgreSQL cluster; yield its URL (user ``aka``, database ``postgres``)."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    root = Path(tempfile.mkdtemp(prefix="aka-pg-"))
    root.chmod(0o755)  # the postgres user must reach the socket directory
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    as_postgres: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(sock, "postgres", "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    run = {"check": True, "capture_output": True, "text": True, "timeout": 120}
    try:
        subprocess.run([*as_postgres, initdb, "-D", str(data), "-U", "aka", "--auth=trust",
                        "-E", "UTF8", "--no-sync"], **run)  # fmt: skip
        options = f"-k {sock} -p {port} -c listen_addresses='' -c fsync=off"
        subprocess.run([*as_postgres, pg_ctl, "-D", str(data), "-o", options,
                        "-l", str(root / "server.log"), "-w", "start"], **run)  # fmt: skip
    except subprocess.CalledProcessError as err:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"could not start PostgreSQL: {err.stderr or err.stdout}") from err
    try:
        yield f"postgresql://aka@/postgres?host={sock}&port={port}"
    finally:
        subprocess.run([*as_postgres, pg_ctl, "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
