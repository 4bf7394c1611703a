"""The in-process layer: the whole app (both interfaces, the console, the background loops) on a
real SQLite file, reached through ``httpx.ASGITransport`` instead of a socket and a subprocess
(the fixture ``in_process`` is in ``tests/integration/api/conftest.py``). It is what a test of
the interfaces' behaviour uses when the HTTP server, the process or the runpod SDK is not what
it tests; those have ``tests/e2e``.

The app's lifespan runs as ``skiff serve`` runs it (store opened, administrator key made,
leadership taken, loops started), so what answers here is the composed app, not a fake.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from skiff.app import create_app
from skiff.clock import Clock
from skiff.config import Settings
from skiff.services.hub import Services

ADMIN_KEY = "skiff-in-process-admin-key"
_names = itertools.count()


@dataclass
class InProcess:
    """A running app and clients for each kind of caller."""

    services: Services
    #: Authenticated as the administrator (``Authorization: Bearer``).
    http: httpx.AsyncClient
    #: No credentials at all.
    anonymous: httpx.AsyncClient
    transport: httpx.ASGITransport

    async def create_template(self) -> str:
        """A new template of a local worker; its id."""
        template = await self.http.post(
            "/v1/templates",
            json={
                "name": f"tpl-{next(_names)}",
                "imageName": "local/worker",
                "dockerStartCmd": ["python", "-c", "pass"],
            },
        )
        assert template.status_code == 200, template.text
        return str(template.json()["id"])

    async def create_endpoint(self, **fields: Any) -> dict[str, Any]:
        body = {"templateId": await self.create_template(), "computeType": "CPU", **fields}
        endpoint = await self.http.post("/v1/endpoints", json=body)
        assert endpoint.status_code == 200, endpoint.text
        return dict(endpoint.json())

    async def new_user(self, name: str) -> tuple[str, str]:
        """A user the administrator makes: its key and its id."""
        admin = await self.services.auth.authenticate(ADMIN_KEY)
        key = (await self.services.accounts.create_user(admin, name)).key
        return key, (await self.services.auth.authenticate(key)).id

    def as_user(self, key: str) -> httpx.AsyncClient:
        """A client calling with ``key`` (``Authorization: Bearer``)."""
        return httpx.AsyncClient(
            transport=self.transport,
            base_url=str(self.http.base_url),
            headers={"Authorization": f"Bearer {key}"},
        )

    async def worker(self, endpoint_id: str) -> httpx.AsyncClient:
        """A client that speaks the worker protocol for ``endpoint_id`` with its token, as an
        external worker would."""
        token = await self.services.auth.worker_token(endpoint_id)
        return httpx.AsyncClient(
            transport=self.transport,
            base_url=str(self.http.base_url),
            headers={"Authorization": token},
        )


@contextlib.asynccontextmanager
async def running(
    data_dir: Path, clock: Clock | None = None, **more: Any
) -> AsyncIterator[InProcess]:
    """The app on ``data_dir`` with its lifespan running, and its clients; ``clock``: its time
    (the system's by default); ``more`` are further settings."""
    settings = Settings(
        data_dir=data_dir,
        api_key=ADMIN_KEY,
        # Tests that wait on a long-poll should not wait long for an empty answer.
        wait_poll_seconds=1.0,
        **more,
    )
    app = create_app(settings, clock=clock)
    transport = httpx.ASGITransport(app=app)
    base = "http://skiff.test"
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport,
            base_url=base,
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        ) as http,
        httpx.AsyncClient(transport=transport, base_url=base) as anonymous,
    ):
        yield InProcess(
            services=app.state.services, http=http, anonymous=anonymous, transport=transport
        )


@contextlib.asynccontextmanager
async def running_on(store: str, data_dir: Path, **more: Any) -> AsyncIterator[InProcess]:
    """``running`` on ``store``: "sqlite" (a file in ``data_dir``) or "postgresql" (a schema
    of its own on the test server, dropped after); ``more``: settings, as ``running``'s."""
    if store == "sqlite":
        async with running(data_dir, **more) as app:
            yield app
        return
    from pgtest import PG_DSN, fresh_schema

    async with (
        fresh_schema() as schema,
        running(data_dir, database_url=PG_DSN, database_schema=schema, **more) as app,
    ):
        yield app
