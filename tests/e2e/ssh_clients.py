"""What the SSH tests drive: users with a key pair in their settings, their pods (each running
``WATCHER``), the system's ``ssh`` and the ``runpod`` CLI pointed at a server."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from harness import Server

#: A pod's own process: says its greeting, then reports each ``incoming*.txt`` that appears in
#: the folder of its first argument (``.``, its home, for a local pod; ``/root`` in a container),
#: once it is whole: a copy makes the file before it writes it, and the tests' files end with a
#: newline.
WATCHER = """
import os, pathlib, sys, time
print("greeting:", os.environ.get("GREETING"), flush=True)
seen = set()
while True:
    for path in pathlib.Path(sys.argv[1]).glob("incoming*.txt"):
        if path.name in seen:
            continue
        text = path.read_text()
        if text.endswith("\\n"):
            seen.add(path.name)
            print("seen:", path.name, text.strip(), flush=True)
    time.sleep(0.1)
"""


def free_range(count: int) -> range:
    """``count`` consecutive free ports (a pod's own SSH ports)."""
    for _ in range(200):
        first = random.randrange(20_000, 60_000)
        ports = range(first, first + count)
        try:
            for port in ports:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return ports
    raise RuntimeError("no free port range")


def keypair(where: Path, name: str) -> Path:
    path = where / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True
    )
    return path


class User:
    def __init__(self, server: Server, name: str, key: Path) -> None:
        self.server = server
        self.name = name
        self.key = key
        self.api_key = server.user_key(name)
        self.http = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {self.api_key}"}, timeout=30
        )
        public = Path(f"{key}.pub").read_text()
        answer = self.http.patch("/v1/user", json={"pubKey": f"# my laptop\n{public}"})
        assert answer.status_code == 200, answer.text

    def pod(self, name: str, **fields: Any) -> dict[str, Any]:
        made = self.http.post(
            "/v1/pods",
            json={
                "name": name,
                "imageName": "local/python",
                "computeType": "CPU",
                "volumeInGb": 1,
                "env": {"GREETING": f"hello from {name}"},
                "dockerStartCmd": [sys.executable, "-u", "-c", WATCHER, "."],
                **fields,
            },
        )
        assert made.status_code == 201, made.text
        pod_id = made.json()["id"]

        def up() -> dict[str, Any] | None:
            pod = dict(self.http.get(f"/v1/pods/{pod_id}").json())
            return pod if pod["status"] == "running" and pod["ssh"] else None

        return dict(self.server.wait_for(up, what=f"pod {name} to run"))

    def log(self, pod_id: str) -> str:
        return str(self.http.get(f"/v1/pods/{pod_id}/logs").text)

    def wait_for_line(self, pod_id: str, line: str) -> None:
        """Until the pod's log holds ``line``; a failure shows the log as it was."""
        try:
            self.server.wait_for(lambda: line in self.log(pod_id), what=line)
        except AssertionError as missing:
            raise AssertionError(f"{missing}\npod {pod_id}'s log:\n{self.log(pod_id)}") from None


def ssh_options(key: Path, port: int) -> list[str]:
    return [
        "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null",
        "-o", "IdentitiesOnly=yes",
        "-o", "BatchMode=yes",
        "-o", "LogLevel=ERROR",
        "-i", str(key),
        "-p", str(port),
    ]  # fmt: skip


def ssh(
    key: Path, port: int, user: str, *command: str, given: str = "", terminal: bool = False
) -> subprocess.CompletedProcess[str]:
    tty = ["-tt"] if terminal else []
    return subprocess.run(
        ["ssh", *ssh_options(key, port), *tty, f"{user}@127.0.0.1", *command],
        input=given,
        capture_output=True,
        text=True,
        timeout=60,
    )


def runpod_cli(server: Server, user: User, home: Path) -> tuple[str, dict[str, str]]:
    """The ``runpod`` CLI configured with the user's API key in ``home``, their SSH key where it
    looks for one (``~/.runpod/ssh``): the program and its environment."""
    (home / ".runpod" / "ssh").mkdir(parents=True)
    key = home / ".runpod" / "ssh" / "RunPod-Key-Go"
    key.write_bytes(user.key.read_bytes())
    key.chmod(0o600)
    env = {**os.environ, "HOME": str(home), "RUNPOD_API_BASE_URL": server.url}
    program = str(Path(sys.executable).parent / "runpod")
    subprocess.run([program, "config", user.api_key], env=env, check=True, capture_output=True)
    return program, env
