"""A worker's process on a Ray node: the actor the Ray provider (``providers/ray.py``) places
for each worker, and the probe that checks a node reaches the server.

The standard library only: the provider sends this module into the cluster by value, so a node
needs Ray and what the worker's command needs, not skiff. The actor runs the worker's command as
the local provider does (its own process group, tied to the actor's process by a parent-death
signal, so it ends with the actor, whether the actor is killed or its node dies) and keeps its
output until the leader reads it (``read``): a leader that dies loses none of it, the next one
reads on from where the last stopped, up to ``KEPT_BYTES`` back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any

#: Output not yet read by a leader that is kept (a leader is away while another takes over).
KEPT_BYTES = 4 * 1024 * 1024
#: The most one ``read`` returns.
CHUNK = 256 * 1024
#: After a process ends, how long its output is still read for when something that left its
#: group holds the pipe open.
DRAIN_SECONDS = 2.0
#: What of the node's own environment a worker does not inherit: Ray's, skiff's and runpod's.
_NOT_INHERITED = ("RAY_", "SKIFF_", "RUNPOD_")

# As in providers/local.py: arm PDEATHSIG, make sure the parent is still the actor, then become
# the worker command.
_SHIM = (
    "import ctypes,os,signal,sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
    "os.getppid() == int(sys.argv[1]) or sys.exit(70)\n"
    "os.execvpe(sys.argv[2], sys.argv[2:], os.environ)\n"
)


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return int(probe.getsockname()[1])


class WorkerProcess:
    """One worker's process and its output. ``spec``: ``worker_id``, ``endpoint_id``, ``argv``,
    ``env`` (the template's, the endpoint's and the worker protocol's variables), ``gpu_type``,
    ``gpu_count``, ``port`` and ``health_port`` (a load-balancing worker's; None else), ``cwd``
    (the server's working directory: used where the node has it, else the worker's home)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self._cond = threading.Condition()
        self._buffer = bytearray()
        #: The output offset of ``_buffer[0]``: everything before it was read (or dropped).
        self._base = 0
        self._dropped = 0
        self._exit: int | None = None
        self._error: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._ports: tuple[int, int] | None = None
        self._gpu_ids = ""
        #: Bumped at each start: the end of a process restarted away is not the actor's end.
        self._generation = 0
        self._env: dict[str, str] = {}
        #: Serializes ``stop`` and ``restart`` (the actor answers several calls at once).
        self._lifecycle = threading.Lock()
        self._stopped = False
        try:
            self._start()
        except OSError as exc:
            self._error = f"the worker command could not start on {socket.gethostname()}: {exc}"

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
        env |= self.spec["env"]
        if self.spec["gpu_count"]:
            # The GPUs Ray reserved for this actor, as Ray numbers them on this node.
            self._gpu_ids = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            env["CUDA_VISIBLE_DEVICES"] = self._gpu_ids
            env["NVIDIA_VISIBLE_DEVICES"] = self._gpu_ids or "none"
        if self.spec.get("pod_ports") is not None:
            # A pod is told the address its ports are reached at: this node's.
            import ray  # the actor runs inside Ray: there it is

            env["RUNPOD_PUBLIC_IP"] = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        home = env.get("HOME", "")
        try:
            os.makedirs(home, mode=0o700, exist_ok=True)
        except OSError:
            # The server's data directory is not on this node: a home of the worker's own here.
            env["HOME"] = tempfile.mkdtemp(prefix=f"skiff-{self.spec['worker_id']}-")
        port, health = self.spec.get("port"), self.spec.get("health_port")
        if port is not None and health is not None:
            # Chosen free on the server's host; taken on this node already, another is chosen.
            same = port == health
            port = port if _port_free(port) else _free_port()
            health = port if same else (health if _port_free(health) else _free_port())
            self._ports = (port, health)
            env["PORT"], env["PORT_HEALTH"] = str(port), str(health)
        return env

    def _start(self) -> None:
        env = self._environment() if self._proc is None else self._env
        self._env = env
        argv = [sys.executable, "-S", "-I", "-c", _SHIM, str(os.getpid()), *self.spec["argv"]]
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=self.spec["cwd"] if os.path.isdir(self.spec.get("cwd") or "") else env["HOME"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with self._cond:
            self._proc = proc
            self._generation += 1
            self._exit = None
            generation = self._generation
        pump = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        pump.start()
        threading.Thread(target=self._wait, args=(proc, pump, generation), daemon=True).start()

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while chunk := os.read(fd, 64 * 1024):
            with self._cond:
                self._buffer += chunk
                excess = len(self._buffer) - KEPT_BYTES
                if excess > 0:
                    del self._buffer[:excess]
                    self._base += excess
                    self._dropped += excess
                self._cond.notify_all()
        proc.stdout.close()

    def _wait(self, proc: subprocess.Popen[bytes], pump: threading.Thread, generation: int) -> None:
        """The process's end: what it left in its group is ended (the SDK's heartbeat process,
        which would hold the output open for ever), the rest of its output read, and its exit
        code given to the next ``read`` after that output."""
        code = proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        # Something that left the group (its own session) may still hold the pipe: not waited
        # for long.
        pump.join(DRAIN_SECONDS)
        with self._cond:
            if generation == self._generation:
                self._exit = code
            self._cond.notify_all()

    def describe(self) -> dict[str, Any]:
        """Where and what it is: answered once the actor is placed and the process started."""
        import ray  # the actor runs inside Ray: there it is

        context = ray.get_runtime_context()
        return {
            "worker_id": self.spec["worker_id"],
            "endpoint_id": self.spec["endpoint_id"],
            "gpu_type": self.spec.get("gpu_type"),
            "gpu_count": self.spec["gpu_count"],
            "node_id": context.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            "host": socket.gethostname(),
            "pid": self._proc.pid if self._proc is not None else None,
            "gpu_ids": self._gpu_ids,
            "ports": self._ports,
            "error": self._error,
            "written": self.written(),
            # A pod's, given back to the leader that takes it over.
            "version": self.spec.get("version"),
            "pod_ports": self.spec.get("pod_ports"),
        }

    def written(self) -> int:
        """How many bytes of output the worker has written so far."""
        with self._cond:
            return self._base + len(self._buffer)

    def read(self, offset: int, wait: float) -> tuple[bytes, int, int | None]:
        """Output from ``offset`` on (waiting up to ``wait`` seconds for some), the offset after
        it, and the exit code once the process has ended and all of its output was read. What
        comes before ``offset`` is let go: only one leader reads."""
        deadline = time.monotonic() + wait
        with self._cond:
            while True:
                if self._error is not None:
                    return self._error.encode() + b"\n", offset, 127
                start = max(offset, self._base)
                if start > self._base:
                    del self._buffer[: start - self._base]
                    self._base = start
                if self._buffer or self._exit is not None:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return b"", start, None
                self._cond.wait(remaining)
            data = bytes(self._buffer[:CHUNK])
            ended = self._exit if len(data) == len(self._buffer) else None
            return data, start + len(data), ended

    def stop(self, grace: float) -> int | None:
        """SIGTERM to the process's group, ``grace`` seconds, then SIGKILL; its exit code. A
        stopped process is not started again (a ``restart`` that comes after does nothing)."""
        with self._lifecycle:
            self._stopped = True
            return self._end(grace)

    def _end(self, grace: float) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait()

    def restart(self, grace: float) -> str | None:
        """Stop the process and start it again as it was (a pod's restart: its home kept);
        None, or why it could not start again (the actor's end, then, as for an exit)."""
        with self._lifecycle:
            if self._stopped:
                return "it was stopped"
            with self._cond:
                # The end of the process stopped now is not the end of the actor's.
                self._generation += 1
            self._end(grace)
            try:
                self._start()
            except OSError as exc:
                with self._cond:
                    self._error = (
                        f"the command could not start again on {socket.gethostname()}: {exc}"
                    )
                    self._cond.notify_all()
                return self._error
        return None


def reaches(url: str, seconds: float) -> str | None:
    """Whether this node reaches ``url`` (the server's ``/healthz``) within ``seconds``: None,
    or what went wrong the last time it tried."""
    deadline = time.monotonic() + seconds
    problem = "not tried"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=3) as answer:
                if answer.status < 500:
                    return None
                problem = f"HTTP {answer.status}"
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                return None
            problem = f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            problem = str(exc)
        time.sleep(0.5)
    return f"{socket.gethostname()}: {problem}"
