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
from skiff.providers.pod_entry import environment_lines
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
