"""Launchers for what is measured: ``skiff serve``, the reference (the runpod SDK's local test
server) and the trivial responder, each a subprocess pinned to the server CPU.

Every process started here carries a unique ``BENCH_RUN_TOKEN`` in its environment, which
skiff hands on to its workers and they to the SDK's heartbeat process. ``stop()`` ends the
process, then any process still carrying that token, so nothing outlives a run, also when a
benchmark fails half-way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from bench import pinning

HANDLER = pinning.REPO_ROOT / "bench" / "handler.py"
BENCH_KEY = "sk_bench_key_0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env(drop_prefixes: tuple[str, ...]) -> dict[str, str]:
    """This process's environment without settings that would change what is measured (a
    ``SKIFF_DATABASE_URL`` of the caller's shell, say)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(drop_prefixes)}


class Launched:
    """One pinned subprocess, in its own session, with its output in ``log_path``."""

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], log_path: Path, ready_path: str
    ) -> None:
        self.name = name
        self.argv = argv
        self.token = uuid.uuid4().hex
        self.env = env | {"BENCH_RUN_TOKEN": self.token}
        self.log_path = log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready_path = ready_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = 60) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [a.replace("{port}", str(self.port)) for a in self.argv],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=pinning.pin_to_server_cpu,
                cwd=pinning.REPO_ROOT,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start: {self.tail_log()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + self.ready_path, timeout=1).status_code == 200:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} was not ready in {timeout_s} s: {self.tail_log()}")

    def stop(self, grace_s: float = 20) -> None:
        """SIGTERM (skiff then stops its workers itself), SIGKILL after ``grace_s``, then
        whatever still carries this launch's token."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        kill_token(self.token)

    def tail_log(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def cpu_seconds(self) -> tuple[float, float]:
        """CPU time (user + system) so far of (the server process, every other live process
        of this launch: for skiff, its workers and their heartbeat processes)."""
        server = others = 0
        for pid in token_pids(self.token):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            ticks = int(fields[11]) + int(fields[12])  # utime, stime
            if pid == self.pid:
                server += ticks
            else:
                others += ticks
        hz = os.sysconf("SC_CLK_TCK")
        return server / hz, others / hz

    def rss_mib(self) -> float:
        """The process's resident set (VmRSS), in MiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS line")

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def token_pids(token: str) -> list[int]:
    """Processes whose environment holds ``BENCH_RUN_TOKEN=token``."""
    marker = f"BENCH_RUN_TOKEN={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_token(token: str) -> int:
    """SIGKILL every process of this launch still alive; how many."""
    killed = 0
    for pid in token_pids(token):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def trivial(log_dir: Path) -> Launched:
    return Launched(
        "trivial responder",
        [sys.executable, "-m", "bench.trivial", "{port}"],
        _clean_env(()),
        log_dir / "trivial.log",
        "/",
    )


def reference(log_dir: Path, name: str, sdk_log_level: str | None) -> Launched:
    """The runpod SDK's local test server (FastAPI on uvicorn), the no-op handler inline."""
    argv = [sys.executable, str(HANDLER), "--rp_serve_api", "--rp_api_host", "127.0.0.1"]
    env = _clean_env(("RUNPOD_",))
    if sdk_log_level:
        env["RUNPOD_LOG_LEVEL"] = sdk_log_level
    return Launched(
        "reference",
        [*argv, "--rp_api_port", "{port}"],
        env,
        log_dir / f"{name}-reference.log",
        "/openapi.json",
    )


def flash_reference(log_dir: Path, name: str) -> Launched:
    """skiff's Flash worker under the runpod SDK's local test server, which runs it inline."""
    argv = [sys.executable, "-m", "skiff.flash_worker", "--rp_serve_api"]
    return Launched(
        "reference flash worker",
        [*argv, "--rp_api_host", "127.0.0.1", "--rp_api_port", "{port}"],
        _clean_env(("RUNPOD_",)),
        log_dir / f"{name}-reference.log",
        "/openapi.json",
    )


class Skiff(Launched):
    """``skiff serve`` on a fresh data directory, with a client for its /v1 and /v2 APIs."""

    def __init__(
        self, log_dir: Path, name: str, data_dir: Path, settings: dict[str, str] | None = None
    ) -> None:
        env = _clean_env(("SKIFF_", "RUNPOD_")) | {
            "SKIFF_API_KEY": BENCH_KEY,
            # Rate limits are not what is measured: they would cap every figure here.
            "SKIFF_RATE_LIMITS": "off",
            **(settings or {}),
        }
        argv = [sys.executable, "-m", "skiff", "serve", "--port", "{port}"]
        super().__init__(
            "skiff",
            [*argv, "--data-dir", str(data_dir)],
            env,
            log_dir / f"{name}-skiff.log",
            "/healthz",
        )
        self.data_dir = data_dir
        self.key = BENCH_KEY
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=60
        )

    def stop(self, grace_s: float = 20) -> None:
        try:
            super().stop(grace_s)
        finally:
            self.http.close()

    def _ok(self, response: httpx.Response) -> Any:
        if response.status_code >= 300:
            raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text}")
        return response.json() if response.content else None

    def create_endpoint(self, env: dict[str, str], script: Path = HANDLER, **fields: Any) -> str:
        """A CPU endpoint whose workers run ``script`` (``bench/handler.py``); its id."""
        template = self._ok(
            self.http.post(
                "/v1/templates",
                json={
                    "name": f"bench-{uuid.uuid4().hex[:8]}",
                    "imageName": "local/bench",
                    "dockerStartCmd": [sys.executable, str(script)],
                },
            )
        )
        # The run's token in the workers' own environment: a sandboxed worker inherits little of
        # the server's, and its processes are counted (cpu_seconds) and swept by this token.
        env = env | {"BENCH_RUN_TOKEN": self.token}
        body = {"templateId": template["id"], "computeType": "CPU", "env": env, **fields}
        return str(self._ok(self.http.post("/v1/endpoints", json=body))["id"])

    def update_endpoint(self, endpoint_id: str, **fields: Any) -> None:
        self._ok(self.http.patch(f"/v1/endpoints/{endpoint_id}", json=fields))

    def delete_endpoint(self, endpoint_id: str) -> None:
        self._ok(self.http.delete(f"/v1/endpoints/{endpoint_id}"))

    def submit(self, endpoint_id: str, job_input: dict[str, Any]) -> str:
        """Queue one job (``/run``); its id."""
        answer = self.http.post(f"/v2/{endpoint_id}/run", json={"input": job_input})
        return str(self._ok(answer)["id"])

    def status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        return dict(self._ok(self.http.get(f"/v2/{endpoint_id}/status/{job_id}")))

    def health(self, endpoint_id: str) -> dict[str, Any]:
        return dict(self._ok(self.http.get(f"/v2/{endpoint_id}/health")))

    def workers(self, endpoint_id: str) -> list[dict[str, Any]]:
        endpoint = self._ok(self.http.get(f"/v1/endpoints/{endpoint_id}?includeWorkers=true"))
        return list(endpoint.get("workers") or [])

    def log_lines(self, endpoint_id: str) -> list[dict[str, Any]]:
        return list(
            self._ok(self.http.get(f"/v1/endpoints/{endpoint_id}/logs?tail=10000"))["lines"]
        )

    def wait_for(self, what: str, predicate: Any, timeout_s: float, every_s: float = 0.1) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(every_s)
        raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}: {self.tail_log()}")


@contextlib.contextmanager
def skiff(
    log_dir: Path, name: str, scratch: Path, settings: dict[str, str] | None = None
) -> Iterator[Skiff]:
    """A started skiff on a fresh data directory under ``scratch``, stopped on the way out."""
    data_dir = scratch / f"{name}-data-{uuid.uuid4().hex[:6]}"
    server = Skiff(log_dir, name, data_dir, settings)
    with server:
        yield server
