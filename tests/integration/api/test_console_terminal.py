"""The console's terminal (``console/terminal_pages.py``) through a real uvicorn server and a
real WebSocket client, on a real SQLite file, with a real local pod: who is refused (no
session, another site's page, another user's pod, a stopped pod), what bad input gets (a
clear error and close, never a crash), and a session in a running pod: a command's output, a
resize, the exit code at the end, the pod stopping under it, the browser leaving, and each
opening and closing in the pod's log."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Origin

from eventually import eventually_async
from in_process import ADMIN_KEY
from skiff.app import create_app
from skiff.config import Settings
from skiff.console.base import Console
from skiff.services.hub import Services

#: How long a frame may take to come (a shell's start on a loaded machine included).
FRAME_SECONDS = 30.0


@dataclass
class Served:
    services: Services
    url: str
    #: Signed in to the console as the administrator (its session cookie).
    admin: httpx.AsyncClient

    @property
    def origin(self) -> str:
        return self.url

    def socket_url(self, pod_id: str, query: str = "?cols=80&rows=24") -> str:
        return self.url.replace("http", "ws", 1) + f"/console/pods/{pod_id}/terminal/socket{query}"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async with serving(tmp_path) as running:
        yield running


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, **more: Any) -> AsyncIterator[Served]:
    """The app behind a real uvicorn on a free port; ``more``: further settings."""
    settings = Settings(
        data_dir=tmp_path / "data", api_key=ADMIN_KEY, wait_poll_seconds=1.0, **more
    )
    app = create_app(settings)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", loop="none"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await eventually_async(lambda: server.started, "uvicorn to start")
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        async with httpx.AsyncClient(base_url=url) as admin:
            await sign_in(admin, ADMIN_KEY)
            yield Served(app.state.services, url, admin)
    finally:
        server.should_exit = True
        await task


async def sign_in(client: httpx.AsyncClient, key: str) -> None:
    """Through the sign-in form, as a browser does: the client keeps the session cookie."""
    form = await client.get("/console")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert token is not None, form.text
    answer = await client.post("/console/login", data={"api_key": key, "csrf": token[1]})
    assert answer.status_code == 303, answer.text
    assert client.cookies.get("skiff_session")


def cookie_of(client: httpx.AsyncClient) -> dict[str, str]:
    return {"Cookie": f"skiff_session={client.cookies['skiff_session']}"}


@contextlib.asynccontextmanager
async def terminal(
    served: Served,
    pod_id: str,
    *,
    client: httpx.AsyncClient | None = None,
    query: str = "?cols=80&rows=24",
    origin: str | None = None,
) -> AsyncIterator[ClientConnection]:
    who = client or served.admin
    headers = cookie_of(who) if "skiff_session" in who.cookies else {}
    async with connect(
        served.socket_url(pod_id, query),
        origin=Origin(origin or served.origin),
        additional_headers=headers,
        open_timeout=FRAME_SECONDS,
    ) as ws:
        yield ws


async def output_until(ws: ClientConnection, wanted: bytes, seen: bytearray) -> bytes:
    """The terminal's output, read until ``wanted`` shows (added to ``seen``): a command's
    output, never the command's own echo (``echo $((6*7))`` shows 42 once it ran)."""
    try:
        async with asyncio.timeout(FRAME_SECONDS):
            while wanted not in seen:
                frame = await ws.recv()
                assert isinstance(frame, bytes), f"a text frame amid the output: {frame!r}"
                seen.extend(frame)
    except TimeoutError:
        raise AssertionError(f"no {wanted!r} in the terminal's output: {bytes(seen)!r}") from None
    return bytes(seen)


async def last_frames(ws: ClientConnection) -> tuple[list[dict[str, Any]], int | None, str]:
    """The text frames (as JSON) until the socket closes, its close code and reason; the
    terminal's output on the way is skipped."""
    texts: list[dict[str, Any]] = []
    async with asyncio.timeout(FRAME_SECONDS):
        try:
            while True:
                frame = await ws.recv()
                if isinstance(frame, str):
                    texts.append(json.loads(frame))
        except ConnectionClosed:
            pass
    return texts, ws.close_code, ws.close_reason or ""


#: A pod whose command sleeps: what a session gets into is a shell beside it.
SLEEPER = {
    "name": "shell",
    "imageName": "local/shell",
    "computeType": "CPU",
    "dockerStartCmd": ["sleep", "1000"],
    "volumeInGb": 0,
}


async def running_pod(served: Served, key: str = ADMIN_KEY) -> str:
    """A sleeper pod of ``key``'s user, running; its id."""
    made = await served.admin.post(
        "/v1/pods", headers={"Authorization": f"Bearer {key}"}, json=SLEEPER
    )
    assert made.status_code == 201, made.text
    pod_id = str(made.json()["id"])
    await until_status(served, pod_id, "running", key)
    return pod_id


async def until_status(served: Served, pod_id: str, status: str, key: str = ADMIN_KEY) -> None:
    async def there() -> bool:
        pod = await served.admin.get(
            f"/v1/pods/{pod_id}", headers={"Authorization": f"Bearer {key}"}
        )
        return bool(pod.json()["status"] == status)

    await eventually_async(there, f"pod {pod_id} to be {status}")


async def log_text(served: Served, pod_id: str) -> str:
    return "\n".join(line.line for line in await served.services.pod_logs.lines(pod_id, None, 500))


async def logged(served: Served, pod_id: str, pattern: str) -> str:
    """The pod's log once a line matches ``pattern``."""

    async def found() -> str | None:
        text = await log_text(served, pod_id)
        return text if re.search(pattern, text) else None

    return await eventually_async(found, f"{pattern!r} in the log of pod {pod_id}")


async def test_a_session_runs_a_command_resizes_and_ends_with_its_exit_code(
    served: Served,
) -> None:
    pod_id = await running_pod(served)
    seen = bytearray()
    async with terminal(served, pod_id) as ws:
        await ws.send(b"echo $((6*7))\r")
        await output_until(ws, b"42\r\n", seen)
        await ws.send(b"echo $TERM; stty size\r")
        await output_until(ws, b"24 80\r\n", seen)
        assert b"xterm-256color" in seen
        await ws.send(json.dumps({"resize": [120, 40]}))
        await ws.send(b"stty size\r")
        await output_until(ws, b"40 120\r\n", seen)
        await ws.send(b"exit 3\r")
        texts, code, reason = await last_frames(ws)
    assert texts == [{"ended": "exit code 3", "exit": 3}]
    assert (code, reason) == (1000, "exit code 3")
    log = await logged(served, pod_id, r"session 1 of \S+ closed")
    assert re.search(
        r"skiff: session 1 opened by \S+ \(\w+\) from 127\.0\.0\.1 over console, console "
        r"sign-in: a shell on a terminal",
        log,
    ), log
    assert re.search(r"skiff: session 1 of \S+ closed after \d+ s: exit code 3", log), log
    assert served.services.pod_shells.sessions(pod_id) == []


async def test_the_size_may_come_as_the_first_frame(served: Served) -> None:
    pod_id = await running_pod(served)
    async with terminal(served, pod_id, query="") as ws:
        await ws.send(json.dumps({"resize": [99, 33]}))
        await ws.send(b"stty size\r")
        await output_until(ws, b"33 99\r\n", bytearray())


async def test_the_pod_stopping_ends_the_session_saying_so(served: Served) -> None:
    pod_id = await running_pod(served)
    async with terminal(served, pod_id) as ws:
        await ws.send(b'echo re""ady\r')
        await output_until(ws, b"ready\r\n", bytearray())
        stopped = await served.admin.post(
            f"/v1/pods/{pod_id}/stop", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        )
        assert stopped.status_code == 200, stopped.text
        texts, code, reason = await last_frames(ws)
    assert [t["ended"] for t in texts] == ["the pod stopped"]
    assert (code, reason) == (1000, "the pod stopped")
    await logged(served, pod_id, r"session 1 of \S+ closed")


async def test_the_browser_leaving_ends_the_process_and_is_logged(served: Served) -> None:
    pod_id = await running_pod(served)
    async with terminal(served, pod_id) as ws:
        await ws.send(b'echo re""ady\r')
        await output_until(ws, b"ready\r\n", bytearray())
    await logged(served, pod_id, r"session 1 of \S+ closed after \d+ s: the client left")
    assert served.services.pod_shells.sessions(pod_id) == []


async def test_no_session_is_refused_saying_to_sign_in(served: Served) -> None:
    pod_id = await running_pod(served)
    async with (
        httpx.AsyncClient(base_url=served.url) as anonymous,
        terminal(served, pod_id, client=anonymous) as ws,
    ):
        texts, code, _ = await last_frames(ws)
    assert code == 4401 and "sign in" in texts[0]["error"]
    forged = {"Cookie": "skiff_session=eyJkIjoieCJ9.forged"}
    async with connect(
        served.socket_url(pod_id), origin=Origin(served.origin), additional_headers=forged
    ) as ws:
        _, code, _ = await last_frames(ws)
    assert code == 4401
    assert served.services.pod_shells.sessions() == []


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        # Another port of the same host: where a pod's HTTP port serves anyone's page.
        "http://127.0.0.1:1",
        "https://127.0.0.1",
        "null",
    ],
)
async def test_another_origin_is_refused_at_the_handshake(served: Served, origin: str) -> None:
    pod_id = await running_pod(served)
    with pytest.raises(InvalidStatus) as refused:
        async with terminal(served, pod_id, origin=origin):
            pass
    assert refused.value.response.status_code == 403
    assert served.services.pod_shells.sessions() == []


async def test_no_origin_is_refused_at_the_handshake(served: Served) -> None:
    pod_id = await running_pod(served)
    with pytest.raises(InvalidStatus) as refused:
        async with connect(served.socket_url(pod_id), additional_headers=cookie_of(served.admin)):
            pass
    assert refused.value.response.status_code == 403


async def test_another_users_pod_is_not_found(served: Served) -> None:
    admin = await Console(served.services).caller_of_key(ADMIN_KEY)
    assert admin is not None
    bob_key = (await served.services.accounts.create_user(admin.user, "bob")).key
    pod_id = await running_pod(served, bob_key)
    async with httpx.AsyncClient(base_url=served.url) as bob:
        await sign_in(bob, bob_key)
        for wanted in (pod_id, "nosuchpod"):
            async with terminal(served, wanted) as ws:
                texts, code, reason = await last_frames(ws)
            assert code == 4404, (wanted, code, reason)
            # The same words for both: another user's pod is not told apart from none.
            assert texts == [{"error": "Pod not found"}]
        # Its owner gets in.
        async with terminal(served, pod_id, client=bob) as ws:
            await ws.send(b"echo $((6*7))\r")
            await output_until(ws, b"42\r\n", bytearray())
    assert "opened by admin" not in await log_text(served, pod_id)


@pytest.mark.parametrize("how", ["the user disabled", "the key revoked"])
async def test_an_open_terminal_ends_at_the_next_sweep_once_its_sign_in_fails(
    served: Served, how: str
) -> None:
    admin = await Console(served.services).caller_of_key(ADMIN_KEY)
    assert admin is not None
    bob = await served.services.accounts.create_user(admin.user, "bob")
    pod_id = await running_pod(served, bob.key)
    async with httpx.AsyncClient(base_url=served.url) as client:
        await sign_in(client, bob.key)
        async with terminal(served, pod_id, client=client) as ws:
            await ws.send(b'echo re""ady\r')
            await output_until(ws, b"ready\r\n", bytearray())
            await served.services.pod_shells.sweep()  # still signed in: nothing ends
            assert len(served.services.pod_shells.sessions(pod_id)) == 1
            if how == "the user disabled":
                await served.services.accounts.set_disabled(admin.user, bob.user.id, True)
            else:
                await served.services.accounts.revoke_key(bob.user, bob.record.id)
            await served.services.pod_shells.sweep()
            texts, code, reason = await last_frames(ws)
    ended = "its console sign-in no longer lets bob in"
    assert [t["ended"] for t in texts] == [ended]
    assert (code, reason) == (1000, ended)
    await logged(served, pod_id, rf"session 1 of bob closed after \d+ s: {ended}")


async def test_a_stopped_pod_is_refused_saying_so(served: Served) -> None:
    pod_id = await running_pod(served)
    await served.admin.post(
        f"/v1/pods/{pod_id}/stop", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    await until_status(served, pod_id, "stopped")
    async with terminal(served, pod_id) as ws:
        texts, code, _ = await last_frames(ws)
    assert code == 4409 and "stopped" in texts[0]["error"], texts


@pytest.mark.parametrize(
    ("query", "frame", "said"),
    [
        ("?cols=0&rows=24", None, "cols: a whole number from 1 to 1000"),
        ("?cols=80", None, "both cols and rows"),
        ("?cols=eighty&rows=24", None, "whole numbers"),
        ("", b"ls\r", "the first frame says the size"),
        ("", "[80, 24]", '{"resize": [cols, rows]}'),
        ("?cols=80&rows=24", "hello", "not JSON"),
        ("?cols=80&rows=24", '{"resize": [80]}', '{"resize": [cols, rows]}'),
        ("?cols=80&rows=24", '{"resize": [80, 100000]}', "rows: a whole number from 1 to 1000"),
        ("?cols=80&rows=24", '{"resize": [true, 24]}', "cols: a whole number"),
        ("?cols=80&rows=24", '{"resize": [80, 24], "more": 1}', '{"resize": [cols, rows]}'),
    ],
)
async def test_bad_input_is_said_and_closed_never_a_crash(
    served: Served, query: str, frame: str | bytes | None, said: str
) -> None:
    pod_id = await running_pod(served)
    async with terminal(served, pod_id, query=query) as ws:
        if frame is not None:
            await ws.send(frame)
        texts, code, reason = await last_frames(ws)
    assert code == 4400, (code, reason)
    assert said in texts[-1]["error"], texts
    assert served.services.pod_shells.sessions() == []
    # The server still serves: the next session opens.
    async with terminal(served, pod_id) as ws:
        await ws.send(b"echo $((6*7))\r")
        await output_until(ws, b"42\r\n", bytearray())


async def test_the_page_has_the_terminal_with_a_style_nonce(served: Served) -> None:
    pod_id = await running_pod(served)
    page = await served.admin.get(f"/console/pods/{pod_id}/terminal")
    assert page.status_code == 200, page.text
    assert 'data-terminal data-socket="/console/pods/' in page.text
    nonce = re.search(r'data-style-nonce="([^"]+)"', page.text)
    assert nonce is not None
    policy = page.headers.get_list("content-security-policy")
    assert len(policy) == 1, policy
    assert f"style-src-elem 'self' 'nonce-{nonce[1]}'" in policy[0]
    assert "script-src 'self';" in policy[0]
    # The pod's page lists the terminal in its Connect menu, and says SSH is off here.
    pod_page = await served.admin.get(f"/console/pods/{pod_id}")
    assert f'href="/console/pods/{pod_id}/terminal"' in pod_page.text
    assert "SKIFF_SSH_PORT" in pod_page.text
    # Stopped, its terminal page says so and opens no socket.
    await served.admin.post(
        f"/v1/pods/{pod_id}/stop", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    await until_status(served, pod_id, "stopped")
    stopped = await served.admin.get(f"/console/pods/{pod_id}/terminal")
    assert "The pod is stopped" in stopped.text and "data-terminal " not in stopped.text


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_the_connect_menu_gives_the_ssh_commands_when_ssh_is_on(tmp_path: Path) -> None:
    own_port = free_port()
    async with serving(tmp_path, ssh_port=0, ssh_pod_ports=f"{own_port}-{own_port}") as served:
        pod_id = await running_pod(served)

        async def menu() -> str | None:
            page = (await served.admin.get(f"/console/pods/{pod_id}")).text
            return page if page.count("data-ssh-command") == 2 else None

        page = await eventually_async(menu, "the pod's two SSH commands on its page")
        gateway = served.services.pod_shells.gateway_port
        assert gateway is not None
        commands = re.findall(r"<code data-ssh-command>([^<]+)</code>", page)
        # Its own port as /v1 gives it, then the server's SSH port with its id as the user.
        assert commands == [
            f"ssh root@127.0.0.1 -p {own_port}",
            f"ssh {pod_id}@127.0.0.1 -p {gateway}",
        ]
        pod = await served.admin.get(
            f"/v1/pods/{pod_id}", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        )
        assert pod.json()["ssh"]["command"] == commands[0]
        assert "SKIFF_SSH_PORT" not in page
