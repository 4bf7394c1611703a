"""The command line that runs a local worker with its network volume through bubblewrap
(providers/bubblewrap.py), built from a root directory of the test's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from skiff.providers import bubblewrap
from skiff.providers.base import VOLUME_MOUNT_PATH


def test_the_mount_point_is_made_in_bwraps_root_and_host_entries_are_bound_in_place(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    (root / "usr").mkdir(parents=True)
    (root / "runpod-volume").mkdir()
    (root / "bin").symlink_to("usr/bin")
    (root / "file").write_text("")
    argv = bubblewrap.command("bwrap", ["worker"], Path("/data/vol"), root=root)
    assert argv[:2] == ["bwrap", "--die-with-parent"]
    binds = argv[2 : argv.index("--")]
    assert binds == [
        "--symlink",
        "usr/bin",
        "/bin",
        "--dev-bind-try",
        "/file",
        "/file",
        "--dev-bind-try",
        "/usr",
        "/usr",
        # The host's own /runpod-volume, if any, is not bound: the volume takes its place.
        "--dir",
        VOLUME_MOUNT_PATH,
        "--bind",
        "/data/vol",
        VOLUME_MOUNT_PATH,
    ]
    assert argv[-1] == "worker"


def test_a_pods_volume_is_mounted_at_its_own_top_level_path(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "workspace").mkdir(parents=True)
    argv = bubblewrap.command("bwrap", ["pod"], Path("/data/p"), root=root, mount="/workspace")
    binds = argv[2 : argv.index("--")]
    # The host's own /workspace is hidden under the pod's volume.
    assert binds == ["--dir", "/workspace", "--bind", "/data/p", "/workspace"]


@pytest.mark.parametrize("mount", ["/", "/data/workspace", "workspace/inner", ""])
def test_a_mount_path_below_the_top_level_cannot_be_mounted(mount: str, tmp_path: Path) -> None:
    problem = bubblewrap.mount_problem(mount)
    assert problem is not None and "top-level directory" in problem
    with pytest.raises(ValueError, match="top-level"):
        bubblewrap.command("bwrap", ["pod"], tmp_path, root=tmp_path, mount=mount)


def test_a_top_level_mount_path_can_be_mounted() -> None:
    assert bubblewrap.mount_problem("/workspace") is None
    assert bubblewrap.mount_problem("/runpod-volume/") is None
