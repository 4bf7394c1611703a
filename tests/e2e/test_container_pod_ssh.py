"""SSH into Docker pods (``SKIFF_PROVIDER=docker``), served by skiff itself, in a real ``skiff
serve`` against the real Docker Engine, with the system's ``ssh`` and ``scp`` and the real
``runpod`` CLI: the owner's key gets in and a command runs inside the container with the pod's
environment and exit code; a file copied in is read by the pod's own process; another key is
refused; ``runpod pod connect`` and ``runpod exec python`` work unmodified.

The pod's image is the container tests' image plus an SFTP server (``sftp`` and ``scp`` ask
for one, as an image with ``openssh-sftp-server`` installed has it): the host's own binary,
which needs only the C library of the same Debian release."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Server, free_port
from ssh_clients import WATCHER, User, free_range, keypair, runpod_cli, ssh, ssh_options

from docker_image import CONTAINER_SERVER_ENV, PYTHON_IN_IMAGE, docker_client, ensure_test_image

SFTP_SERVER = Path("/usr/lib/openssh/sftp-server")
POD_IMAGE = "skiff-test/pod-ssh:1"


@pytest.fixture(scope="module")
def pod_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    if not SFTP_SERVER.exists():
        pytest.fail(f"{SFTP_SERVER} is missing: scripts/prepare-machine installs it")
    base = ensure_test_image()
    context = tmp_path_factory.mktemp("pod-image")
    (context / "sftp-server").write_bytes(SFTP_SERVER.read_bytes())
    (context / "Dockerfile").write_text(
        f"FROM {base}\nCOPY sftp-server /usr/lib/openssh/sftp-server\n"
        "RUN chmod 755 /usr/lib/openssh/sftp-server\n"
    )
    docker_client().images.build(path=str(context), tag=POD_IMAGE, rm=True)
    return POD_IMAGE


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, pod_image: str) -> Iterator[Server]:
    pod_ports = free_range(4)
    env = {
        **CONTAINER_SERVER_ENV,
        "SKIFF_SSH_PORT": str(free_port()),
        "SKIFF_SSH_POD_PORTS": f"{pod_ports[0]}-{pod_ports[-1]}",
    }
    srv = Server(tmp_path_factory.mktemp("container-pod-ssh") / "data", env=env)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        # A pod's container outlives its server by design: this server's go with it.
        for container in docker_client().containers.list(
            all=True, ignore_removed=True, filters={"label": "dev.skiff.pod=1"}
        ):
            if str(srv.data_dir) in str(container.attrs.get("Mounts")):
                container.remove(force=True)


@pytest.fixture(scope="module")
def alice(server: Server, tmp_path_factory: pytest.TempPathFactory) -> User:
    return User(server, "alice", keypair(tmp_path_factory.mktemp("keys"), "alice"))


@pytest.fixture(scope="module")
def pod(alice: User, pod_image: str) -> dict[str, Any]:
    return alice.pod(
        "container-box",
        imageName=pod_image,
        dockerStartCmd=[PYTHON_IN_IMAGE, "-u", "-c", WATCHER, "/root"],
    )


def gateway(server: Server) -> int:
    return int(server.extra_env["SKIFF_SSH_PORT"] or 0)


def test_a_command_runs_inside_the_container_with_the_pods_environment(
    server: Server, alice: User, pod: dict[str, Any]
) -> None:
    done = ssh(
        alice.key,
        gateway(server),
        pod["id"],
        'echo "$GREETING"; echo "$RUNPOD_POD_ID"; id -u; grep -c GREETING /etc/rp_environment; '
        "exit 9",
    )
    assert done.returncode == 9, done
    assert done.stdout.splitlines() == ["hello from container-box", pod["id"], "0", "1"]


def test_a_file_copied_in_is_read_by_the_pods_own_process_and_another_key_is_refused(
    server: Server, alice: User, pod: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "incoming-docker.txt").write_text("into the container\n")
    options = [o if o != "-p" else "-P" for o in ssh_options(alice.key, pod["ssh"]["port"])]
    copied = subprocess.run(
        ["scp", *options, str(tmp_path / "incoming-docker.txt"), "root@127.0.0.1:/root/"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert copied.returncode == 0, copied
    line = "seen: incoming-docker.txt into the container"
    alice.wait_for_line(pod["id"], line)
    stranger = keypair(tmp_path, "stranger")
    refused = ssh(stranger, pod["ssh"]["port"], "root", "true")
    assert refused.returncode == 255 and "Permission denied" in refused.stderr


def test_runpod_pod_connect_and_exec_python_work_unmodified(
    server: Server, alice: User, pod: dict[str, Any], tmp_path: Path
) -> None:
    program, env = runpod_cli(server, alice, tmp_path / "home")
    connected = subprocess.run(
        [program, "pod", "connect", pod["id"]],
        env=env,
        input='echo "connected: $GREETING"\nexit\n',
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert connected.returncode == 0, connected
    assert "connected: hello from container-box" in connected.stdout
    # `runpod exec python` runs python3.10, the hosted images' Python: this image has 3.11,
    # linked under that name on its PATH as a user of such an image would.
    linked = ssh(
        alice.key, gateway(server), pod["id"], f"ln -sf {PYTHON_IN_IMAGE} /usr/local/bin/python3.10"
    )
    assert linked.returncode == 0, linked
    work = tmp_path / "project"
    work.mkdir()
    (work / "hello_exec.py").write_text(
        "import os, sys\nprint('ran in', os.environ['RUNPOD_POD_ID'], sys.version_info[:2])\n"
    )
    ran = subprocess.run(
        [program, "exec", "python", "hello_exec.py", "--pod_id", pod["id"]],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran
    assert f"ran in {pod['id']} (3, 11)" in ran.stdout, ran


def test_after_a_sigkill_the_adopted_container_is_reached_again_on_its_own_port(
    server: Server, alice: User, pod: dict[str, Any]
) -> None:
    own = pod["ssh"]["port"]
    marked = ssh(alice.key, own, "root", "touch /root/from-before")
    assert marked.returncode == 0, marked
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait()
    server.start()

    def back() -> subprocess.CompletedProcess[str] | None:
        done = ssh(alice.key, own, "root", "test -f /root/from-before")
        return done if done.returncode == 0 else None

    # The same container (a fresh one would not have the file on its disk), on its old port.
    server.wait_for(back, what="the adopted pod to be reached again")
    assert alice.http.get(f"/v1/pods/{pod['id']}").json()["ssh"]["port"] == own
