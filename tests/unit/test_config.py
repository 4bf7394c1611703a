"""Settings read from the environment: names that changed keep working."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from skiff.config import Settings


def test_the_take_wait_is_read_under_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKIFF_TAKE_WAIT_SECONDS", "9")
    assert Settings().take_wait_seconds == 9


def test_the_take_wait_is_still_read_under_its_earlier_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SKIFF_TAKE_WAIT_SECONDS", raising=False)
    monkeypatch.setenv("SKIFF_TAKE_HOLD_SECONDS", "7")
    assert Settings().take_wait_seconds == 7


def test_the_take_wait_keeps_its_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKIFF_TAKE_WAIT_SECONDS", "80")
    with pytest.raises(ValueError, match="take_wait_seconds"):
        Settings()


PIDS_LIMITS = ["container_pids_limit", "process_pids_limit"]


@pytest.mark.parametrize("field", PIDS_LIMITS)
def test_the_pids_limits_are_4096_unless_set(monkeypatch: pytest.MonkeyPatch, field: str) -> None:
    name = f"SKIFF_{field.upper()}"
    monkeypatch.delenv(name, raising=False)
    assert getattr(Settings(), field) == 4096
    monkeypatch.setenv(name, "0")  # none set by skiff
    assert getattr(Settings(), field) == 0


@pytest.mark.parametrize("field", PIDS_LIMITS)
@pytest.mark.parametrize("value", ["-1", "8", "63", "4194305", "many"])
def test_a_pids_limit_below_64_or_past_the_kernels_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str, field: str
) -> None:
    monkeypatch.setenv(f"SKIFF_{field.upper()}", value)
    with pytest.raises(ValueError, match=field):
        Settings()


def test_each_log_is_paced_at_1_mib_a_second_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKIFF_LOG_BYTES_PER_SECOND", raising=False)
    assert Settings().log_bytes_per_second == 1024 * 1024
    monkeypatch.setenv("SKIFF_LOG_BYTES_PER_SECOND", "0")  # no pace
    assert Settings().log_bytes_per_second == 0


@pytest.mark.parametrize("value", ["-1", "1", "262143", "fast"])
def test_a_log_pace_too_slow_to_drain_an_ended_worker_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SKIFF_LOG_BYTES_PER_SECOND", value)
    with pytest.raises(ValueError, match="log_bytes_per_second"):
        Settings()


def test_process_limits_are_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKIFF_PROCESS_LIMITS", raising=False)
    assert Settings().process_limits is True
    monkeypatch.setenv("SKIFF_PROCESS_LIMITS", "off")
    assert Settings().process_limits is False
    monkeypatch.setenv("SKIFF_PROCESS_LIMITS", "sometimes")
    with pytest.raises(ValueError, match="process_limits"):
        Settings()


def test_the_data_and_volumes_directories_are_absolute_from_where_the_server_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Everything skiff hands on (a pod's volume to bwrap or Docker) is made from these two.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SKIFF_DATA_DIR", raising=False)
    monkeypatch.setenv("SKIFF_VOLUMES_DIR", "shared/volumes")
    settings = Settings()
    assert settings.data_dir == tmp_path / ".skiff"
    assert settings.volumes_path() == tmp_path / "shared" / "volumes"
    monkeypatch.delenv("SKIFF_VOLUMES_DIR")
    assert Settings(data_dir=Path("state/../data")).volumes_path() == tmp_path / "data" / "volumes"


def test_ssh_is_off_unless_its_port_is_set_and_pods_get_the_hundred_ports_after_it() -> None:
    assert Settings().ssh_port is None and Settings().ssh_pod_port_range() is None
    assert Settings(ssh_port=2222).ssh_pod_port_range() == range(2223, 2323)
    assert Settings(ssh_port=65500).ssh_pod_port_range() == range(65501, 65536)
    assert Settings(ssh_port=2222, ssh_pod_ports="3000-3009").ssh_pod_port_range() == range(
        3000, 3010
    )
    assert Settings(ssh_port=2222, ssh_pod_ports="off").ssh_pod_port_range() is None
    assert Settings(ssh_port=0).ssh_pod_port_range() is None


@pytest.mark.parametrize("ports", ["3010-3000", "0-5", "2222", "a-b", "1-70000"])
def test_a_pod_port_range_out_of_order_or_not_a_range_is_refused(ports: str) -> None:
    with pytest.raises(ValidationError, match="ssh_pod_ports"):
        Settings(ssh_port=2222, ssh_pod_ports=ports)
