"""SSH into local pods, served by skiff itself, in a real ``skiff serve`` with the sandbox on,
driven by the system's ``ssh``, ``scp``, ``sftp`` and ``rsync`` and the real ``runpod`` CLI:
the owner's key gets in (on the server's SSH port, the pod's id as the user name, and on the
pod's own port, any name); a command's output, error output and exit code come back apart; a
terminal session runs a shell; files copied in are read by the pod's own process; a wrong key
and another user's key are refused; the sandbox holds inside a session; every session goes
into the pod's log; sessions end when the pod stops and once their key is taken out of the
settings; ``runpod pod connect`` gets in."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Server, free_port, running
from ssh_clients import User, free_range, keypair, runpod_cli, ssh, ssh_options

from eventually import eventually


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("ssh-keys")
    return {name: keypair(where, name) for name in ("alice", "bob", "stranger")}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    pod_ports = free_range(4)
    env: dict[str, str | None] = {
        "SKIFF_SSH_PORT": str(free_port()),
        "SKIFF_SSH_POD_PORTS": f"{pod_ports[0]}-{pod_ports[-1]}",
    }
    with running(tmp_path_factory.mktemp("pod-ssh") / "data", env=env) as srv:
        yield srv


@pytest.fixture(scope="module")
def alice(server: Server, keys: dict[str, Path]) -> User:
    return User(server, "alice", keys["alice"])


@pytest.fixture(scope="module")
def bob(server: Server, keys: dict[str, Path]) -> User:
    return User(server, "bob", keys["bob"])


@pytest.fixture(scope="module")
def alices_pod(alice: User) -> dict[str, Any]:
    return alice.pod("alices-box")


def gateway(server: Server) -> int:
    return int(server.extra_env["SKIFF_SSH_PORT"] or 0)


def test_a_command_comes_back_with_its_output_errors_and_exit_code(
    server: Server, alice: User, alices_pod: dict[str, Any]
) -> None:
    done = ssh(
        alice.key,
        gateway(server),
        alices_pod["id"],
        'echo "$GREETING"; echo oops >&2; exit 7',
    )
    assert done.returncode == 7, done
    assert done.stdout == "hello from alices-box\n"
    assert done.stderr == "oops\n"


def test_the_pods_own_port_takes_any_user_name_and_is_in_its_runtime_ports(
    server: Server, alice: User, alices_pod: dict[str, Any]
) -> None:
    ssh_field = alices_pod["ssh"]
    assert ssh_field["host"] == "127.0.0.1"
    assert ssh_field["command"] == f"ssh root@127.0.0.1 -p {ssh_field['port']}"
    assert ssh_field["gatewayPort"] == gateway(server)
    graphql = alice.http.post(
        "/graphql",
        json={
            "query": f'{{ pod(input: {{podId: "{alices_pod["id"]}"}}) {{ runtime {{ ports '
            "{ ip isIpPublic privatePort publicPort type } } } }"
        },
    ).json()
    ports = graphql["data"]["pod"]["runtime"]["ports"]
    assert {
        "ip": "127.0.0.1",
        "isIpPublic": True,
        "privatePort": 22,
        "publicPort": ssh_field["port"],
        "type": "tcp",
    } in ports
    done = ssh(alice.key, ssh_field["port"], "root", "echo", "in")
    assert (done.returncode, done.stdout) == (0, "in\n"), done


def test_a_terminal_session_runs_the_pods_shell(
    server: Server, alice: User, alices_pod: dict[str, Any]
) -> None:
    done = ssh(
        alice.key,
        gateway(server),
        alices_pod["id"],
        given="echo $((6*7)); stty size; exit 3\n",
        terminal=True,
    )
    assert done.returncode == 3, done
    assert "42" in done.stdout


def test_a_wrong_key_and_another_users_key_are_refused(
    server: Server, alice: User, bob: User, keys: dict[str, Path], alices_pod: dict[str, Any]
) -> None:
    own_port = alices_pod["ssh"]["port"]
    for key in (keys["stranger"], bob.key):
        for port, user in ((gateway(server), alices_pod["id"]), (own_port, "root")):
            done = ssh(key, port, user, "echo", "in")
            assert done.returncode == 255, done
            assert "Permission denied" in done.stderr
            assert "in" not in done.stdout
    # A pod that does not exist reads as a wrong key: nothing tells a stranger which do.
    done = ssh(alice.key, gateway(server), "no-such-pod", "true")
    assert done.returncode == 255 and "Permission denied" in done.stderr


def test_files_copied_in_with_scp_sftp_and_rsync_are_read_by_the_pods_own_process(
    server: Server, alice: User, alices_pod: dict[str, Any], tmp_path: Path
) -> None:
    port, pod_id = gateway(server), alices_pod["id"]
    target = f"{pod_id}@127.0.0.1"
    for name, text in (("incoming-scp.txt", "by scp"), ("incoming-rsync.txt", "by rsync")):
        (tmp_path / name).write_text(text + "\n")
    opts = ssh_options(alice.key, port)
    scp_opts = [o if o != "-p" else "-P" for o in opts]
    copied = subprocess.run(
        ["scp", *scp_opts, str(tmp_path / "incoming-scp.txt"), f"{target}:"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert copied.returncode == 0, copied
    synced = subprocess.run(
        [
            "rsync",
            "-az",
            "-e",
            "ssh " + " ".join(opts),
            str(tmp_path / "incoming-rsync.txt"),
            f"{target}:",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert synced.returncode == 0, synced
    sftp = subprocess.run(
        ["sftp", *scp_opts, "-b", "-", target],
        input="put " + str(tmp_path / "incoming-scp.txt") + " incoming-sftp.txt\nls\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sftp.returncode == 0, sftp
    for line in (
        "seen: incoming-scp.txt by scp",
        "seen: incoming-rsync.txt by rsync",
        "seen: incoming-sftp.txt by scp",
    ):
        alice.wait_for_line(pod_id, line)
    # And back out again.
    fetched = subprocess.run(
        ["scp", *scp_opts, f"{target}:incoming-rsync.txt", str(tmp_path / "back.txt")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert fetched.returncode == 0, fetched
    assert (tmp_path / "back.txt").read_text() == "by rsync\n"


def test_the_sandbox_holds_inside_a_session(
    server: Server, alice: User, bob: User, alices_pod: dict[str, Any]
) -> None:
    bobs = bob.pod("bobs-box")
    database = server.data_dir / "skiff.db"
    bobs_home = server.data_dir / "pods" / bobs["id"]
    probe = (
        f"cat {database} | head -c 16; echo db=$?; "
        f"ls {bobs_home} 2>&1 | head -3; "
        "ls /proc | grep -c '^[0-9]'; id -u"
    )
    done = ssh(alice.key, gateway(server), alices_pod["id"], probe)
    assert "SQLite format" not in done.stdout, done
    assert "incoming" not in done.stdout
    lines = done.stdout.splitlines()
    # Its own few processes only, not the server's, not Bob's pod's; and not the server's uid.
    assert int(lines[-2]) < 10, done.stdout
    assert lines[-1] == "1000"


def test_each_session_goes_into_the_pods_log_with_who_and_from_where(
    server: Server, alice: User, alices_pod: dict[str, Any]
) -> None:
    ssh(alice.key, gateway(server), alices_pod["id"], "true")
    log = alice.log(alices_pod["id"])
    assert "opened by alice" in log and "over ssh, key SHA256:" in log and "from 127.0.0.1:" in log
    assert "of alice closed after" in log and "exit code 0" in log


def test_a_session_ends_when_its_pod_stops(server: Server, alice: User) -> None:
    pod = alice.pod("short-lived")
    session = subprocess.Popen(
        ["ssh", *ssh_options(alice.key, gateway(server)), f"{pod['id']}@127.0.0.1", "sleep 120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(lambda: "sleep 120" in alice.log(pod["id"]), "the session to open")
        stopped = alice.http.post(f"/v1/pods/{pod['id']}/stop")
        assert stopped.status_code == 200, stopped.text
        # Bounds a hang (the stop's grace, on a loaded machine), never what is asserted.
        _, errors = session.communicate(timeout=90)
        assert session.returncode != 0
        assert "skiff: session ended: the pod stopped" in errors
    finally:
        session.kill()
        session.communicate()


def test_every_pod_port_is_skiffs_own_before_it_is_handed_out(
    server: Server, alice: User, alices_pod: dict[str, Any]
) -> None:
    # A local pod shares the host's network: were a pod port free until handed out, a pod
    # could listen on it first and pose as another user's pod's SSH.
    first, last = (int(p) for p in (server.extra_env["SKIFF_SSH_POD_PORTS"] or "").split("-"))
    for port in range(first, last + 1):
        with socket.socket() as s, pytest.raises(OSError):
            s.bind(("127.0.0.1", port))
    unused = next(p for p in range(first, last + 1) if p != alices_pod["ssh"]["port"])
    done = ssh(alice.key, unused, "root", "true")
    assert done.returncode == 255 and "Permission denied" in done.stderr


def test_a_key_taken_out_of_the_settings_opens_no_new_session_on_its_connection(
    server: Server, alice: User, bob: User, alices_pod: dict[str, Any]
) -> None:
    import asyncssh

    mine, bobs = (Path(f"{key}.pub").read_text() for key in (alice.key, bob.key))

    def trusting(public: str) -> None:
        assert alice.http.patch("/v1/user", json={"pubKey": public}).status_code == 200

    async def one_connection() -> tuple[Any, Any]:
        async with asyncssh.connect(
            "127.0.0.1",
            gateway(server),
            username=alices_pod["id"],
            client_keys=[str(alice.key)],
            known_hosts=None,
        ) as connection:
            first = await connection.run("echo in", check=False)
            await asyncio.to_thread(trusting, bobs)  # Alice now trusts another key only
            try:
                return first, await connection.run("echo in", check=False)
            finally:
                await asyncio.to_thread(trusting, mine)

    first, second = asyncio.run(one_connection())
    assert (first.exit_status, first.stdout) == (0, "in\n")
    assert second.exit_status == 1 and "no longer opens this pod" in str(second.stderr)


def test_an_open_session_ends_once_its_key_is_taken_out_of_the_settings(
    server: Server, alice: User, bob: User, alices_pod: dict[str, Any]
) -> None:
    mine, bobs = (Path(f"{key}.pub").read_text() for key in (alice.key, bob.key))
    session = subprocess.Popen(
        [
            "ssh",
            *ssh_options(alice.key, gateway(server)),
            f"{alices_pod['id']}@127.0.0.1",
            "sleep 300",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(lambda: "sleep 300" in alice.log(alices_pod["id"]), "the session to open")
        assert alice.http.patch("/v1/user", json={"pubKey": bobs}).status_code == 200
        # The next sweep (every 5 s) finds the key gone.
        _, errors = session.communicate(timeout=30)
        assert session.returncode != 0
        assert "no longer lets alice in" in errors
    finally:
        assert alice.http.patch("/v1/user", json={"pubKey": mine}).status_code == 200
        session.kill()
        session.communicate()


def test_runpod_pod_connect_gets_into_the_pod(
    server: Server, alice: User, alices_pod: dict[str, Any], tmp_path: Path
) -> None:
    program, env = runpod_cli(server, alice, tmp_path / "home")
    done = subprocess.run(
        [program, "pod", "connect", alices_pod["id"]],
        env=env,
        input='echo "connected: $GREETING"\nexit\n',
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done
    assert "connected: hello from alices-box" in done.stdout


def test_a_server_killed_with_sigkill_serves_its_pods_again_under_the_same_host_key(
    keys: dict[str, Path], tmp_path: Path
) -> None:
    pod_ports = free_range(2)
    env: dict[str, str | None] = {
        "SKIFF_SSH_PORT": str(free_port()),
        "SKIFF_SSH_POD_PORTS": f"{pod_ports[0]}-{pod_ports[-1]}",
    }
    known_hosts = tmp_path / "known_hosts"

    def checked(port: int, user: str, *, first: bool) -> subprocess.CompletedProcess[str]:
        # The host key is learnt on the first connection, then must match on every other.
        checking = "accept-new" if first else "yes"
        options = ssh_options(keys["alice"], port)
        options[1] = f"StrictHostKeyChecking={checking}"
        options[3] = f"UserKnownHostsFile={known_hosts}"
        return subprocess.run(
            ["ssh", *options, f"{user}@127.0.0.1", 'echo "$GREETING"'],
            capture_output=True,
            text=True,
            timeout=60,
        )

    with running(tmp_path / "data", env=env) as server:
        alice = User(server, "alice", keys["alice"])
        pod = alice.pod("survivor")
        before = checked(gateway(server), pod["id"], first=True)
        assert before.stdout == "hello from survivor\n", before
        assert server.proc is not None
        server.proc.kill()
        server.proc.wait()
        server.start()
        assert alice.http.get(f"/v1/pods/{pod['id']}").status_code == 200  # not lost

        def back() -> subprocess.CompletedProcess[str] | None:
            done = checked(gateway(server), pod["id"], first=False)
            return done if done.returncode == 0 else None

        after = server.wait_for(back, what="the pod to be reached again")
        assert after.stdout == "hello from survivor\n"
        own = alice.http.get(f"/v1/pods/{pod['id']}").json()["ssh"]["port"]
        assert checked(own, "root", first=True).returncode == 0
        # Its own port shows the same host key as the server's port.
        learnt = {line.split()[-1] for line in known_hosts.read_text().splitlines()}
        assert len(learnt) == 1 and len(known_hosts.read_text().splitlines()) == 2
