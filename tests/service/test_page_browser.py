"""The job page (``GET /ui/jobs/{id}``): its headers and auth, and the page itself in a browser.

The browser test drives Debian's Chromium (``/usr/bin/chromium``) through the ``playwright``
package against a real ``aka serve`` whose jobs run the real agent with the fake evaluator
(``tests/fakes/service_runner.py:gated``: the job waits for the test's ``go`` file, so the page
is seen while the job is still running). It skips, saying why, without either.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from aka.core import Settings
from aka.core.config import ServiceConfig
from aka.service import create_app, create_token, open_store
from aka.service.auth import QueryTokenRedactor
from tests.fakes.service_runner import MARKUP
from tests.fakes.service_server import Server, start_server, stop_server

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip

try:
    from playwright.sync_api import Route, sync_playwright
except ImportError:  # pragma: no cover - the dev extra installs it
    sync_playwright = None


def _browser_missing() -> str | None:
    if sync_playwright is None:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    if not CHROMIUM.is_file() and shutil.which("chromium") is None:
        return f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does it as root)"
    return None


def _chromium() -> str:
    return str(CHROMIUM) if CHROMIUM.is_file() else str(shutil.which("chromium"))


# --------------------------------------------------------------------------------------------
# Headers and auth, through the ASGI app (no browser, no server process)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def app_client(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], str]]:
    settings = Settings(service=ServiceConfig(data_dir=tmp_path))
    store = open_store(settings.service)
    tokens = {s: create_token(store, s, frozenset(s.split(",")))[0] for s in ("read", "submit")}
    owner = store.token_by_hash(hashlib.sha256(tokens["read"].encode()).hexdigest())
    assert owner is not None
    job, _ = store.submit("optimize", {"operator": "rms_norm"}, owner.id, None)
    with TestClient(create_app(settings, store)) as client:
        yield client, tokens, job.id


def _inline(tag: str, page: str) -> str:
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.S)
    assert len(found) == 1, tag
    return found[0]


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_job_page_is_locked_down_by_its_headers(app_client: Any) -> None:
    client, tokens, job_id = app_client
    r = client.get(f"/ui/jobs/{job_id}", params={"access_token": tokens["read"]})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["x-content-type-options"] == "nosniff"
    csp = dict(d.strip().split(" ", 1) for d in r.headers["content-security-policy"].split(";"))
    assert csp["default-src"] == "'none'" and csp["connect-src"] == "'self'"
    assert csp["frame-ancestors"] == "'none'" and csp["base-uri"] == "'none'"
    # the inline script and style are allowed by their hashes, and nothing else is
    assert csp["script-src"] == _sha256(_inline("script", r.text))
    assert csp["style-src"] == _sha256(_inline("style", r.text))
    assert "unsafe-inline" not in r.headers["content-security-policy"]
    assert not re.search(r"(src|href)=\"(https?:)?//", r.text)  # nothing from elsewhere
    assert f'data-job-id="{job_id}"' in r.text and "rms_norm" in r.text
    # the header works as everywhere else; the query token is for this page only
    bearer = {"Authorization": f"Bearer {tokens['read']}"}
    assert client.get(f"/ui/jobs/{job_id}", headers=bearer).status_code == 200
    elsewhere = client.get(f"/v1/jobs/{job_id}", params={"access_token": tokens["read"]})
    assert elsewhere.status_code == 401


def test_the_job_page_needs_a_read_token_and_the_job(app_client: Any) -> None:
    client, tokens, job_id = app_client
    r = client.get(f"/ui/jobs/{job_id}")
    assert r.status_code == 401 and r.json()["code"] == "auth.unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"
    assert client.get(f"/ui/jobs/{job_id}", params={"access_token": "aka_nope"}).status_code == 401
    r = client.get(f"/ui/jobs/{job_id}", params={"access_token": tokens["submit"]})
    assert r.status_code == 403 and "'read'" in r.json()["message"]
    assert client.get("/ui/jobs/nope", params={"access_token": tokens["read"]}).status_code == 404
    paths = client.get("/openapi.json").json()["paths"]
    page = paths["/ui/jobs/{job_id}"]["get"]
    assert page["tags"] == ["ui"] and "text/html" in page["responses"]["200"]["content"]
    assert any(p["name"] == "access_token" and p["in"] == "query" for p in page["parameters"])


def test_the_access_log_never_shows_a_query_token() -> None:
    from uvicorn.logging import AccessFormatter

    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", "/ui/jobs/j?x=1&access%5Ftoken=aka_SECRET&y=2", "1.1", 200), None,
    )  # fmt: skip
    assert QueryTokenRedactor().filter(record)
    line = AccessFormatter('%(client_addr)s "%(request_line)s"', use_colors=False).format(record)
    assert "SECRET" not in line and "access%5Ftoken=[redacted]&y=2" in line and "x=1" in line


# --------------------------------------------------------------------------------------------
# The page in Chromium
# --------------------------------------------------------------------------------------------


def _frames_until(client: httpx.Client, job_id: str, stage: str) -> tuple[str, int]:
    """The job's SSE text up to and including the first event at ``stage``; its last id."""
    text, last = "", 0
    with client.stream("GET", f"/v1/jobs/{job_id}/events") as r:
        for frame in _split_frames(r.iter_text()):
            text += frame + "\n\n"
            last = int(re.search(r"^id: (\d+)$", frame, flags=re.M).group(1))  # type: ignore[union-attr]
            if f'"stage": "{stage}"' in frame:
                return text, last
    raise AssertionError(f"the stream ended before an event at stage {stage!r}")


def _split_frames(chunks: Iterator[str]) -> Iterator[str]:
    buffer = ""
    for chunk in chunks:
        buffer += chunk
        while "\n\n" in buffer:
            frame, buffer = buffer.split("\n\n", 1)
            if not frame.startswith(":"):
                yield frame


def _all_events(client: httpx.Client, job_id: str) -> list[tuple[int, str]]:
    with client.stream("GET", f"/v1/jobs/{job_id}/events") as r:
        frames = list(_split_frames(r.iter_text()))
    out = []
    for frame in frames:
        fields = dict(line.split(": ", 1) for line in frame.splitlines())
        if "id" in fields:
            out.append((int(fields["id"]), fields["event"]))
    return out


def _go(server: Server, job_id: str) -> None:
    go = Path(server.env["AKA_SERVICE__DATA_DIR"]) / "jobs" / job_id / "go"
    go.parent.mkdir(parents=True, exist_ok=True)
    go.touch()


@pytest.fixture
def gated_server(tmp_path: Path) -> Iterator[Server]:
    if reason := _browser_missing():
        pytest.skip(reason)
    s = start_server(tmp_path, "gated", PYTHONUNBUFFERED="1")  # the access log reaches the file
    yield s
    stop_server(s)


@pytest.mark.integration
@pytest.mark.slow  # about 6 s: a server, two jobs, a browser
def test_the_job_page_follows_a_job_live_in_a_browser(gated_server: Server) -> None:
    server = gated_server
    token = server.token("read,submit")
    client = server.client(token)
    body = {"operator": "rms_norm", "shapes": ["0", "1"], "budget": {"max_iters": 2}}
    job_id = client.post("/v1/jobs", json=body).json()["id"]
    # the first events the page gets are these, then its connection "drops" (see on_events)
    first_frames, first_last = _frames_until(client, job_id, "gate")
    events_requests: list[dict[str, str]] = []

    def on_events(route: Route) -> None:
        events_requests.append(route.request.headers)
        if len(events_requests) == 1:
            route.fulfill(status=200, content_type="text/event-stream", body=first_frames)
        else:
            route.continue_()

    assert sync_playwright is not None
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(10_000)  # fail fast (a blocked script shows nothing at all)
            problems: list[str] = []
            page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
            page.on("console", lambda m: problems.append(m.text)
                    if "Content Security Policy" in m.text else None)  # fmt: skip
            page.route(re.compile(r"/v1/jobs/[^/]+/events$"), on_events)

            response = page.goto(f"{server.url}/ui/jobs/{job_id}?access_token={token}")
            assert response is not None and response.status == 200
            _check_the_running_job(page, token, first_last, events_requests)
            _go(server, job_id)
            _check_the_finished_job(page, client, job_id)
            _check_a_cpu_job(page, server, client, token, body)

            # without a token, or without the read scope, the page is refused
            anonymous = page.goto(f"{server.url}/ui/jobs/{job_id}")
            assert anonymous is not None and anonymous.status == 401
            submit_only = server.token("submit")
            refused = page.goto(f"{server.url}/ui/jobs/{job_id}?access_token={submit_only}")
            assert refused is not None and refused.status == 403
            assert problems == []
        finally:
            browser.close()

    log = server.log.read_text()
    assert "/ui/jobs/" in log and "access_token=[redacted]" in log  # the access log is on
    assert token not in log and submit_only not in log


def _check_the_running_job(
    page: Any, token: str, first_last: int, events_requests: list[dict[str, str]]
) -> None:
    """The events so far, the token gone from the URL, the resumed stream, markup as text."""
    page.wait_for_function(f"() => document.querySelectorAll('#events li').length >= {first_last}")
    assert page.text_content("#status") == "running"
    assert token not in page.url and "access_token" not in page.url
    page.evaluate("window.sameDocument = true")  # gone if the page reloads

    # after the drop the page resumes from the last event it saw
    deadline = time.monotonic() + 10
    while len(events_requests) < 2:
        assert time.monotonic() < deadline, "the page never reconnected"
        page.wait_for_timeout(50)
    assert events_requests[0]["authorization"] == f"Bearer {token}"
    assert "last-event-id" not in events_requests[0]
    assert events_requests[1]["last-event-id"] == str(first_last)

    # markup in an event is text: shown literally, never run
    gate = page.locator("#events li[data-kind=progress]").last
    assert MARKUP in gate.text_content()
    assert page.locator("#events script, #events img, #events b").count() == 0
    assert page.evaluate("window.pwned") is None


def _check_the_finished_job(page: Any, client: httpx.Client, job_id: str) -> None:
    """Without a reload: final status, every event in order, the SOL chart, a download."""
    page.wait_for_function("() => document.body.dataset.ready === 'true'", timeout=30_000)
    assert page.text_content("#status") == "succeeded"
    assert page.text_content("#job-status") == "succeeded"
    assert page.text_content("#job-attempts") == "1"
    assert page.evaluate("window.sameDocument") is True

    seen = page.eval_on_selector_all(
        "#events li", "els => els.map(e => [Number(e.dataset.seq), e.dataset.kind])"
    )
    assert [tuple(e) for e in seen] == _all_events(client, job_id)

    # one bar per final shape, labelled with its id, as long as its S
    record = client.get(f"/v1/jobs/{job_id}/report", params={"format": "json"}).json()
    shapes = [s for k in ("final_tune", "final_holdout") for s in record[k]["shapes"]]
    bars = page.eval_on_selector_all(
        "#sol-chart svg g.shape",
        "gs => gs.map(g => [g.querySelector('text.label').textContent, Number(g.dataset.sol), "
        "Number(g.querySelector('rect.bar').getAttribute('width'))])",
    )
    assert [b[0] for b in bars] == [s["shape_id"] for s in shapes]
    assert [b[1] for b in bars] == pytest.approx([s["sol_fraction"] for s in shapes])
    assert [b[2] for b in bars] == pytest.approx([360 * s["sol_fraction"] for s in shapes])
    assert "produced_kernel" in page.text_content("#result")

    # downloads go through fetch with the header (a link could not carry it)
    with page.expect_download() as download:
        page.click("#download-kernel")
    assert download.value.suggested_filename == f"{job_id}-kernel.py"
    kernel = Path(download.value.path()).read_text()
    assert kernel == client.get(f"/v1/jobs/{job_id}/kernel").text


def _check_a_cpu_job(
    page: Any, server: Server, client: httpx.Client, token: str, body: dict[str, Any]
) -> None:
    """A CPU-interpreter run has no timings, and the chart says so instead of drawing nothing."""
    job_id = client.post("/v1/jobs", json={**body, "device": "cpu"}).json()["id"]
    _go(server, job_id)
    page.goto(f"{server.url}/ui/jobs/{job_id}?access_token={token}")
    page.wait_for_function("() => document.body.dataset.ready === 'true'", timeout=30_000)
    assert page.text_content("#status") == "succeeded"
    assert page.text_content("#sol-note") == "no timings: CPU interpreter"
    assert page.locator("#sol-chart svg").count() == 0
