"""What the Flash function tests share: a pip package of their own served over HTTP (the
workers install it with real pip, and the server counts the downloads), and a runpod-flash
script run against a skiff server in a process of its own (flash reads its URLs at import and
configures logging for the whole process)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The GPU the Flash tests' server declares (runpod-flash names GPUs by their type).
FLASH_GPU = "NVIDIA GeForce RTX 4090"
#: The Flash tests' server's ``SKIFF_LB_DOMAIN``.
FLASH_LB_DOMAIN = "flash.skiff.test"
#: The package the functions depend on: ``skiffwords.intword(1234567) == "1.2 million"``.
PACKAGE = "skiffwords"
VERSION = "1.0"
WHEEL = f"{PACKAGE}-{VERSION}-py3-none-any.whl"
_SOURCE = """
def intword(n):
    for size, word in ((10**9, "billion"), (10**6, "million"), (10**3, "thousand")):
        if n >= size:
            return f"{n / size:.1f} {word}"
    return str(n)
"""


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(directory: Path, package: str = PACKAGE) -> Path:
    """A real, installable wheel of ``package`` (``skiffwords``'s code), written without a build
    backend."""
    info = f"{package}-{VERSION}.dist-info"
    files = {
        f"{package}/__init__.py": _SOURCE.encode(),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {package}\nVersion: {VERSION}\n"
        ).encode(),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: skiff-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = [_record_line(name, data) for name, data in files.items()]
    record.append(f"{info}/RECORD,,")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{package}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


@dataclass
class PackageIndex:
    """A directory of wheels served over HTTP as pip's ``--find-links`` page."""

    port: int
    downloads: Counter[str] = field(default_factory=Counter)

    def pip_env(self, host: str = "127.0.0.1") -> dict[str, str]:
        """What a worker's environment needs to install from here and nowhere else."""
        return {
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": f"http://{host}:{self.port}/",
            "PIP_TRUSTED_HOST": host,
        }


@contextlib.contextmanager
def package_index(directory: Path, bind: str = "127.0.0.1") -> Iterator[PackageIndex]:
    build_wheel(directory)
    index = PackageIndex(port=0)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(directory), **kwargs)

        def do_GET(self) -> None:
            if self.path.endswith(".whl"):
                index.downloads[self.path.rsplit("/", 1)[-1]] += 1
            super().do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer((bind, 0), Handler)
    index.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()


def lb_flash_endpoint(server: Any, image: str) -> str:
    """A load-balancing endpoint of a hosted load-balanced Flash image, as Flash saves one
    (``server`` is the e2e harness's ``Server``); its id."""
    template = server.http.post("/v1/templates", json={"name": "flash-lb", "imageName": image})
    assert template.status_code == 200, template.text
    endpoint = server.create_endpoint(templateId=template.json()["id"], type="LB", workersMax=1)
    return str(endpoint["id"])


def function_request(name: str, code: str, *args: Any) -> dict[str, Any]:
    """A ``FunctionRequest`` for ``name`` defined by ``code``, its arguments as plain JSON."""
    return {
        "function_name": name,
        "function_code": code,
        "args": list(args),
        "serialization_format": "json",
    }


def flash_env(url: str, key: str, home: Path) -> dict[str, str]:
    """runpod-flash's live path pointed at a skiff server, as ``flash dev`` sets it."""
    return {
        **os.environ,
        "RUNPOD_API_KEY": key,
        "RUNPOD_API_BASE_URL": url,
        "RUNPOD_ENDPOINT_BASE_URL": f"{url}/v2",
        "RUNPOD_REST_API_URL": f"{url}/v1",
        "FLASH_IS_LIVE_PROVISIONING": "true",
        "RUNPOD_URL_MIXED_OK": "1",
        "HOME": str(home),  # flash keeps its state under the home directory
    }


def run_flash(
    script: str, env: dict[str, str], workdir: Path, *args: str, timeout: float = 300
) -> dict[str, Any]:
    """Run ``script`` (flash finds a function's source in its file) and read the JSON object
    its last line prints."""
    path = workdir / "flash_app.py"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(path), *args],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-5000:])
    answer = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    answer["console"] = done.stdout + done.stderr  # what flash printed on the way
    return answer
