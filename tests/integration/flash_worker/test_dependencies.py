"""A request's pip packages are installed with real pip, once per dependency set: the second
call finds them in the cache (whatever their order), and a failure names what did not install
and leaves nothing half-installed behind."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from flash_programs import PACKAGE, build_wheel
from skiff.flash_worker import dependencies
from skiff.flash_worker.dependencies import DependencyError, ensure_installed, target_for


@pytest.fixture
def offline_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wheels = tmp_path / "wheels"
    build_wheel(wheels)
    build_wheel(wheels, "skiffextra")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield wheels
    sys.modules.pop(PACKAGE, None)
    sys.modules.pop("skiffextra", None)


def test_a_dependency_set_is_installed_once(offline_index: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert ensure_installed([PACKAGE, "skiffextra"], cache) is True
    assert importlib.import_module(PACKAGE).intword(2_000_000) == "2.0 million"
    assert ensure_installed(["skiffextra", PACKAGE, PACKAGE], cache) is False  # same set, any order
    target = target_for([PACKAGE, "skiffextra"], cache)
    assert (target / ".complete").read_text().split() == [PACKAGE, "skiffextra"]
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no staging left


def test_a_failed_install_names_the_package_and_leaves_no_cache(
    offline_index: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(DependencyError) as failed:
        ensure_installed([f"{PACKAGE}==9.9"], cache)
    assert f"pip could not install {PACKAGE}==9.9" in str(failed.value)
    assert "No matching distribution" in str(failed.value)
    assert list((cache / "deps").iterdir()) == []


def test_the_cache_is_the_endpoints_volume_else_the_endpoints_own_else_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SKIFF_FLASH_CACHE", raising=False)
    homes = tmp_path / "workers" / "ep1"
    homes.mkdir(parents=True)
    monkeypatch.setenv("SKIFF_FLASH_ENDPOINT_CACHE", str(homes / ".flash-cache"))
    monkeypatch.setattr(dependencies, "VOLUME", tmp_path)
    assert dependencies.cache_root() == tmp_path / ".skiff-flash"
    monkeypatch.setattr(dependencies, "VOLUME", tmp_path / "none")
    assert dependencies.cache_root() == homes / ".flash-cache"
    # A path this worker cannot write (a container told the host's): its home instead.
    monkeypatch.setenv("SKIFF_FLASH_ENDPOINT_CACHE", "/nonexistent/ep1/.flash-cache")
    assert dependencies.cache_root() == Path.home() / ".cache" / "skiff-flash"
    monkeypatch.setenv("SKIFF_FLASH_CACHE", str(tmp_path / "named"))
    assert dependencies.cache_root() == tmp_path / "named"


def test_a_missing_system_package_is_named_where_it_cannot_be_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dependencies.os, "geteuid", lambda: 1000)
    with pytest.raises(DependencyError) as failed:
        dependencies.ensure_system(["sh", "no-such-package-skiff"])
    assert "system packages no-such-package-skiff are not installed" in str(failed.value)
