"""The command line that runs a local worker with its network volume through bubblewrap
(providers/bubblewrap.py), built from a root directory of the test's own."""

from __future__ import annotations

from pathlib import Path

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
