"""Files that no record names, which a crash leaves when it cuts a delete or a create in the
middle (a record goes before its files, a volume's directory is made before its record): the
leader removes them, and nothing that a record still names. The real services on a real SQLite
store and real directories."""

from __future__ import annotations

import os
import time
from pathlib import Path

from eventually import eventually_async
from in_process import running
from skiff.domain.endpoints import ComputeType, Endpoint, EndpointSpec
from skiff.domain.users import User
from skiff.domain.volumes import NetworkVolumeCreate
from skiff.services.hub import Services
from skiff.services.volumes import ORPHAN_GRACE_SECONDS

LIVE = "live0000000001"
GONE = "gone0000000001"


def _files_of(services: Services, endpoint_id: str) -> tuple[Path, Path]:
    """An endpoint's worker home and log folder, made with a file in each."""
    home = services.fleet.home(endpoint_id, "w1")
    home.mkdir(parents=True)
    (home / "model.bin").write_bytes(b"x" * 1024)
    logs = services.settings.data_dir / "logs" / endpoint_id
    logs.mkdir(parents=True)
    (logs / "w1.log").write_text("a line\n")
    return home, logs


async def test_the_files_of_an_endpoint_deleted_before_them_are_removed(
    local_services: Services,
) -> None:
    services = local_services
    await services.store.create_endpoint(
        Endpoint(
            id=LIVE,
            userId="u1",
            version=1,
            createdAt=services.clock.now(),
            spec=EndpointSpec(name="ep", templateId="t1", computeType=ComputeType.CPU),
        )
    )
    live_home, live_logs = _files_of(services, LIVE)
    gone_home, gone_logs = _files_of(services, GONE)

    assert await services.fleet.remove_files_of_deleted() == [GONE]

    assert not gone_home.exists() and not gone_logs.exists()
    assert (live_home / "model.bin").exists() and (live_logs / "w1.log").exists()


def _aged(path: Path, seconds: float) -> Path:
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


async def test_a_volume_directory_without_a_record_is_removed_once_it_is_old_enough(
    local_services: Services,
) -> None:
    services = local_services
    user = User(id="u1", name="alice", is_admin=False, created_at=services.clock.now())
    volume = (await services.volumes.create(user, NetworkVolumeCreate(name="v", size=1))).volume
    root = services.volumes.path(volume.id).parent
    _aged(services.volumes.path(volume.id), ORPHAN_GRACE_SECONDS * 2)
    orphan = root / GONE
    orphan.mkdir()
    (orphan / "weights.bin").write_bytes(b"x" * 1024)
    _aged(orphan, ORPHAN_GRACE_SECONDS * 2)
    # Being made by a create on another replica, its record a moment away.
    fresh = root / "made0000000001"
    fresh.mkdir()
    # The pods' volumes live among the network volumes, in a folder no record names.
    pods = root / "pods"
    pods.mkdir(exist_ok=True)
    _aged(pods, ORPHAN_GRACE_SECONDS * 2)

    assert await services.volumes.remove_orphans() == [GONE]

    assert not orphan.exists()
    assert services.volumes.path(volume.id).exists() and fresh.exists() and pods.exists()


async def test_a_server_started_after_a_crash_removes_what_it_left(tmp_path: Path) -> None:
    """As a replica begins leading: the endpoint whose delete was cut off, and the volume whose
    create or delete was, lose their files."""
    data = tmp_path / "data"
    home = data / "workers" / GONE / "w1" / "home"
    home.mkdir(parents=True)
    logs = data / "logs" / GONE
    logs.mkdir(parents=True)
    volume = _aged(_made(data / "volumes" / GONE), ORPHAN_GRACE_SECONDS * 2)

    async with running(data) as app:
        await eventually_async(
            lambda: _all_gone(home.parent.parent, logs, volume), "the leftovers removed"
        )
        assert (await app.http.get("/v1/endpoints")).status_code == 200


def _made(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "weights.bin").write_bytes(b"x" * 1024)
    return path


async def _all_gone(*paths: Path) -> bool:
    return not any(p.exists() for p in paths)
