"""The in-process app (``tests/in_process.py``), and a console client signed in to it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from in_process import ADMIN_KEY, InProcess, running


@pytest.fixture
async def in_process(tmp_path: Path) -> AsyncIterator[InProcess]:
    async with running(tmp_path / "data") as app:
        yield app


@pytest.fixture
async def console(in_process: InProcess) -> AsyncIterator[httpx.AsyncClient]:
    """A browser's view: cookies kept, signed in with the administrator's key."""
    async with httpx.AsyncClient(
        transport=in_process.transport, base_url=str(in_process.http.base_url)
    ) as client:
        form = await client.get("/console")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token is not None, form.text
        signed_in = await client.post(
            "/console/login", data={"csrf": token.group(1), "api_key": ADMIN_KEY, "next": ""}
        )
        assert signed_in.status_code == 303, signed_in.text
        yield client
