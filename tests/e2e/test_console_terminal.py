"""A pod's terminal in the console, in headless Chromium against a real ``skiff serve`` with a
real local pod: the pod page's Connect menu (the terminal, SSH off and how to turn it on, the
pod's ports), then the terminal page: a command typed and its output read from xterm.js's rows,
the terminal following the window's size, copy and paste, and the note when the session ends.
Screenshots go under ``artifacts/console/`` as ``test_console.py``'s do."""

from __future__ import annotations

import re
from typing import Any

from harness import Server, free_port
from test_console import LAPTOP, browser, expect_text, page, shot, sign_in

from pod_programs import pod_port

__all__ = ["browser", "page"]

#: A sleeper pod, with an http and a tcp port for the Connect menu to list.
POD = {
    "name": "console-shell",
    "imageName": "local/shell",
    "computeType": "CPU",
    "dockerStartCmd": ["sleep", "1000"],
    "volumeInGb": 0,
}


def running_pod(server: Server, **fields: Any) -> dict[str, Any]:
    made = server.http.post("/v1/pods", json={**POD, **fields})
    assert made.status_code == 201, made.text
    pod_id = made.json()["id"]

    def placed() -> dict[str, Any] | None:
        pod = dict(server.http.get(f"/v1/pods/{pod_id}").json())
        return pod if pod["status"] == "running" else None

    return dict(server.wait_for(placed, what=f"pod {pod_id} to run"))


def terminal_size(page: Any) -> tuple[int, int]:
    """What ``stty size`` says in the terminal now (rows, cols)."""
    marker = f"size-{free_port()}"
    # The marker is printed joined to the size, so the command's own echo never matches.
    page.keyboard.type(f'echo "$(stty size)"-{marker}')
    page.keyboard.press("Enter")
    rows = page.locator(".xterm-rows")
    expect_text(rows, rf"\d+ \d+-{marker}")
    found = re.search(rf"(\d+) (\d+)-{marker}", rows.inner_text())
    assert found is not None
    return int(found[1]), int(found[2])


def test_a_pods_terminal_runs_a_command_resizes_copies_pastes_and_ends(
    page: Any, server: Server
) -> None:
    http_port, tcp_port = pod_port(), pod_port()
    pod = running_pod(server, ports=[f"{http_port}/http", f"{tcp_port}/tcp"])
    # Content-Security-Policy refusals show as console errors: the page must cause none.
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    sign_in(page, server)

    # The pod's Connect menu: the terminal, SSH (off on this server: how to turn it on), and
    # each port with where it is reached.
    page.goto(f"{server.url}/console/pods/{pod['id']}")
    page.locator("[data-connect] > summary").click()
    menu = page.locator(".connect-menu")
    expect_text(menu.locator("[data-ssh-off]"), "SKIFF_SSH_PORT")
    ways = menu.locator("[data-port-ways]")
    link = ways.get_by_role("link", name=f"http://127.0.0.1:{http_port}")
    assert link.get_attribute("href") == f"http://127.0.0.1:{http_port}"
    expect_text(ways, rf"{tcp_port}/tcp → 127\.0\.0\.1:{tcp_port}")
    shot(page, "pod-connect")
    menu.get_by_role("link", name="Open a terminal").click()

    # The terminal: a command typed, its output read from xterm.js's rows.
    page.get_by_role("heading", name=re.compile("Terminal")).wait_for()
    status = page.locator("[data-terminal-status]")
    expect_text(status, "Connected")
    rows = page.locator(".xterm-rows")
    expect_text(rows, r"\$")  # the shell's prompt: typed before it, keys would echo twice
    # A plain prompt: the screenshot shows no name of the machine it was taken on.
    page.keyboard.type("PS1='pod$ '; clear")
    page.keyboard.press("Enter")
    page.keyboard.type("echo $((6*7))-answer")
    page.keyboard.press("Enter")
    expect_text(rows, "42-answer")

    # The terminal follows the window: a narrower one makes the shell's terminal narrower.
    before = terminal_size(page)
    page.set_viewport_size({"width": 800, "height": 600})
    page.wait_for_function(
        "() => document.querySelector('.xterm-rows').children.length > 0", timeout=5_000
    )
    after = terminal_size(page)
    assert after[1] < before[1] and after[0] < before[0], (before, after)
    page.set_viewport_size(LAPTOP)

    # Copy: a word selected (double-click), Ctrl+Shift+C; paste: Ctrl+Shift+V types it.
    page.keyboard.type("echo copied-$((40+2))")
    page.keyboard.press("Enter")
    box = rows.get_by_text("copied-42", exact=True).last.bounding_box()
    # xterm.js takes the mouse on the screen above its rows, as a person's double-click.
    page.mouse.dblclick(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.keyboard.press("Control+Shift+C")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert "copied-42" in copied, copied
    page.evaluate("navigator.clipboard.writeText('echo pasted-$((50+5))')")
    page.locator(".xterm").click()
    page.keyboard.press("Control+Shift+V")
    page.keyboard.press("Enter")
    expect_text(rows, "pasted-55")
    shot(page, "pod-terminal")

    # The shell exits: the page says how the session ended.
    page.keyboard.type("exit 3")
    page.keyboard.press("Enter")
    expect_text(status, "Session ended: exit code 3")
    expect_text(rows, r"\[Session ended: exit code 3\]")
    assert not [p for p in problems if "Content Security Policy" in p or "Refused" in p], problems
    shot(page, "pod-terminal-ended")

    # A new session, ended by the pod stopping under it.
    page.get_by_role("link", name="Open a new session").click()
    expect_text(status, "Connected")
    expect_text(rows, r"\$")
    assert server.http.post(f"/v1/pods/{pod['id']}/stop").status_code == 200
    expect_text(status, "Session ended: the pod stopped")

    # Its opening and closing are in the pod's log.
    page.get_by_role("link", name="pod's log").click()
    expect_text(page.locator("[data-log]"), r"session \d+ opened by \S+ .* over console")
    expect_text(page.locator("[data-log]"), r"session 1 of \S+ closed after \d+ s: exit code 3")
    expect_text(page.locator("[data-log]"), r"session 2 of \S+ closed after \d+ s")
    server.http.delete(f"/v1/pods/{pod['id']}")
