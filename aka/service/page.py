"""The per-job HTML page (``GET /ui/jobs/{id}``): one self-contained document that follows a job.

Owns the page's markup, its inline CSS and script (package data in ``aka/service/ui/``) and the
headers that lock it down: a Content-Security-Policy that allows the inline script and style by
their SHA-256 and lets the page reach nothing but its own origin, ``no-store`` and
``no-referrer``. Must not read the job store or check tokens (the app's route does both); the
page's script reads everything else from the JSON API with an ``Authorization`` header.
"""

from __future__ import annotations

import base64
import hashlib
import html
from functools import cache
from importlib import resources

__all__ = ["page_headers", "render_job_page"]


@cache
def _asset(name: str) -> str:
    text = resources.files("aka.service").joinpath("ui", name).read_text(encoding="utf-8")
    if "</" + ("script" if name.endswith(".js") else "style") in text:
        raise ValueError(f"aka/service/ui/{name} would close its own inline element")
    return text


def _csp_hash(text: str) -> str:
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return f"'sha256-{digest}'"


def page_headers() -> dict[str, str]:
    """The response headers of the page: CSP by hash, no caching, no referrer, no framing."""
    csp = "; ".join(
        [
            "default-src 'none'",
            f"script-src {_csp_hash(_asset('job.js'))}",
            f"style-src {_csp_hash(_asset('job.css'))}",
            "connect-src 'self'",  # the page's fetch() calls to the JSON API
            "img-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )
    return {
        "Content-Security-Policy": csp,
        # the URL may carry ?access_token=: keep the page out of caches and out of Referer headers
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
    }


def _row(label: str, ident: str, value: str = "…") -> str:
    return f'<dt>{label}</dt><dd id="{ident}">{html.escape(value)}</dd>'


def render_job_page(job_id: str, problem: str) -> str:
    """The page for one job; ``problem`` names what it optimizes or scores (escaped here).

    Everything that changes (status, events, result, chart) is filled in by the page's script.
    """
    jid = html.escape(job_id, quote=True)
    rows = "".join(
        [
            f'<dt>id</dt><dd><code id="job-id">{jid}</code></dd>',
            _row("kind", "job-kind"),
            _row("problem", "job-problem", problem),
            _row("status", "job-status"),
            _row("attempts", "job-attempts"),
            _row("created", "job-created"),
            _row("started", "job-started"),
            _row("finished", "job-finished"),
            _row("cancel", "job-cancel"),
            '<div id="job-error-row" hidden><dt>error</dt>'
            '<dd id="job-error" class="error"></dd></div>',
        ]
    )
    downloads = "".join(
        f'<button type="button" id="download-{ident}">{label}</button>'
        for ident, label in [("kernel", "kernel.py"), ("report-md", "report.md"),
                             ("report-html", "report.html"), ("run-json", "run.json")]
    )  # fmt: skip
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>aka job {jid}</title><style>{_asset('job.css')}</style></head>"
        f'<body data-job-id="{jid}"><header><h1>aka job <code>{jid}</code> '
        '<span id="status" class="status">loading</span></h1></header><main>'
        f'<section><h2>Job</h2><dl id="job">{rows}</dl></section>'
        '<section><h2>Events</h2><p id="stream-state">connecting…</p><ol id="events"></ol>'
        "</section>"
        '<section id="result-section" hidden><h2>Result</h2><dl id="result"></dl>'
        f'<p id="downloads" hidden>Download: {downloads} <span id="download-state"></span></p>'
        "</section>"
        '<section id="sol-section" hidden><h2>SOL fraction S per shape</h2>'
        '<figure id="sol-chart"></figure><p id="sol-note" class="note"></p></section>'
        "</main><noscript>This page needs JavaScript. The same data is in the JSON API: "
        f"GET /v1/jobs/{jid} with an Authorization header.</noscript>"
        f"<script>{_asset('job.js')}</script></body></html>"
    )
