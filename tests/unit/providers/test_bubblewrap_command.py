"""The command line that runs a local worker with its network volume through bubblewrap
(providers/bubblewrap.py), built from a root directory of the test's own."""

from __future__ import annotations

import sys
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
    argv = bubblewrap.mount_command("bwrap", ["worker"], Path("/data/vol"), root=root)
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
    argv = bubblewrap.mount_command(
        "bwrap", ["pod"], Path("/data/p"), root=root, mount="/workspace"
    )
    binds = argv[2 : argv.index("--")]
    # The host's own /workspace is hidden under the pod's volume.
    assert binds == ["--dir", "/workspace", "--bind", "/data/p", "/workspace"]


@pytest.mark.parametrize("mount", ["/", "/data/workspace", "workspace/inner", ""])
def test_a_mount_path_below_the_top_level_cannot_be_mounted(mount: str, tmp_path: Path) -> None:
    problem = bubblewrap.mount_problem(mount)
    assert problem is not None and "top-level directory" in problem
    with pytest.raises(ValueError, match="top-level"):
        bubblewrap.mount_command("bwrap", ["pod"], tmp_path, root=tmp_path, mount=mount)


def test_a_top_level_mount_path_can_be_mounted() -> None:
    assert bubblewrap.mount_problem("/workspace") is None
    assert bubblewrap.mount_problem("/runpod-volume/") is None


def _sandbox(tmp_path: Path, hidden: tuple[Path, ...]) -> bubblewrap.Sandbox:
    root = tmp_path / "root"
    for name in ("usr", "etc", "tmp", "proc", "dev", "run", "workspace"):
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "bin").symlink_to("usr/bin")
    return bubblewrap.Sandbox("bwrap", hidden, root=root, tmp=tmp_path / "tmp")


def _pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_the_sandbox_binds_the_hosts_entries_read_only_and_makes_its_own_dev_proc_tmp_and_run(
    tmp_path: Path,
) -> None:
    home = tmp_path / "data" / "workers" / "w" / "home"
    home.mkdir(parents=True)
    box = _sandbox(tmp_path, ())
    argv = box.command(["worker"], home=home, cwd=home, env={})
    assert argv[:4] == ["bwrap", "--die-with-parent", "--tmpfs", "/"]
    assert _pairs(argv, "--ro-bind-try")[:3] == ["/etc", "/usr", "/workspace"]
    assert "/dev" not in _pairs(argv, "--ro-bind-try")
    assert _pairs(argv, "--symlink") == ["usr/bin"]
    assert _pairs(argv, "--dev") == ["/dev"] and _pairs(argv, "--proc") == ["/proc"]
    assert {"/tmp", "/run"} <= set(_pairs(argv, "--tmpfs"))
    assert argv[argv.index("--uid") + 1] == str(bubblewrap.SANDBOX_UID)
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc"):
        assert flag in argv
    # A session of its own would take the worker out of the group the server signals.
    assert "--new-session" not in argv
    assert argv[-1] == "worker"


def test_hidden_paths_are_covered_and_the_home_inside_them_is_bound_back_after(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    home = data / "workers" / "w" / "home"
    home.mkdir(parents=True)
    secret = tmp_path / "shadow"
    secret.write_text("x")
    box = _sandbox(tmp_path, (data, secret, tmp_path / "missing"))
    argv = box.command(["worker"], home=home, cwd=None, env={})
    covered = argv.index(str(data))
    assert argv[covered - 1] == "--tmpfs"
    # A file is covered by the empty /dev/null; a path that does not exist is skipped.
    assert argv[argv.index(str(secret)) - 1] == "/dev/null"
    assert str(tmp_path / "missing") not in argv
    bound = argv.index("--bind")
    assert argv[bound + 1 : bound + 3] == [str(home), str(home)]
    assert bound > covered


def test_what_the_command_names_under_tmp_stays_reachable_read_only(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    (tmp / "checkout" / "venv" / "bin").mkdir(parents=True)
    (tmp / "checkout" / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp / "checkout" / "app").mkdir()
    (tmp / "checkout" / "app" / "worker.py").write_text("")
    (tmp / "lib" / "x").mkdir(parents=True)
    (tmp / "other").mkdir()
    home = tmp_path / "home"
    home.mkdir()
    box = _sandbox(tmp_path, ())
    argv = box.command(
        [str(tmp / "checkout" / "venv" / "bin" / "python"), str(tmp / "checkout/app/worker.py")],
        home=home,
        cwd=home,
        env={"PYTHONPATH": f"{tmp}/lib/x"},
    )
    reachable = _pairs(argv, "--ro-bind-try")
    # A virtual environment's root, a script's directory, a PYTHONPATH entry: exactly those.
    assert str(tmp / "checkout" / "venv") in reachable
    assert str(tmp / "checkout" / "app") in reachable
    assert str(tmp / "lib" / "x") in reachable
    assert str(tmp / "checkout") not in reachable and str(tmp / "other") not in reachable
    # The working directory alone is bound, not what is around it.
    inner = tmp / "work" / "dir"
    inner.mkdir(parents=True)
    argv = box.command(["w"], home=home, cwd=inner, env={})
    assert str(inner) in _pairs(argv, "--ro-bind-try")
    assert str(tmp / "work") not in _pairs(argv, "--ro-bind-try")


def test_a_path_that_climbs_out_of_tmp_or_names_tmp_itself_binds_nothing_of_it(
    tmp_path: Path,
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp_path / "x").mkdir()
    home = tmp_path / "home"
    home.mkdir()
    box = _sandbox(tmp_path, ())
    argv = box.command(["sh", f"{tmp}/../x", f"{tmp}/.", str(tmp)], home=home, cwd=home, env={})
    reachable = _pairs(argv, "--ro-bind-try")
    assert not [p for p in reachable if p.startswith(str(tmp))]


def test_a_socket_beside_a_named_script_is_covered(tmp_path: Path) -> None:
    import socket

    tmp = tmp_path / "tmp"
    (tmp / "s").mkdir(parents=True)
    (tmp / "s" / "x.py").write_text("")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp / "s" / "agent"))
    try:
        home = tmp_path / "home"
        home.mkdir()
        argv = _sandbox(tmp_path, ()).command(
            ["python", str(tmp / "s" / "x.py")], home=home, cwd=home, env={}
        )
    finally:
        listener.close()
    covered = argv.index(str(tmp / "s" / "agent"))
    assert argv[covered - 2 : covered] == ["--ro-bind", "/dev/null"]


def test_a_worker_gets_the_device_nodes_of_its_own_gpus_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    argv = _sandbox(tmp_path, ()).command(["w"], home=home, cwd=home, env={}, gpu_indices=[2])
    nodes = _pairs(argv, "--dev-bind-try")
    assert "/dev/nvidia2" in nodes and "/dev/nvidiactl" in nodes
    assert "/dev/nvidia0" not in nodes and "/dev/nvidia1" not in nodes


def test_a_worker_without_gpus_gets_no_nvidia_device_node(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    argv = _sandbox(tmp_path, ()).command(["w"], home=home, cwd=home, env={})
    assert [n for n in _pairs(argv, "--dev-bind-try") if n.startswith("/dev/nvidia")] == []


def test_the_volume_takes_its_mount_point_in_the_sandbox(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    argv = _sandbox(tmp_path, ()).command(
        ["pod"], home=home, cwd=home, env={}, volume=Path("/v/p"), mount="/workspace"
    )
    # The host's own /workspace is not bound: the volume takes its place.
    assert "/workspace" not in _pairs(argv, "--ro-bind-try")
    bound = [i for i, a in enumerate(argv) if a == "--bind"]
    # The volume first, then the home: a home under the mount path stays in sight.
    assert argv[bound[0] + 1 : bound[0] + 3] == ["/v/p", "/workspace"]
    assert argv[bound[1] + 1 : bound[1] + 3] == [str(home), str(home)]


def test_a_server_without_bwrap_has_a_sandbox_problem_naming_the_package(tmp_path: Path) -> None:
    import asyncio

    box = bubblewrap.Sandbox(None, ())
    problem = asyncio.run(box.problem())
    assert problem is not None and "bubblewrap" in problem


def sandbox_command(root: Path, **options: object) -> list[str]:
    sandbox = bubblewrap.Sandbox("bwrap", (), root=root, tmp=root / "tmp")
    return sandbox.command(
        ["sh"],
        home=root / "home",
        cwd=root / "home",
        env={},
        **options,  # type: ignore[arg-type]
    )


def test_a_file_shown_in_etc_rebuilds_etc_from_the_hosts_entries_read_only(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hosts").write_text("")
    (root / "etc" / "mtab").symlink_to("../proc/self/mounts")
    (root / "usr").mkdir()
    (root / "home").mkdir()
    environment = tmp_path / "environment"
    environment.write_text("export A=1\n")
    argv = sandbox_command(root, files={"/etc/rp_environment": environment})
    binds = argv[: argv.index("--")]
    # The host's /etc is not bound whole: bwrap could not make a mount point in it.
    assert ["--ro-bind-try", "/etc", "/etc"] not in [binds[i : i + 3] for i in range(len(binds))]
    start = binds.index("--tmpfs", binds.index("/usr"))
    assert binds[start : start + 11] == [
        "--tmpfs", "/etc",
        "--ro-bind-try", "/etc/hosts", "/etc/hosts",
        "--symlink", "../proc/self/mounts", "/etc/mtab",
        "--ro-bind", str(environment), "/etc/rp_environment",
    ]  # fmt: skip
    assert binds[-1] != "/etc" and "--remount-ro" in binds
    assert binds[binds.index("--remount-ro") + 1] == "/etc"


def test_a_file_is_shown_only_in_a_top_level_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="top-level folder"):
        sandbox_command(tmp_path, files={"/etc/deep/file": tmp_path})


def test_the_home_is_seen_at_root_too_unless_what_the_command_needs_lies_there(
    tmp_path: Path,
) -> None:
    (tmp_path / "home").mkdir()
    home = str((tmp_path / "home").resolve())
    argv = sandbox_command(tmp_path, home_also_at="/nowhere-needed")
    assert ["--bind", home, "/nowhere-needed"] == argv[
        argv.index("/nowhere-needed") - 2 : argv.index("/nowhere-needed") + 1
    ]
    # The server's own interpreter lies under this place: covering it would break the command.
    interpreter_home = str(Path(sys.prefix).resolve().parents[0])
    argv = sandbox_command(tmp_path, home_also_at=interpreter_home)
    assert ["--bind", home, interpreter_home] not in [argv[i : i + 3] for i in range(len(argv))]


def test_the_server_users_tokens_are_hidden_with_its_keys(tmp_path: Path) -> None:
    sandbox = bubblewrap.Sandbox.for_server(
        tmp_path / "data",
        volumes_dir=tmp_path / "volumes",
        database_file=None,
        server_home=tmp_path,
    )
    for secret in (".ssh", ".npmrc", ".config/gh", ".cargo/credentials.toml", ".pypirc"):
        assert tmp_path / secret in sandbox.hidden
