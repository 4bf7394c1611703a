"""The ports a sandboxed process may bind (providers/port_fence.py), with the real kernel's
Landlock and seccomp, real bubblewrap and real processes: a process binds its own ports and the
ephemeral range, and no other, and makes no socket that would serve TCP clients past the fence
(MPTCP, SMC, io_uring's); a load-balancing worker binds what it serves on, a pod what it
declares; a port that a running or starting pod declares is refused to a second pod, as are the
ports kept for others; and an abstract Unix socket made outside is out of reach."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pod_programs import pod_port
from process_exits import Exits
from skiff.listen import free_port
from skiff.providers import bubblewrap, port_fence
from skiff.providers.base import Launch, PodLaunch, ServedPorts, WorkerStartError
from skiff.providers.local import LocalProvider
from skiff.providers.local_pods import LocalPodProvider
from skiff.served_ports import reserved_ports
from skiff.services.logs import WorkerLogs

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="Landlock is Linux's"),
    pytest.mark.skipif(
        sys.platform == "linux" and port_fence.landlock_abi() < port_fence.NET_ABI,
        reason="this kernel's Landlock has no network rules (Linux 6.7)",
    ),
]

#: Binds each port of ``sys.argv[1:]`` (0: one the kernel picks) and prints what came of it.
BINDS = textwrap.dedent(
    """
    import socket, sys
    for port in sys.argv[1:]:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", int(port)))
                print(port, "bound", flush=True)
            except OSError as exc:
                print(port, exc.errno, flush=True)
    """
)
SOURCE = Path(port_fence.__file__).read_text()


def bound(output: str) -> dict[str, str]:
    """Each port tried, with ``bound`` or the message of its refusal's errno (a log's lines
    begin with their time)."""
    found = re.findall(r"^(?:\S+Z )?(\d+) (bound|\d+)$", output, re.MULTILINE)
    return {port: what if what == "bound" else os.strerror(int(what)) for port, what in found}


def test_a_fenced_process_binds_its_own_ports_and_the_ephemeral_range_only() -> None:
    own, other = pod_port(), pod_port()
    # A free port of the ephemeral range, as a notebook kernel picks one and binds it after.
    picked = free_port()
    assert picked in port_fence.ephemeral_ports()
    code = f"{SOURCE}\nfence_binds([{own}])\n{BINDS}"
    ran = subprocess.run(
        [sys.executable, "-S", "-I", "-c", code, str(own), str(other), "0", str(picked)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ran.returncode == 0, ran.stderr
    assert bound(ran.stdout) == {
        str(own): "bound",
        str(other): os.strerror(13),  # EACCES, as a privileged port is refused
        "0": "bound",
        str(picked): "bound",
    }


#: Tries each way past the fence that is not a TCP socket: MPTCP (which serves plain TCP
#: clients), SMC (which falls back to TCP) and io_uring (whose socket operations seccomp does
#: not see). Prints each with the errno it got, or ``made``.
OTHER_SOCKETS = textwrap.dedent(
    """
    import ctypes, os, socket
    for name, family, protocol in (
        ("mptcp", socket.AF_INET, 262), ("mptcp6", socket.AF_INET6, 262), ("smc", 43, 0),
        ("tcp", socket.AF_INET, 0),
    ):
        try:
            socket.socket(family, socket.SOCK_STREAM, protocol).close()
            print(name, "made")
        except OSError as exc:
            print(name, exc.errno)
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    fd = libc.syscall(425, 1, params)  # io_uring_setup, the same number on x86_64 and arm64
    print("io_uring", "made" if fd >= 0 else ctypes.get_errno())
    """
)


def test_a_fenced_process_makes_no_socket_that_serves_tcp_past_the_fence() -> None:
    code = f"{SOURCE}\nfence_binds([])\n{OTHER_SOCKETS}"
    ran = subprocess.run(
        [sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, timeout=30
    )
    assert ran.returncode == 0, ran.stderr
    got = dict(line.split() for line in ran.stdout.splitlines())
    assert got == {
        "mptcp": str(errno.EPROTONOSUPPORT),
        "mptcp6": str(errno.EPROTONOSUPPORT),
        "smc": str(errno.EAFNOSUPPORT),
        "tcp": "made",
        "io_uring": str(errno.ENOSYS),
    }


@pytest.mark.skipif(port_fence.landlock_abi() < 6, reason="scopes need Landlock ABI 6")
def test_a_fenced_process_reaches_no_abstract_socket_made_outside() -> None:
    name = f"\0skiff-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(name)
        listening.listen()
        code = (
            f"{SOURCE}\nfence_binds([])\nimport socket\ns = socket.socket(socket.AF_UNIX)\n"
            f"try:\n    s.connect({name!r})\n    print('reached')\n"
            "except OSError as exc:\n    print('refused', exc.errno)\n"
        )
        ran = subprocess.run(
            [sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, timeout=30
        )
    assert ran.stdout.strip() == "refused 1", ran.stderr  # EPERM


needs_bwrap = pytest.mark.skipif(
    bubblewrap.executable() is None, reason="bubblewrap (bwrap) is not installed"
)


def sandbox_of(data: Path) -> bubblewrap.Sandbox:
    sandbox = bubblewrap.Sandbox.for_server(
        data, volumes_dir=data / "volumes", database_file=data / "skiff.db"
    )
    assert sandbox.fenced, "this kernel fences ports, so the server's sandbox should"
    return sandbox


@needs_bwrap
async def test_a_load_balancing_worker_binds_what_it_serves_on_and_nothing_else(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    exits = Exits()
    logs = WorkerLogs(data, 1 << 20, 1)
    provider = LocalProvider(exits, logs=logs.sink, sandbox=sandbox_of(data))
    port, health, other = free_port(), free_port(), pod_port()
    home = data / "workers" / "ep1" / "w1" / "home"
    launch = Launch(
        worker_id="w1",
        endpoint_id="ep1",
        argv=[sys.executable, "-c", BINDS, str(port), str(health), str(other), "0"],
        env=dict(os.environ) | {"HOME": str(home)},
        home=home,
        serves=ServedPorts(port, health),
    )
    await provider.start(launch)
    await asyncio.wait_for(exits.done.wait(), 30)
    output = logs.log_path("ep1", "w1").read_text()
    assert exits.codes == {"w1": 0}, output
    assert bound(output) == {
        str(port): "bound",
        str(health): "bound",
        str(other): os.strerror(13),
        "0": "bound",
    }


@needs_bwrap
async def test_with_the_fence_lifted_a_sandboxed_process_binds_any_port(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sandbox = bubblewrap.Sandbox.for_server(
        data, volumes_dir=data / "volumes", database_file=None, fence_ports=False
    )
    assert not sandbox.fenced
    exits = Exits()
    logs = WorkerLogs(data, 1 << 20, 1)
    provider = LocalProvider(exits, logs=logs.sink, sandbox=sandbox)
    port = free_port()
    home = data / "workers" / "ep1" / "w1" / "home"
    await provider.start(
        Launch(
            worker_id="w1",
            endpoint_id="ep1",
            argv=[sys.executable, "-c", BINDS, str(port)],
            env=dict(os.environ) | {"HOME": str(home)},
            home=home,
        )
    )
    await asyncio.wait_for(exits.done.wait(), 30)
    assert bound(logs.log_path("ep1", "w1").read_text()) == {str(port): "bound"}


def pod_launch(data: Path, pod_id: str, ports: tuple[int, ...], *tried: int) -> PodLaunch:
    home = data / "pods" / pod_id
    home.mkdir(parents=True, exist_ok=True)
    return PodLaunch(
        pod_id=pod_id,
        version=1,
        image="local/python",
        entrypoint=[],
        command=[
            sys.executable,
            "-c",
            f"{BINDS}\nimport time; time.sleep(600)",
            *(str(p) for p in tried),
        ],
        env={"PATH": os.environ["PATH"]},
        ports=tuple(f"{p}/http" for p in ports),
        volume=None,
        mount_path="/workspace",
        home=home,
    )


@pytest.fixture
async def pods(tmp_path: Path) -> AsyncIterator[tuple[LocalPodProvider, WorkerLogs, Path]]:
    data = tmp_path / "data"
    logs = WorkerLogs(data, folder="pod-logs")
    provider = LocalPodProvider(Exits(), logs=logs.sink, sandbox=sandbox_of(data))
    yield provider, logs, data
    await provider.close()


@needs_bwrap
async def test_a_pod_binds_the_ports_it_declares_and_a_second_pod_cannot_declare_them(
    pods: tuple[LocalPodProvider, WorkerLogs, Path],
) -> None:
    provider, logs, data = pods
    mine, other = pod_port(), pod_port()
    await provider.start(pod_launch(data, "pod-1", (mine,), mine, other))
    log = logs.log_path("pod-1", "pod-1")
    for _ in range(300):
        if log.exists() and len(bound(log.read_text())) == 2:
            break
        await asyncio.sleep(0.1)
    assert bound(log.read_text()) == {str(mine): "bound", str(other): os.strerror(13)}

    # Another tenant's pod declaring the port would be sent the first pod's requests.
    with pytest.raises(WorkerStartError, match=f"port {mine} is served by another pod"):
        await provider.start(pod_launch(data, "pod-2", (other, mine)))
    await provider.stop("pod-1", 1.0)
    await provider.start(pod_launch(data, "pod-2", (other, mine)))


@needs_bwrap
@pytest.mark.skipif(reserved_ports() is None, reason="no ports are kept below this host's range")
async def test_a_pod_cannot_declare_a_port_kept_for_others(
    pods: tuple[LocalPodProvider, WorkerLogs, Path],
) -> None:
    provider, _, data = pods
    kept = reserved_ports()
    assert kept is not None
    with pytest.raises(WorkerStartError, match=f"port {kept[0]} is among .* load-balancing"):
        await provider.start(pod_launch(data, "pod-1", (kept[0],)))
    # Any process may bind the ephemeral range: a pod serving there could be cut in on.
    picked = free_port()
    with pytest.raises(WorkerStartError, match=f"port {picked} is among .* any process"):
        await provider.start(pod_launch(data, "pod-1", (picked,)))


@needs_bwrap
async def test_of_two_pods_started_together_with_one_port_only_one_starts(
    pods: tuple[LocalPodProvider, WorkerLogs, Path],
) -> None:
    provider, _, data = pods
    port = pod_port()
    started = await asyncio.gather(
        provider.start(pod_launch(data, "pod-1", (port,))),
        provider.start(pod_launch(data, "pod-2", (port,))),
        return_exceptions=True,
    )
    refused = [r for r in started if isinstance(r, WorkerStartError)]
    assert len(refused) == 1 and f"port {port} is served by another pod" in str(refused[0])
