"""``GET /``: where a newcomer who opens the server's address goes next. A browser gets a small
page linking the console and the API documents; a client that asks for JSON
(``Accept: application/json``) gets the same links as an index."""

from __future__ import annotations

from html import escape
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from skiff.api.responses import json_response

#: What each link leads to, in the order the page lists them.
LINKS: tuple[tuple[str, str, str], ...] = (
    ("console", "/console", "The web console: sign in with an API key"),
    ("managementDocs", "/v1/docs", "Management API (/v1): endpoints, templates, volumes, pods"),
    ("managementOpenapi", "/v1/openapi.json", "Management API, OpenAPI document"),
    ("jobDocs", "/v2/docs", "Job interface (/v2): run, status, stream, cancel, health"),
    ("jobOpenapi", "/v2/openapi.json", "Job interface, OpenAPI document"),
    ("health", "/healthz", "Liveness of this server (no key needed)"),
)


def index() -> dict[str, Any]:
    return {
        "name": "skiff",
        "description": "A self-hosted serverless GPU platform that speaks the runpod SDK's API",
        "links": {name: path for name, path, _ in LINKS},
    }


def _page() -> str:
    items = "\n".join(
        f'    <li><a href="{escape(path)}">{escape(path)}</a>: {escape(text)}</li>'
        for _, path, text in LINKS
    )
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head><meta charset="utf-8"><title>skiff</title></head>\n'
        "<body>\n  <h1>skiff</h1>\n"
        "  <p>This server runs serverless endpoints for the runpod SDK. Start here:</p>\n"
        f"  <ul>\n{items}\n  </ul>\n</body>\n</html>\n"
    )


def _wants_json(accept: str) -> bool:
    """Whether the caller asked for JSON rather than a page (a browser's Accept names HTML)."""
    accept = accept.lower()
    return "application/json" in accept and "text/html" not in accept


async def root(request: Request) -> Response:
    if _wants_json(request.headers.get("accept", "")):
        return json_response(index())
    return HTMLResponse(_page())
