"""Sessions in a Docker pod (``DockerPodProvider.enter``, providers/docker_entry.py) against the
real daemon and the test image: a command's output, errors and exit code come apart; its input
reaches it and its EOF ends it; a terminal session runs bash on a terminal of the asked size
that follows a resize; the container gets the hosted platform's ``/etc/rp_environment`` and
``/root/.bashrc`` unless its image has them; ending a session hangs it up; a stop or restart of
the pod ends its sessions; a pod that does not run, or a daemon over TLS, is refused."""

from __future__ import annotations

import asyncio
import http.client
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from docker_image import docker_client, ensure_test_image
from eventually import eventually_async
from process_exits import Exits
from skiff.domain.pod_sessions import EntryRequest, TerminalSize
from skiff.providers.base import EntryRefused, PodEntry, PodLaunch
from skiff.providers.docker_entry import ExecEntry
from skiff.providers.docker_pods import DockerPodProvider

SERVER = "server-pod-entry-test"


class Sink:
    def feed(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def image() -> str:
    docker_client()
    return ensure_test_image()


@pytest.fixture
async def provider(image: str) -> AsyncIterator[DockerPodProvider]:
    client = docker_client()
    provider = DockerPodProvider(
        Exits(), logs=lambda _pod, _worker, _user=None: Sink(), server=SERVER, client=client
    )
    yield provider
    await provider.close()
    for container in client.containers.list(
        all=True, ignore_removed=True, filters={"label": f"dev.skiff.server={SERVER}"}
    ):
        container.remove(force=True)
    client.close()


async def start_pod(
    provider: DockerPodProvider, image: str, tmp_path: Path, pod_id: str, script: str = ""
) -> None:
    """A pod of the test image that runs ``script`` and then sleeps."""
    await provider.start(
        PodLaunch(
            pod_id=pod_id,
            version=1,
            image=image,
            entrypoint=[],
            command=["/bin/sh", "-c", f"{script}\nexec sleep infinity"],
            env={"GREETING": "it's me"},
            ports=(),
            volume=None,
            mount_path="/workspace",
            home=tmp_path / pod_id,
        )
    )


async def everything(read: Callable[[], Awaitable[bytes]]) -> bytes:
    out = b""
    async with asyncio.timeout(30):
        while chunk := await read():
            out += chunk
    return out


async def ran(entry: PodEntry) -> tuple[bytes, bytes, int]:
    """Its output and errors, read side by side (either may fill up first), and exit code."""
    out, err = await asyncio.gather(everything(entry.read_output), everything(entry.read_errors))
    async with asyncio.timeout(30):
        return out, err, await entry.wait()


async def output_until(entry: PodEntry, wanted: bytes) -> bytes:
    out = b""
    async with asyncio.timeout(30):
        while wanted not in out:
            chunk = await entry.read_output()
            assert chunk, out
            out += chunk
    return out


async def test_a_command_runs_in_bash_with_the_pods_environment_and_its_streams_apart(
    provider: DockerPodProvider, image: str, tmp_path: Path
) -> None:
    await start_pod(provider, image, tmp_path, "pod-cmd")
    entry = await provider.enter(
        "pod-cmd",
        EntryRequest(
            'echo "$GREETING, $ASKED, uid $(id -u) in $PWD"; '
            'source /root/.bashrc && source /etc/rp_environment && echo "bash $BASH_VERSION"; '
            "echo oops >&2; exit 5",
            env={"ASKED": "asked"},
        ),
    )
    out, err, code = await ran(entry)
    assert out.startswith(b"it's me, asked, uid 0 in /\nbash 5."), out
    assert (err, code) == (b"oops\n", 5)


async def test_much_output_and_errors_come_apart_whole(
    provider: DockerPodProvider, image: str, tmp_path: Path
) -> None:
    await start_pod(provider, image, tmp_path, "pod-much")
    entry = await provider.enter(
        "pod-much",
        EntryRequest(
            "head -c 300000 /dev/zero | tr '\\0' o; head -c 200000 /dev/zero | tr '\\0' e >&2"
        ),
    )
    out, err, code = await ran(entry)
    assert (out, err, code) == (b"o" * 300000, b"e" * 200000, 0)


async def test_output_written_before_the_exec_was_answered_is_not_lost(
    provider: DockerPodProvider, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await start_pod(provider, image, tmp_path, "pod-early")
    # The daemon starts the command once it has sent the answer's headers: read late, they
    # arrive with the command's output behind them, which the HTTP client reads ahead.
    answer = http.client.HTTPResponse.begin

    def late(response: http.client.HTTPResponse) -> None:
        time.sleep(0.3)
        answer(response)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", late)
    entry = await provider.enter("pod-early", EntryRequest("echo early; echo oops >&2"))
    assert await ran(entry) == (b"early\n", b"oops\n", 0)


async def test_input_reaches_a_command_and_its_eof_ends_it(
    provider: DockerPodProvider, image: str, tmp_path: Path
) -> None:
    await start_pod(provider, image, tmp_path, "pod-input")
    entry = await provider.enter("pod-input", EntryRequest("tr a-z A-Z"))
    await entry.write(b"shout\n" * 20000)
    entry.close_input()
    assert await ran(entry) == (b"SHOUT\n" * 20000, b"", 0)


async def test_a_terminal_session_follows_its_size_and_ends_with_the_shell(
    provider: DockerPodProvider, image: str, tmp_path: Path
) -> None:
    await start_pod(provider, image, tmp_path, "pod-tty")
    entry = await provider.enter(
        "pod-tty", EntryRequest(None, TerminalSize(100, 30), {"TERM": "xterm"})
    )
    await entry.write(b"stty size\n")
    await output_until(entry, b"30 100")
    entry.resize(TerminalSize(120, 40))
    await entry.write(b"stty size; echo $((6*7)); exit 4\n")
    out, err, code = await ran(entry)
    assert b"40 120" in out and b"42" in out, out
    assert (err, code) == (b"", 4)


async def test_a_terminal_sessions_eof_ends_its_shell(
    provider: DockerPodProvider, image: str, tmp_path: Path
) -> None:
    await start_pod(provider, image, tmp_path, "pod-eof")
    entry = await provider.enter("pod-eof", EntryRequest(None, TerminalSize(80, 24)))
    await entry.write(b"echo ready\n")
    out = await output_until(entry, b"ready\r\n")
    # At its prompt again. An EOF typed before readline has the terminal back is lost (as
    # a Ctrl-D typed ahead on any terminal): typed again until the shell ends, as a user would.
    while b"# " not in out.split(b"ready\r\n", 1)[1]:
        out += await entry.read_output()
    reading = asyncio.create_task(everything(entry.read_output))
    async with asyncio.timeout(30):
        while not reading.done():
            entry.close_input()
            await asyncio.wait({reading}, timeout=0.5)
    assert await entry.wait() == 0


async def test_the_container_gets_rp_environment_and_bashrc_only_where_the_image_has_none(
    provider: DockerPodProvider, image: str, tmp_path: Path
) -> None:
    # The test image has a /root/.bashrc (Debian's) and no /etc/rp_environment.
    await start_pod(provider, image, tmp_path, "pod-env")
    entry = await provider.enter(
        "pod-env",
        EntryRequest(
            "grep GREETING /etc/rp_environment; stat -c '%a %U' /etc/rp_environment; "
            "grep -c 'executed by bash' /root/.bashrc"
        ),
    )
    out, err, code = await ran(entry)
    assert out.splitlines()[0] == b"export GREETING='it'\"'\"'s me'", out
    assert out.splitlines()[1:] == [b"600 root", b"1"] and code == 0, (out, err)

    # Its own files are left as they are: one made by the pod's command, and none at all.
    await start_pod(
        provider,
        image,
        tmp_path,
        "pod-own",
        "rm /root/.bashrc; echo 'export MINE=1' > /etc/rp_environment",
    )
    client = provider.client
    (container,) = client.containers.list(filters={"label": "dev.skiff.pod-id=pod-own"})

    async def made() -> bool:
        found = await asyncio.to_thread(container.exec_run, ["test", "-e", "/etc/rp_environment"])
        return bool(found.exit_code == 0)

    await eventually_async(made, "the pod's command to make its /etc/rp_environment")
    entry = await provider.enter(
        "pod-own", EntryRequest("cat /etc/rp_environment; wc -c </root/.bashrc")
    )
    assert await ran(entry) == (b"export MINE=1\n0\n", b"", 0)


async def test_ending_a_session_hangs_it_up_and_leaves_what_ignores_the_hang_up(
    provider: DockerPodProvider, image: str, tmp_path: Path
) -> None:
    await start_pod(provider, image, tmp_path, "pod-end")
    shell = await provider.enter("pod-end", EntryRequest(None, TerminalSize(80, 24)))
    await shell.write(b"nohup sleep 601 >/dev/null 2>&1 & sleep 602 & echo started; sleep 603\n")
    await output_until(shell, b"started")
    command = await provider.enter("pod-end", EntryRequest("echo started; sleep 604"))
    assert await command.read_output() == b"started\n"
    for entry in (shell, command):
        entry.end()
        await everything(entry.read_output)  # what came before, then its end
    async with asyncio.timeout(30):
        assert (await shell.wait(), await command.wait()) == (129, 129)
    # Hung up: the sleeps of both, but nohup's, which ignores the hang-up, as after SSH.
    looking = await provider.enter(
        "pod-end", EntryRequest("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    )
    out, _, _ = await ran(looking)
    assert b"sleep 601" in out
    assert not any(f"sleep {n}".encode() in out for n in (602, 603, 604)), out


async def test_a_stop_or_restart_ends_the_pods_sessions_and_an_unknown_pod_is_refused(
    provider: DockerPodProvider, image: str, tmp_path: Path
) -> None:
    await start_pod(provider, image, tmp_path, "pod-stop")
    before_restart = await provider.enter("pod-stop", EntryRequest("echo here; sleep 600"))
    assert await before_restart.read_output() == b"here\n"
    assert await provider.restart("pod-stop", 0) is not None
    assert await ran(before_restart) == (b"", b"", 137)

    command = await provider.enter("pod-stop", EntryRequest("echo here; sleep 600"))
    shell = await provider.enter("pod-stop", EntryRequest(None, TerminalSize(80, 24)))
    assert await command.read_output() == b"here\n"
    await provider.stop("pod-stop", 0)
    assert await ran(command) == (b"", b"", 137)
    _, _, code = await ran(shell)
    assert code == 137
    with pytest.raises(EntryRefused, match="not running"):
        await provider.enter("pod-stop", EntryRequest("true"))
    with pytest.raises(EntryRefused, match="not running"):
        await provider.enter("no-such-pod", EntryRequest("true"))


async def test_sessions_are_refused_over_a_connection_that_is_no_plain_socket() -> None:
    class OverTls:
        base_url = "https://docker.example:2376"

    with pytest.raises(EntryRefused, match="unix socket or on plain TCP"):
        await ExecEntry.start(OverTls(), "c", ["true"], {}, None)
