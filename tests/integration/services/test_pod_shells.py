"""Sessions in pods (services/pod_shells.py) on a real SQLite store, with real pods run as
processes by the local pod provider and time on a manual clock: only the owner opens one, in
a pod that runs; each opening and closing goes into the pod's log; an idle session is ended
after the setting's time and a busy one is not; one whose caller may no longer get in is ended
at the next sweep; a stopped pod ends its sessions; the runner hands each running pod its own
SSH port and takes it back."""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest

from eventually import eventually_async
from skiff.clock import ManualClock
from skiff.domain.pod_sessions import EntryRequest
from skiff.domain.pods import Pod, PodCreate
from skiff.domain.users import User
from skiff.errors import Conflict, NotFound
from skiff.providers.local_pods import LocalPodProvider
from skiff.services import pod_shells
from skiff.services.gpus import GpuPool
from skiff.services.logs import PodLogs, WorkerLogs
from skiff.services.pod_runner import PodRunner
from skiff.services.pod_shells import Caller, PodShells, Session
from skiff.services.pods import Pods
from skiff.services.ssh_ports import SshPorts
from skiff.services.volumes import Volumes
from skiff.services.wakeups import Wakeups
from skiff.ssh import doors
from skiff.store.sqlite import SQLiteStore
from skiff.volume_dirs import VolumeDirs

ALICE = User(id="alice", name="alice", is_admin=False, created_at=0.0)
BOB = User(id="bob", name="bob", is_admin=False, created_at=0.0)
IDLE = 60.0


@dataclass
class Running:
    shells: PodShells
    runner: PodRunner
    pods: Pods
    logs: PodLogs
    store: SQLiteStore
    clock: ManualClock


@pytest.fixture
async def running(store: SQLiteStore, clock: ManualClock, tmp_path: Path) -> AsyncIterator[Running]:
    for user in (ALICE, BOB):
        await store.create_user(user)
    await store.set_pub_key(ALICE.id, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample alice")
    wakeups = Wakeups()
    files = WorkerLogs(tmp_path, folder="pod-logs")

    async def exited(pod_id: str, code: int) -> None:
        await runner.on_exit(pod_id, code)

    pod_dirs = VolumeDirs(tmp_path / "volumes" / "pods")
    runner = PodRunner(
        store,
        clock,
        wakeups,
        GpuPool([]),
        LocalPodProvider(exited, logs=files.sink),
        files,
        pod_dirs,
        tmp_path / "pods",
        Volumes(store, clock, VolumeDirs(tmp_path / "volumes")),
        "replica-1",
        stop_grace=1.0,
        public_host="127.0.0.1",
        ssh_ports=SshPorts(range(2300, 2302)),
    )
    runner.leading = True
    logs = PodLogs(files, store, wakeups)
    shells = PodShells(store, clock, runner, logs, wakeups, IDLE)
    yield Running(shells, runner, Pods(store, clock, wakeups, runner, pod_dirs), logs, store, clock)
    await runner.shutdown()


async def started(running: Running, user: User = ALICE, with_port: bool = True) -> Pod:
    made = await running.pods.create(
        user,
        PodCreate.model_validate(
            {
                "imageName": "local/python",
                "computeType": "CPU",
                "volumeInGb": 0,
                "env": {"GREETING": "hi"},
                "dockerStartCmd": [sys.executable, "-c", "import time; time.sleep(600)"],
            }
        ),
    )

    async def up() -> Pod | None:
        await running.runner.reconcile()
        pod = await running.pods.get(user, made.id)
        if not pod.placement.owner or (with_port and pod.placement.sshPort is None):
            return None
        return pod

    return await eventually_async(up, "the pod to run")


async def always() -> bool:
    return True


async def never() -> bool:
    return False


def caller(user: User = ALICE) -> Caller:
    return Caller(user, "ssh", "203.0.113.7:50000", "key SHA256:abc")


async def output_of(session: Session) -> bytes:
    out = b""
    while chunk := await session.entry.read_output():
        out += chunk
    return out


async def log_text(running: Running, pod_id: str) -> str:
    return "\n".join(line.line for line in await running.logs.lines(pod_id, None, 100))


async def test_the_owner_opens_a_session_in_a_running_pod_and_both_ends_go_into_its_log(
    running: Running,
) -> None:
    pod = await started(running)
    session = await running.shells.open(caller(), pod.id, EntryRequest('echo "$GREETING"'), always)
    assert await output_of(session) == b"hi\n"
    code = await session.entry.wait()
    await running.shells.close(session, code)
    await running.shells.close(session, code)  # once only
    log = await log_text(running, pod.id)
    assert (
        f"skiff: session {session.id} opened by alice (alice) from 203.0.113.7:50000 over ssh, "
        "key SHA256:abc: the command 'echo \"$GREETING\"'" in log
    )
    assert log.count(f"session {session.id} of alice closed") == 1
    assert "exit code 0" in log
    assert running.shells.sessions() == []


async def test_another_users_pod_is_not_found_and_a_stopped_one_refuses(running: Running) -> None:
    pod = await started(running)
    with pytest.raises(NotFound):
        await running.shells.open(caller(BOB), pod.id, EntryRequest("true"), always)
    with pytest.raises(NotFound):
        await running.shells.open(caller(), "no-such-pod", EntryRequest("true"), always)
    await running.pods.stop(ALICE, pod.id)
    await running.runner.reconcile()
    with pytest.raises(Conflict, match="not running"):
        await running.shells.open(caller(), pod.id, EntryRequest("true"), always)


async def test_the_door_shows_the_owner_and_their_keys_only_while_the_pod_runs(
    running: Running,
) -> None:
    pod = await started(running)
    door = await running.shells.door(pod.id)
    assert door is not None and door.owner.id == ALICE.id and "alice" in door.keys
    assert await running.shells.door("no-such-pod") is None
    await running.store.set_user_disabled(ALICE.id, 1.0)
    assert await running.shells.door(pod.id) is None  # a disabled owner's keys open nothing
    await running.store.set_user_disabled(ALICE.id, None)
    await running.pods.stop(ALICE, pod.id)
    await running.runner.reconcile()
    assert await running.shells.door(pod.id) is None


async def test_an_idle_session_is_ended_after_the_settings_time_and_a_busy_one_is_not(
    running: Running,
) -> None:
    pod = await started(running)
    idle = await running.shells.open(caller(), pod.id, EntryRequest("sleep 600"), always)
    busy = await running.shells.open(caller(), pod.id, EntryRequest("sleep 600"), always)
    running.clock.advance(IDLE - 1)
    running.shells.touch(busy)
    running.clock.advance(2)
    await running.shells.sweep()
    assert await idle.entry.wait() == 137  # killed
    assert idle.ended_because is not None and "idle for 60 s" in idle.ended_because
    assert busy.ended_because is None
    await running.shells.close(idle, 137)
    assert "idle for 60 s" in await log_text(running, pod.id)
    busy.entry.end()
    await busy.entry.wait()


async def test_a_session_whose_caller_may_no_longer_get_in_ends_at_the_next_sweep(
    running: Running,
) -> None:
    pod = await started(running)
    answer: dict[str, bool | Exception] = {"now": True}

    async def still_allowed() -> bool:
        if isinstance(answer["now"], Exception):
            raise answer["now"]
        return answer["now"]

    session = await running.shells.open(caller(), pod.id, EntryRequest("sleep 600"), still_allowed)
    await running.shells.sweep()
    assert session.ended_because is None
    answer["now"] = ConnectionError("the store did not answer")  # not known: it goes on
    await running.shells.sweep()
    assert session.ended_because is None
    answer["now"] = False
    await running.shells.sweep()
    assert session.ended_because == "its key SHA256:abc no longer lets alice in"
    assert await session.entry.wait() == 137
    await running.shells.close(session, 137)
    assert "key SHA256:abc no longer lets alice in" in await log_text(running, pod.id)


async def test_a_check_that_fails_for_no_known_reason_ends_the_session(running: Running) -> None:
    pod = await started(running)

    async def broken() -> bool:
        raise ValueError("a bug")

    session = await running.shells.open(caller(), pod.id, EntryRequest("sleep 600"), broken)
    await running.shells.sweep()
    assert session.ended_because == "its access could not be checked (the server's log says why)"
    await session.entry.wait()
    await running.shells.close(session, None)


async def test_a_hung_check_neither_stops_the_sweep_nor_keeps_idle_sessions(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pod_shells, "CHECK_SECONDS", 0.1)
    pod = await started(running)

    async def hangs() -> bool:
        await asyncio.Event().wait()
        return True

    hung = await running.shells.open(caller(), pod.id, EntryRequest("sleep 600"), hangs)
    running.clock.advance(IDLE - 1)
    busy_but_revoked = await running.shells.open(caller(), pod.id, EntryRequest("sleep 600"), never)
    running.clock.advance(2)
    async with asyncio.timeout(10):
        await running.shells.sweep()
    assert hung.ended_because is not None and "idle for 60 s" in hung.ended_because
    assert busy_but_revoked.ended_because == "its key SHA256:abc no longer lets alice in"
    for session in (hung, busy_but_revoked):
        await session.entry.wait()
        await running.shells.close(session, None)


async def test_a_session_that_ends_while_checked_keeps_how_it_ended(running: Running) -> None:
    pod = await started(running)
    sessions: list[Session] = []

    async def closes_first() -> bool:
        # Its process exits and its client closes it while the sweep asks.
        await sessions[0].entry.wait()
        await running.shells.close(sessions[0], 0)
        return False

    sessions.append(
        await running.shells.open(caller(), pod.id, EntryRequest("exit 0"), closes_first)
    )
    await running.shells.sweep()
    assert sessions[0].ended_because is None
    assert await running.shells.ending(sessions[0], 0) == "exit code 0"


async def test_an_ssh_sessions_check_follows_the_key_not_the_pods_state(
    running: Running,
) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    public = key.export_public_key().decode()
    await running.store.set_pub_key(ALICE.id, public)
    pod = await started(running)
    door = await running.shells.door(pod.id)
    assert door is not None
    options = doors.key_options(door.keys, key, "203.0.113.7")
    assert options is not None
    admitted = doors.Admitted(ALICE, pod.id, key, options)

    def holds(terminal: bool) -> pod_shells.StillAllowed:
        return functools.partial(
            doors.still_holds, running.shells, admitted, "203.0.113.7", terminal
        )

    session = await running.shells.open(caller(), pod.id, EntryRequest("sleep 600"), holds(True))
    # The pod is told to stop: until its provider ends the session, the key still holds, and
    # the session ends saying the pod stopped, not that the key was taken away.
    await running.pods.stop(ALICE, pod.id)
    assert await holds(False)()
    await running.runner.reconcile()
    assert await running.shells.ending(session, await session.entry.wait()) == "the pod stopped"
    await running.shells.close(session, None)
    # The key's options count: one that now refuses a terminal ends a terminal's session only.
    assert await holds(True)()
    await running.store.set_pub_key(ALICE.id, f"no-pty {public}")
    assert await holds(False)() and not await holds(True)()
    await running.store.set_pub_key(ALICE.id, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOther bob")
    assert not await holds(False)()
    await running.store.set_pub_key(ALICE.id, public)
    await running.store.set_user_disabled(ALICE.id, 1.0)
    assert not await holds(False)()


async def test_stopping_a_pod_ends_its_sessions(running: Running) -> None:
    pod = await started(running)
    session = await running.shells.open(caller(), pod.id, EntryRequest("sleep 600"), always)
    await running.pods.stop(ALICE, pod.id)
    await running.runner.reconcile()
    assert await output_of(session) == b""
    assert await session.entry.wait() == 137


async def test_each_running_pod_holds_its_own_ssh_port_until_it_stops(running: Running) -> None:
    first = await started(running)
    second = await started(running)
    assert {first.placement.sshPort, second.placement.sshPort} == {2300, 2301}
    assert running.runner.ssh_address(first) == ("127.0.0.1", first.placement.sshPort)
    assert running.runner.ssh_ports.held() == {
        first.placement.sshPort: first.id,
        second.placement.sshPort: second.id,
    }
    await running.pods.stop(ALICE, first.id)
    await running.runner.reconcile()
    assert running.runner.ssh_ports.held() == {second.placement.sshPort: second.id}
    stopped = await running.pods.get(ALICE, first.id)
    assert stopped.placement.sshPort is None and running.runner.ssh_address(stopped) is None
    third = await started(running)
    assert third.placement.sshPort == first.placement.sshPort  # given back, handed out again
    # No port left for a fourth: it runs, reached on the server's SSH port only.
    fourth = await started(running, with_port=False)
    assert fourth.placement.sshPort is None and running.runner.ssh_address(fourth) is None


async def test_a_user_may_hold_only_so_many_sessions(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("skiff.services.pod_shells.MAX_SESSIONS_PER_USER", 2)
    pod = await started(running)
    held = [
        await running.shells.open(caller(), pod.id, EntryRequest("sleep 600"), always) for _ in "ab"
    ]
    with pytest.raises(Conflict, match="2 sessions open"):
        await running.shells.open(caller(), pod.id, EntryRequest("true"), always)
    await running.shells.close(held[0], None)
    third = await running.shells.open(caller(), pod.id, EntryRequest("true"), always)
    for session in (held[1], third):
        await running.shells.close(session, None)


async def test_a_session_says_how_it_ended(running: Running) -> None:
    pod = await started(running)
    session = await running.shells.open(caller(), pod.id, EntryRequest("exit 3"), always)
    assert await running.shells.ending(session, await session.entry.wait()) == "exit code 3"
    await running.shells.close(session, 3)
    session = await running.shells.open(caller(), pod.id, EntryRequest("sleep 600"), always)
    await running.pods.stop(ALICE, pod.id)
    await running.runner.reconcile()
    assert await running.shells.ending(session, await session.entry.wait()) == "the pod stopped"
