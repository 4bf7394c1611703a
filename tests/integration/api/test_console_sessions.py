"""Every console route but the sign-in's asks for a session: the routes are walked, so a page
added without that check fails here. A session has its user's rights; only a key with
permissions ``all`` opens one (``console/signin.py``), and a revoked key or a disabled user
ends it."""

from __future__ import annotations

import re

from starlette.routing import Mount, Route, WebSocketRoute

from in_process import InProcess
from skiff.console.app import routes
from skiff.console.base import Console

#: Reached without a session: the sign-in form (the endpoint list once signed in), its post.
PUBLIC = {("GET", "/"), ("POST", "/login")}


def _fill(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", path.replace("{path:path}", "x1"))


async def test_every_console_route_but_sign_in_needs_a_session(in_process: InProcess) -> None:
    walked = 0
    sockets = []
    for route in routes(Console(in_process.services)):
        if isinstance(route, Mount):
            assert route.path == "/static", f"{route.path}: a new mount, walk it here"
            continue
        if isinstance(route, WebSocketRoute):
            sockets.append(route.path)
            continue
        assert isinstance(route, Route)
        for method in sorted((route.methods or set()) - {"HEAD"}):
            if (method, route.path) in PUBLIC:
                continue
            walked += 1
            url = "/console" + _fill(route.path)
            answer = await in_process.anonymous.request(method, url)
            if method == "GET" and not url.endswith(".json"):  # a script's call: a 401
                assert answer.status_code == 303, (url, answer.status_code)
                assert answer.headers["location"].startswith("/console/?next="), url
            else:
                assert answer.status_code == 401, (method, url, answer.status_code)
    assert walked > 30
    # A WebSocket is not reached over this transport: test_console_terminal.py refuses the
    # terminal's without a session; a new one needs a test of its own.
    assert sockets == ["/pods/{pod_id}/terminal/socket"]
