"""A real Ray cluster of several nodes on this one machine, for the Ray provider's tests and
its benchmark (B7).

Each node (the head too) runs in a PID namespace of its own (``unshare --pid``), so that
``ray stop --force`` run inside one stops that node alone, as on a machine of its own, and the
whole node ends with the namespace's first process on every way out. Nodes declare fake GPUs
(``--num-gpus``) and their type as the custom resource skiff reads (``skiff_gpu:<type>``). The
head's health checks run fast, so that a stopped node is declared dead within seconds."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

RAY = Path(sys.executable).with_name("ray")

#: The GCS declares a node dead after 3 missed checks of 0.5 s.
FAST_HEALTH = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


def ray_available() -> str | None:
    """None when the tests can start a cluster here, else why not."""
    if not RAY.exists():
        return "Ray is not installed (pip install 'skiff[ray]')"
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return "util-linux's unshare and nsenter are needed"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        return f"unshare --pid is not allowed here: {probe.stderr.decode().strip()}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Node:
    gpu_type: str | None
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def inner_pid(self) -> int | None:
        """The namespace's first process (``ray start --block``), as this host numbers it."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        try:
            found = children.read_text().split()
        except OSError:
            return None
        # None once it has ended and unshare has not yet (``ray stop`` ends it too).
        return int(found[0]) if found else None

    def ray_stop(self) -> None:
        """``ray stop --force`` on this node, as its operator would run it there."""
        inner = self.inner_pid
        if inner is None:
            return
        subprocess.run(
            ["nsenter", "-t", str(inner), "-p", "-m", str(RAY), "stop", "--force"],
            capture_output=True,
            check=False,
            timeout=60,
        )
        self.end()

    def end(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            # The namespace's first process takes every other one in it along.
            inner = self.inner_pid
            if inner is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(inner, signal.SIGKILL)
            self.proc.kill()
        self.proc.wait(30)
        self.proc = None


@dataclass
class RayCluster:
    root: Path
    port: int = field(default_factory=_free_port)
    nodes: list[Node] = field(default_factory=list)
    #: Logical CPUs each node declares.
    cpus: int = 1

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start_node(self, gpu_type: str | None, head: bool) -> Node:
        node = Node(gpu_type, self.root / f"node-{len(self.nodes)}.log")
        argv = [str(RAY), "start", "--block", "--num-cpus", str(self.cpus), "--disable-usage-stats"]
        if head:
            argv += ["--head", "--port", str(self.port), "--include-dashboard", "false"]
        else:
            argv += ["--address", self.address]
        if gpu_type is not None:
            argv += ["--num-gpus", "1", "--resources", json.dumps({f"skiff_gpu:{gpu_type}": 1})]
        else:
            argv += ["--num-gpus", "0"]
        env = dict(os.environ) | FAST_HEALTH | {"RAY_USAGE_STATS_ENABLED": "0"}
        node.proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *argv],
            env=env,
            stdout=node.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.nodes.append(node)
        return node

    def ask(self, expression: str) -> object:
        """``expression`` (Python, with ``ray`` connected to the cluster) evaluated by a
        driver of its own, as ``ray`` would answer an operator: a test's view from outside."""
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import json, ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR', "
                "log_to_driver=False); print(json.dumps(eval(sys.argv[2])))",
                self.address,
                expression,
            ],
            capture_output=True,
            check=False,
            timeout=60,
        )
        if probe.returncode != 0:
            raise RuntimeError(probe.stderr.decode()[-2000:])
        return json.loads(probe.stdout.decode().strip().splitlines()[-1])

    def available(self, resource: str) -> float:
        """How much of ``resource`` no actor holds now."""
        return float(str(self.ask(f"ray.available_resources().get({resource!r}, 0)")))

    def actors(self, namespace: str) -> list[str]:
        """The named actors living in ``namespace``."""
        names = self.ask("ray.util.list_named_actors(all_namespaces=True)")
        assert isinstance(names, list)
        return sorted(n["name"] for n in names if n["namespace"] == namespace)

    def start(self, gpu_types: list[str | None]) -> None:
        """The head with the first type, then one node per further type, one at a time."""
        for position, gpu_type in enumerate(gpu_types):
            self._started(self._start_node(gpu_type, head=position == 0))

    def add_node(self, gpu_type: str | None) -> Node:
        """A further node joining the running cluster."""
        return self._started(self._start_node(gpu_type, head=False))

    @staticmethod
    def _started(node: Node) -> Node:
        deadline = time.monotonic() + 90
        while "block forever" not in node.log.read_text(errors="replace"):
            if node.proc is None or node.proc.poll() is not None:
                raise RuntimeError(f"ray start failed:\n{node.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ray start hung:\n{node.log.read_text()[-3000:]}")
            time.sleep(0.2)
        return node

    def stop(self) -> None:
        for node in reversed(self.nodes):
            with contextlib.suppress(Exception):
                node.end()


@contextlib.contextmanager
def ray_cluster(root: Path, gpu_types: list[str | None], cpus: int = 1) -> Iterator[RayCluster]:
    """A started cluster (a node per entry of ``gpu_types``, the first its head), ended on
    every way out."""
    root.mkdir(parents=True, exist_ok=True)
    cluster = RayCluster(root, cpus=cpus)
    try:
        cluster.start(gpu_types)
        yield cluster
    finally:
        cluster.stop()
