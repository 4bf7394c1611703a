"""End-to-end harness: the real ``skiff serve`` as a subprocess on a free port, real
runpod-SDK workers started by it, and the real runpod SDK as the client (fixtures: conftest.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx

from eventually import INTERVAL, eventually

WORKERS = Path(__file__).parent / "workers"
ADMIN_KEY = "sk_e2e_admin_key_0123456789"
#: The secret key of every server on a shared PostgreSQL: replicas (and a server started again
#: on another data directory) must share one key, as docs/deployment.md says, where a server
#: of its own keeps the key file of its data directory.
SHARED_SECRET_KEY = "k1Ux1bDqfEAd0vMYh5gsbFRJ5mV9RgJgqoEqg1GZf3A="

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One ``skiff serve`` process and a client for its APIs."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        env: dict[str, str | None] | None = None,
        cwd: Path | None = None,
        data_dir_given: bool = True,
    ) -> None:
        """``env`` adds settings to the server's environment (None removes one); ``cwd`` is
        where it runs (a relative ``data_dir`` is relative to it). ``data_dir_given=False``
        starts it without ``--data-dir``: it takes ``SKIFF_DATA_DIR``, or its default ``.skiff``
        in ``cwd``, which ``data_dir`` must then name."""
        self.extra_env = env or {}
        self.cwd = cwd
        self.data_dir_given = data_dir_given
        self.data_dir = data_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = ADMIN_KEY
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = (cwd or Path.cwd()) / data_dir.parent / f"serve-{self.port}.log"
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=30
        )

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SKIFF_API_KEY=self.key,
            SKIFF_SCALER_INTERVAL_SECONDS="0.2",
            SKIFF_PING_INTERVAL_MS="1000",
            SKIFF_WORKER_STOP_GRACE_SECONDS="2",
            SKIFF_TAKE_WAIT_SECONDS="10",
            SKIFF_STOP_GRACE_SECONDS="2",
            SKIFF_WEBHOOK_ALLOW_PRIVATE="true",
        )
        if self.extra_env.get("SKIFF_DATABASE_URL"):
            env.setdefault("SKIFF_SECRET_KEY", SHARED_SECRET_KEY)
        for name, value in self.extra_env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process's life
        data_dir = ["--data-dir", str(self.data_dir)] if self.data_dir_given else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "skiff", "serve", "--port", str(self.port), *data_dir],
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.cwd,
        )
        eventually(self._ready, "skiff serve to answer /healthz", timeout=30)

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"skiff serve exited: {self.log_path.read_text()[-3000:]}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    # -- management helpers --------------------------------------------------------------
    def user_key(self, user: str) -> str:
        """A key of ``user`` (made if new), made with the CLI on this server's data directory."""
        data_dir = self.data_dir if self.cwd is None else self.cwd / self.data_dir
        command = ["keys", "create", "--user", user, "--data-dir", str(data_dir)]
        made = subprocess.run(
            [sys.executable, "-m", "skiff", *command],
            capture_output=True,
            text=True,
            check=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("SKIFF_")},
        )
        return made.stdout.strip()

    def create_template(self, script: str, **fields: Any) -> dict[str, Any]:
        body = {
            "name": fields.pop("name", f"tpl-{script}-{time.monotonic_ns()}"),
            "imageName": "local/worker",
            "dockerStartCmd": [sys.executable, str(WORKERS / script)],
            **fields,
        }
        response = self.http.post("/v1/templates", json=body)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def create_endpoint(self, script: str = "echo_worker.py", **fields: Any) -> dict[str, Any]:
        template = self.create_template(script)
        body = {"templateId": template["id"], "computeType": "CPU", **fields}
        response = self.http.post("/v1/endpoints", json=body)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def wait_for(
        self,
        predicate: Callable[[], T],
        timeout: float = 60,
        what: str = "condition",
        interval: float = INTERVAL,
    ) -> T:
        """:func:`eventually` with this server's log tail in the failure."""
        return eventually(
            predicate, what, timeout=timeout, interval=interval, context=self._log_context
        )

    def _log_context(self) -> str:
        return f"server log:\n{self.tail_log()}"

    def tail_log(self) -> str:
        try:
            return self.log_path.read_text()[-4000:]
        except OSError:
            return ""


@contextlib.contextmanager
def running(data_dir: Path, **options: Any) -> Iterator[Server]:
    """A started server, stopped on the way out."""
    server = Server(data_dir, **options)
    server.start()
    try:
        yield server
    finally:
        server.stop()
