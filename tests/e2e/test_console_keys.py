"""The console's API keys page (every user's) and Users page (the administrator's) in headless
Chromium against a real server, on SQLite and PostgreSQL: a key made and shown once, usable at
once with its permissions, revoked and refused; a user made, disabled (their keys and console
session refused) and enabled again; a narrower key cannot open a console session."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server, running
from test_console import LAPTOP, browser, expect_text, shot, sign_in

from pgtest import PG_DSN, fresh_schema_sync

__all__ = ["browser"]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    env: dict[str, str | None] = {"SKIFF_KEY_CACHE_SECONDS": "0.5"}
    data: Path = tmp_path_factory.mktemp("console-keys") / "data"
    if request.param == "sqlite":
        with running(data, env=env) as made:
            yield made
        return
    # Playwright's loop runs in this thread: the schema is made and dropped in another.
    schemas = fresh_schema_sync()
    with ThreadPoolExecutor(1) as aside:
        schema = aside.submit(schemas.__enter__).result()
        try:
            env |= {"SKIFF_DATABASE_URL": PG_DSN, "SKIFF_DATABASE_SCHEMA": schema}
            with running(data, env=env) as made:
                yield made
        finally:
            aside.submit(schemas.__exit__, None, None, None).result()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=LAPTOP)
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


def _status(server: Server, key: str, method: str = "GET", path: str = "/v1/endpoints") -> int:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        headers = {"Authorization": f"Bearer {key}"}
        return client.request(method, path, headers=headers, json={}).status_code


def _sign_in_with(page: Any, server: Server, key: str) -> None:
    page.goto(f"{server.url}/console")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()


def test_a_key_is_made_shown_once_used_and_revoked(page: Any, server: Server) -> None:
    sign_in(page, server)
    page.get_by_role("link", name="API keys").click()
    page.get_by_role("heading", name="API keys").wait_for()
    page.get_by_label("Name", exact=True).fill("dashboard")
    page.get_by_label("Permissions").select_option("read")
    page.get_by_role("button", name="Make key").click()
    expect_text(page.locator("[data-new-key]"), "shown this once")
    key = page.locator("#new-key").inner_text().strip()
    assert key.startswith("sk_")
    shot(page, "keys-made")
    row = page.locator('tr[data-key="dashboard"]')
    expect_text(row, "read")
    # Shown once: the list, loaded again, has only its hint.
    page.goto(f"{server.url}/console/keys")
    assert key not in page.content()
    assert _status(server, key) == 200
    assert _status(server, key, "POST", "/v1/templates") == 401
    # A read-only key opens no console session (a session has all its user's rights).
    other = page.context.browser.new_context()
    try:
        narrow = other.new_page()
        _sign_in_with(narrow, server, key)
        expect_text(narrow.locator("body"), "permissions are read")
    finally:
        other.close()

    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke key dashboard").click()
    expect_text(page.locator(".notice"), "revoked")
    expect_text(page.locator('tr[data-key="dashboard"]'), "revoked")
    server.wait_for(lambda: _status(server, key) == 401, timeout=10, what="the key refused")


def test_a_restricted_key_is_made_for_one_endpoint(page: Any, server: Server) -> None:
    endpoint = server.create_endpoint(name="console-restricted")
    sign_in(page, server)
    page.goto(f"{server.url}/console/keys")
    page.get_by_label("Name", exact=True).fill("ci")
    page.get_by_label("Permissions").select_option("restricted")
    page.get_by_role("button", name="Make key").click()
    # No endpoint chosen: refused, saying so, nothing made.
    expect_text(page.locator("#e-endpoints"), "names its endpoints")
    page.get_by_label("Permissions").select_option("restricted")
    page.locator(f"#f-endpoint-{endpoint['id']}").select_option("read_write")
    page.get_by_role("button", name="Make key").click()
    key = page.locator("#new-key").inner_text().strip()
    assert _status(server, key, "GET", f"/v2/{endpoint['id']}/health") == 200
    assert _status(server, key) == 401


def test_the_administrator_makes_disables_and_enables_a_user(
    page: Any,
    browser: Any,
    server: Server,
) -> None:
    sign_in(page, server)
    page.get_by_role("link", name="Users").click()
    page.get_by_role("heading", name="Users").wait_for()
    page.get_by_label("Name", exact=True).fill("Not A Name")
    page.get_by_role("button", name="Make user").click()
    expect_text(page.locator("#e-name"), "lowercase")
    page.get_by_label("Name", exact=True).fill("dana")
    page.get_by_role("button", name="Make user").click()
    dana_key = page.locator("#new-key").inner_text().strip()
    assert _status(server, dana_key) == 200
    shot(page, "users")

    # Dana signs in; the Users page is not hers.
    dana_context = browser.new_context()
    try:
        dana = dana_context.new_page()
        _sign_in_with(dana, server, dana_key)
        dana.get_by_role("heading", name="Endpoints").wait_for()
        assert dana.get_by_role("link", name="Users").count() == 0
        dana.goto(f"{server.url}/console/users")
        dana.get_by_role("heading", name="Not found").wait_for()

        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Disable user dana").click()
        expect_text(page.locator('tr[data-user="dana"]'), "disabled")
        server.wait_for(lambda: _status(server, dana_key) == 401, timeout=10, what="refused")
        dana.goto(f"{server.url}/console/keys")
        dana.get_by_role("heading", name="Sign in to skiff").wait_for()

        page.get_by_role("button", name="Enable user dana").click()
        expect_text(page.locator('tr[data-user="dana"]'), "active")
        server.wait_for(lambda: _status(server, dana_key) == 200, timeout=10, what="accepted")
    finally:
        dana_context.close()
