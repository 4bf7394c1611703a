"""``skiff`` with a setting it cannot read says so in one ``Error:`` line per setting (the
variable, its value, what is allowed), exits 1 and starts nothing: no traceback, no data
directory made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def skiff(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SKIFF_")}
    return subprocess.run(
        [sys.executable, "-m", "skiff", *args],
        env={**clean, **env, "SKIFF_DATA_DIR": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("variable", "value", "allowed"),
    [
        ("SKIFF_PROVIDER", "Docker", "one of 'local', 'docker', 'ray'"),
        ("SKIFF_PORT", "abc", "a whole number at least 0 and at most 65535"),
        ("SKIFF_TAKE_WAIT_SECONDS", "100", "a number more than 0 and less than 80"),
    ],
)
def test_a_bad_setting_is_one_error_line_naming_it_its_value_and_what_is_allowed(
    tmp_path: Path, variable: str, value: str, allowed: str
) -> None:
    result = skiff(tmp_path, "serve", **{variable: value})
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"Error: {variable}={value!r} is not allowed: {allowed}"]
    assert not (tmp_path / "data").exists()


def test_every_bad_setting_gets_its_own_line_on_every_command(tmp_path: Path) -> None:
    result = skiff(tmp_path, "migrate", SKIFF_PROVIDER="k8s", SKIFF_SANDBOX="maybe")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("Error: SKIFF_") for line in lines), lines
    assert "Traceback" not in result.stderr
