"""Sessions in a local pod (``LocalPodProvider.enter``, providers/pod_entry.py) with real
bubblewrap and real processes: a command's output, errors and exit code come apart; its input
reaches it and its EOF ends it; a terminal session runs the shell on a terminal of the asked
size that follows a resize; the session sees the pod's environment, home, volume and the
hosted platform's ``/etc/rp_environment``, and none of the data directory; a stop ends it."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from process_exits import Exits
from skiff.domain.pod_sessions import EntryRequest, TerminalSize
from skiff.providers import bubblewrap
from skiff.providers.base import EntryRefused, PodEntry, PodLaunch
from skiff.providers.local_pods import LocalPodProvider
from skiff.providers.pod_entry import ProcessEntry, environment_lines
from skiff.services.logs import WorkerLogs

pytestmark = pytest.mark.skipif(
    bubblewrap.executable() is None,
    reason="bubblewrap (bwrap) is not installed: .ci/run installs it",
)


@pytest.fixture
async def pod(tmp_path: Path) -> AsyncIterator[tuple[LocalPodProvider, Path]]:
    data = tmp_path / "data"
    (data / "skiff.db").parent.mkdir(parents=True)
    (data / "skiff.db").write_text("DATABASE")
    logs = WorkerLogs(data, folder="pod-logs")
    sandbox = bubblewrap.Sandbox.for_server(
        data, volumes_dir=data / "volumes", database_file=data / "skiff.db"
    )
    provider = LocalPodProvider(Exits(), logs=logs.sink, sandbox=sandbox)
    home = data / "pods" / "pod-1"
    home.mkdir(parents=True)
    volume = data / "volumes" / "pods" / "pod-1"
    volume.mkdir(parents=True)
    (volume / "weights.bin").write_text("WEIGHTS")
    await provider.start(
        PodLaunch(
            pod_id="pod-1",
            version=1,
            image="local/python",
            entrypoint=[],
            command=[sys.executable, "-c", "import time; time.sleep(600)"],
            env={"GREETING": "it's me", "PATH": os.environ["PATH"]},
            ports=(),
            volume=volume,
            mount_path="/workspace",
            home=home,
        )
    )
    yield provider, data
    await provider.close()


async def everything(read: object) -> bytes:
    out = b""
    while chunk := await read():  # type: ignore[operator]
        out += chunk
    return out


async def ran(entry: PodEntry) -> tuple[bytes, bytes, int]:
    return (
        await everything(entry.read_output),
        await everything(entry.read_errors),
        await entry.wait(),
    )


async def test_a_command_sees_the_pods_environment_volume_and_rp_environment(
    pod: tuple[LocalPodProvider, Path],
) -> None:
    provider, data = pod
    entry = await provider.enter(
        "pod-1",
        EntryRequest(
            'echo "$GREETING"; cat /workspace/weights.bin; echo; . /etc/rp_environment; '
            'echo "again: $GREETING"; echo oops >&2; exit 5'
        ),
    )
    out, err, code = await ran(entry)
    assert out == b"it's me\nWEIGHTS\nagain: it's me\n"
    assert (err, code) == (b"oops\n", 5)
    # The data directory stays out of sight, and the home has the ~/.bashrc the CLI sources.
    entry = await provider.enter("pod-1", EntryRequest(f"cat {data}/skiff.db; test -f ~/.bashrc"))
    out, err, code = await ran(entry)
    assert b"DATABASE" not in out and code == 0, (out, err)


async def test_input_reaches_a_command_and_its_eof_ends_it(
    pod: tuple[LocalPodProvider, Path],
) -> None:
    provider, _ = pod
    entry = await provider.enter("pod-1", EntryRequest("tr a-z A-Z"))
    await entry.write(b"shout\n")
    entry.close_input()
    assert await ran(entry) == (b"SHOUT\n", b"", 0)


async def test_a_terminal_session_follows_its_size_and_ends_with_the_shell(
    pod: tuple[LocalPodProvider, Path],
) -> None:
    provider, _ = pod
    entry = await provider.enter(
        "pod-1", EntryRequest(None, TerminalSize(100, 30), {"TERM": "xterm"})
    )
    await entry.write(b"stty size\n")
    before = b""
    while b"30 100" not in before:  # the shell has answered at the first size
        chunk = await entry.read_output()
        assert chunk, before
        before += chunk
    entry.resize(TerminalSize(120, 40))
    await entry.write(b"stty size; exit 4\n")
    out, err, code = await ran(entry)
    assert b"40 120" in out, out
    assert (err, code) == (b"", 4)


async def test_a_stop_ends_the_pods_sessions_and_an_unknown_pod_is_refused(
    pod: tuple[LocalPodProvider, Path],
) -> None:
    provider, _ = pod
    entry = await provider.enter("pod-1", EntryRequest("sleep 600"))
    await provider.stop("pod-1", 1.0)
    assert await entry.wait() == 137
    with pytest.raises(EntryRefused, match="not running"):
        await provider.enter("pod-1", EntryRequest("true"))


def test_the_environment_file_quotes_each_value_and_skips_names_a_shell_cannot_take() -> None:
    text = environment_lines({"B": "it's $HOME", "A": "1", "NOT-A-NAME": "x"})
    assert text == "export A=1\nexport B='it'\"'\"'s $HOME'\n"


async def test_a_bashrc_link_planted_by_the_tenant_is_not_followed(
    pod: tuple[LocalPodProvider, Path], tmp_path: Path
) -> None:
    provider, data = pod
    home = data / "pods" / "pod-1"
    victim = tmp_path / "victim.db"
    victim.write_text("DATA")
    (home / ".bashrc").symlink_to(victim)
    entry = await provider.enter("pod-1", EntryRequest("true"))
    assert await entry.wait() == 0
    assert victim.read_text() == "DATA"  # not emptied through the link
    (home / ".bashrc").unlink()
    (home / ".bashrc").symlink_to(tmp_path / "made-by-server")
    entry = await provider.enter("pod-1", EntryRequest("true"))
    assert await entry.wait() == 0
    assert not (tmp_path / "made-by-server").exists()  # not created through the link


async def test_a_sessions_command_line_shows_no_more_of_the_hosts_tmp_than_the_pod_sees(
    pod: tuple[LocalPodProvider, Path], tmp_path: Path
) -> None:
    provider, _ = pod
    secret = tmp_path / "someone-else"
    secret.mkdir()
    script = secret / "run.sh"
    script.write_text("#!/bin/sh\necho SEEN\n")
    script.chmod(0o755)
    # The command names a file in the host's /tmp: a pod's own command naming it would see
    # it; the tenant's command line must not.
    entry = await provider.enter("pod-1", EntryRequest(str(script)))
    out, err, code = await ran(entry)
    assert b"SEEN" not in out and code != 0, (out, err)


async def test_the_loaders_variables_of_the_pods_env_reach_the_session_only(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    logs = WorkerLogs(data, folder="pod-logs")
    sandbox = bubblewrap.Sandbox.for_server(data, volumes_dir=data / "volumes", database_file=None)
    provider = LocalPodProvider(Exits(), logs=logs.sink, sandbox=sandbox)
    home = data / "pods" / "pod-2"
    home.mkdir(parents=True)
    # A preload the server's own shim and bwrap would load outside the sandbox, if they were
    # given it: the dynamic loader says so on their error output when the file is missing.
    env = {
        "PATH": os.environ["PATH"],
        "LD_PRELOAD": "/nowhere/preload.so",
        "LD_LIBRARY_PATH": "/opt/x",
    }
    await provider.start(
        PodLaunch(
            "pod-2", 1, "local/python", [], ["sleep", "600"], env, (), None, "/workspace", home
        )
    )
    try:
        entry = await provider.enter("pod-2", EntryRequest('echo "$LD_LIBRARY_PATH"'))
        out, err, code = await ran(entry)
        assert (out, code) == (b"/opt/x\n", 0), err
        # Inside, the loader honours it for the session's programs (and warns: the file is
        # missing), as the pod asked: the sandbox's first step and the shell, two warnings.
        # The server's shim and bwrap, outside, would each add one.
        assert err.count(b"preload.so") == 2, err
        process = provider._instances["pod-2"][1]
        argv, outside = provider._processes.entry_command(process)
        assert "LD_PRELOAD" not in outside and "LD_LIBRARY_PATH" not in outside
        at = argv.index("LD_PRELOAD")
        assert argv[at - 1 : at + 2] == ["--setenv", "LD_PRELOAD", "/nowhere/preload.so"]
    finally:
        await provider.close()


async def test_a_session_that_starts_while_its_pod_stops_ends_with_it(
    pod: tuple[LocalPodProvider, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, _ = pod
    started: list[PodEntry] = []
    start = ProcessEntry.start

    async def stopped_meanwhile(*args: object, **kwargs: object) -> ProcessEntry:
        entry = await start(*args, **kwargs)  # type: ignore[arg-type]
        started.append(entry)
        await provider.stop("pod-1", 1.0)  # between the session's start and its record
        return entry

    monkeypatch.setattr("skiff.providers.local_pods.ProcessEntry.start", stopped_meanwhile)
    with pytest.raises(EntryRefused, match="not running"):
        await provider.enter("pod-1", EntryRequest("sleep 600"))
    # Ended (killed, or failing to start its sandbox without the pod's files): not left over.
    assert await started[0].wait() != 0
