"""One real ``aka serve`` for all the tool tests (jobs run the real agent with a fake evaluator).

Starting a server and making a token take a few seconds, so the package shares one; every test
opens its own clients and closes them. The server's caches are throwaway folders, so its KB index
is never built and ``/v1/kb/search`` answers 503 ``kb.index_not_built``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.service_server import Server, start_server, stop_server

REPO = Path(__file__).resolve().parents[2]
RMS_NORM_CANDIDATE = REPO / "configs" / "examples" / "rms_norm" / "candidate.py"


@dataclass(frozen=True)
class ToolServer:
    """The shared server and a ``read,submit`` token of it."""

    server: Server
    token: str

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="session")
def aka_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolServer]:
    tmp = tmp_path_factory.mktemp("tools-server")
    with pytest.MonkeyPatch.context() as mp:  # the developer's AKA_* settings stay out of it
        for name in list(os.environ):
            if name.startswith("AKA_"):
                mp.delenv(name)
        server = start_server(
            tmp, "run_job", AKA_PATHS__CACHE_DIR=str(tmp / "cache"),
            AKA_KB__EMBEDDING_CACHE=str(tmp / "cache" / "kb-embeddings.sqlite"),
        )  # fmt: skip
    try:
        yield ToolServer(server, server.token("read,submit"))
    finally:
        stop_server(server)
