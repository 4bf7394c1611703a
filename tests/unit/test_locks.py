"""The two lock files: ``requirements.lock`` (what running skiff and the walk-through's workers
need, installed by the README's run command) and ``requirements-dev.lock`` (that plus the test and
benchmark tools, installed by ``scripts/test``) pin every package, and agree with each other and
with ``pyproject.toml``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)$")


def _name(requirement: str) -> str:
    return re.split(r"[\[=<>~!; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _pins(lock: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / lock).read_text().splitlines():
        if not line or line.startswith((" ", "#")):
            continue
        match = PIN.match(line)
        assert match, f"{lock}: not an exact pin: {line!r}"
        pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


def _declared(*extras: str) -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    return {_name(r): r.split("==", 1)[1] for r in requirements}


def test_run_lock_pins_the_server_and_the_worker_sdk_at_their_declared_versions() -> None:
    pins = _pins("requirements.lock")
    for name, version in _declared("worker").items():
        assert pins.get(name) == version, name


def test_run_lock_leaves_the_test_and_benchmark_tools_out() -> None:
    pins = _pins("requirements.lock")
    for tool in ("pytest", "mypy", "ruff", "schemathesis", "playwright", "matplotlib"):
        assert tool not in pins


def test_dev_lock_pins_everything_declared() -> None:
    pins = _pins("requirements-dev.lock")
    for name, version in _declared("worker", "test", "bench").items():
        assert pins.get(name) == version, name


def test_both_locks_pin_each_shared_package_to_the_same_version() -> None:
    run, dev = _pins("requirements.lock"), _pins("requirements-dev.lock")
    assert {name: version for name, version in run.items() if dev.get(name) != version} == {}
