"""API keys: made once at first start, managed with the CLI, stored only as hashes."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
from harness import Server


def KeylessServer(data_dir: Path, port: int | None = None) -> Server:
    """Started without SKIFF_API_KEY, as a new user would."""
    return Server(
        data_dir, port=port, env={"SKIFF_API_KEY": None, "SKIFF_KEY_CACHE_SECONDS": "0.5"}
    )


def _cli(data_dir: Path, *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "skiff", *args, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("SKIFF_")},
    ).stdout


def test_first_start_prints_an_admin_key_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    server = KeylessServer(tmp_path / "data")
    server.start()
    try:
        found = re.findall(r"^\s+(sk_\S+)\s*$", server.log_path.read_text(), re.M)
        assert len(found) == 1
        key = found[0]
        response = httpx.get(
            f"{server.url}/v1/endpoints", headers={"Authorization": f"Bearer {key}"}
        )
        assert response.status_code == 200
    finally:
        server.stop()
    with sqlite3.connect(tmp_path / "data" / "skiff.db") as db:
        stored = " ".join(str(row) for row in db.execute("SELECT * FROM api_keys"))
    assert key not in stored

    again = KeylessServer(tmp_path / "data", port=server.port)
    again.log_path = tmp_path / "second.log"
    again.start()
    try:
        assert "sk_" not in again.log_path.read_text()
    finally:
        again.stop()


def test_keys_created_and_revoked_with_the_cli(tmp_path: Path) -> None:
    server = KeylessServer(tmp_path / "data")
    server.start()
    try:
        key = _cli(server.data_dir, "keys", "create", "--user", "carol", "--label", "ci").strip()
        headers = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{server.url}/v1/templates", headers=headers).status_code == 200
        listing = _cli(server.data_dir, "keys", "list")
        row = next(line for line in listing.splitlines() if "carol" in line)
        assert key not in listing and "active" in row
        _cli(server.data_dir, "keys", "revoke", row.split()[0])
        server.wait_for(
            lambda: httpx.get(f"{server.url}/v1/templates", headers=headers).status_code == 401,
            what="the revoked key to be refused",
        )
        assert "revoked" in _cli(server.data_dir, "keys", "list")
    finally:
        server.stop()
