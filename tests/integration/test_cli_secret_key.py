"""A server started without the key its database's secrets were encrypted with (the key file
lost, another ``SKIFF_SECRET_KEY``) refuses to start with one ``Error:`` line, before it
serves anything or makes up a new key (store/sealing.py, secret_keys.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet


def skiff(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SKIFF_")}
    return subprocess.run(
        [sys.executable, "-m", "skiff", *args],
        env={**clean, **env, "SKIFF_DATA_DIR": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_first_start_makes_a_private_key_file(tmp_path: Path) -> None:
    assert skiff(tmp_path, "migrate").returncode == 0
    key_file = tmp_path / "data" / "secret.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert len(key_file.read_text().split()) == 1


def test_serve_with_the_key_file_missing_refuses_to_start(tmp_path: Path) -> None:
    assert skiff(tmp_path, "keys", "create").returncode == 0
    key_file = tmp_path / "data" / "secret.key"
    key_file.unlink()
    result = skiff(tmp_path, "serve", "--port", "0")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: the database holds secrets encrypted with the key in ")
    assert f"{key_file}, which is missing" in line
    assert not key_file.exists()  # no new key made up over the old secrets
    assert result.stdout == ""


def test_serve_with_another_key_refuses_to_start(tmp_path: Path) -> None:
    assert skiff(tmp_path, "keys", "create").returncode == 0
    result = skiff(
        tmp_path, "serve", "--port", "0", SKIFF_SECRET_KEY=Fernet.generate_key().decode()
    )
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: the secret key given does not open the secrets in the database")


def test_a_malformed_secret_key_is_refused_without_showing_it(tmp_path: Path) -> None:
    result = skiff(tmp_path, "serve", SKIFF_SECRET_KEY="not-a-key")
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: SKIFF_SECRET_KEY=(hidden) is not allowed")
    assert "not-a-key" not in line
