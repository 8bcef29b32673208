"""``AkaClient`` against a real ``aka serve`` (tests/tools/conftest.py): jobs, verdicts, errors."""

from __future__ import annotations

import httpx
import pytest

from aka.core import ServiceError, ToolsConfig
from aka.tools import AkaClient
from tests.tools.conftest import RMS_NORM_CANDIDATE, ToolServer

pytestmark = pytest.mark.integration


def test_client_optimize_waits_for_the_job_and_returns_its_kernel(aka_server: ToolServer) -> None:
    with AkaClient(aka_server.url, aka_server.token, poll_interval_s=0.05) as client:
        job = client.optimize(operator="rms_norm", shapes=["0"], max_iters=1)

        assert job["status"] == "succeeded", job
        assert job["kind"] == "optimize" and job["result"]["produced_kernel"] is True
        assert "class ModelNew" in job["kernel"]
        assert client.job(job["id"])["status"] == "succeeded"


def test_client_evaluate_gives_the_verdict(aka_server: ToolServer) -> None:
    with AkaClient(aka_server.url, aka_server.token, poll_interval_s=0.05) as client:
        job = client.evaluate(RMS_NORM_CANDIDATE.read_text(), operator="rms_norm")

    assert job["status"] == "succeeded", job
    assert job["result"]["verdict"] == "accepted" and "kernel" not in job


def test_client_unknown_operator_raises_the_servers_422(aka_server: ToolServer) -> None:
    with AkaClient(aka_server.url, aka_server.token) as client, pytest.raises(ServiceError) as err:
        client.optimize(operator="no_such_op", wait=False)

    assert err.value.status == 422 and err.value.code == "spec.invalid"
    assert "rms_norm" in err.value.message  # the server's message lists the known operators


def test_client_bad_token_raises_401(aka_server: ToolServer) -> None:
    with AkaClient(aka_server.url, "aka_not-a-token") as client, pytest.raises(ServiceError) as err:
        client.job("anything")

    assert err.value.status == 401 and err.value.code == "auth.unauthorized"


def test_client_job_timeout_names_the_job(aka_server: ToolServer) -> None:
    with AkaClient(aka_server.url, aka_server.token) as client:
        queued = client.optimize(operator="rms_norm", shapes=["0"], max_iters=1, wait=False)
        with pytest.raises(ServiceError) as err:
            client.wait(queued["id"], timeout_s=0.01)
        client.wait(queued["id"], timeout_s=60)  # leave the shared server idle

    assert err.value.code == "service.job_timeout" and err.value.status is None
    assert queued["id"] in err.value.message and "cancel" in err.value.message


def test_client_unreachable_service_raises_service_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = AkaClient("http://127.0.0.1:9", "t", transport=httpx.MockTransport(refuse))
    with client, pytest.raises(ServiceError) as err:
        client.kb_search("softmax")

    assert err.value.code == "service.unreachable" and "--url" in err.value.message


def test_client_from_config_needs_a_token() -> None:
    from aka.core import ConfigError

    with pytest.raises(ConfigError, match="AKA_TOOLS__TOKEN"):
        AkaClient.from_config(ToolsConfig())
    with AkaClient.from_config(ToolsConfig(url="http://h:1/", token="s3cret")) as client:
        assert client.base_url == "http://h:1" and "s3cret" not in repr(client)


class _DropFirstEventStream(httpx.BaseTransport):
    """The real network, except that the first events stream breaks after its first event."""

    def __init__(self) -> None:
        self.real = httpx.HTTPTransport()
        self.resumed_from: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.real.handle_request(request)
        if not request.url.path.endswith("/events"):
            return response
        self.resumed_from.append(request.headers.get("Last-Event-ID", ""))
        if len(self.resumed_from) > 1:
            return response
        real_stream = response.stream

        class Broken(httpx.SyncByteStream):
            def __iter__(self):  # type: ignore[no-untyped-def]
                buffered = b""
                for chunk in real_stream:  # type: ignore[union-attr]
                    buffered += chunk
                    if b"\n\n" in buffered:  # one whole event went through: cut the line
                        yield buffered[: buffered.index(b"\n\n") + 2]
                        raise httpx.ReadError("connection reset (test)")

            def close(self) -> None:
                response.close()

        return httpx.Response(response.status_code, headers=response.headers, stream=Broken())

    def close(self) -> None:
        self.real.close()


def test_client_follows_a_jobs_events_and_resumes_after_a_dropped_stream(
    aka_server: ToolServer,
) -> None:
    transport = _DropFirstEventStream()
    events: list[dict] = []
    with AkaClient(aka_server.url, aka_server.token, poll_interval_s=0.05,
                   transport=transport) as client:  # fmt: skip
        job = client.evaluate(RMS_NORM_CANDIDATE.read_text(), operator="rms_norm",
                              on_event=events.append)  # fmt: skip

    assert job["status"] == "succeeded", job
    ids = [e["id"] for e in events if e["id"] is not None]
    assert ids == list(range(1, len(ids) + 1)), events  # every event once, in order
    assert transport.resumed_from[:2] == ["0", "1"]  # reconnected after the one it had seen
    assert events[0]["data"]["status"] == "queued"
    assert events[-1] == {"id": None, "event": "end", "data": {"status": "succeeded"}}
