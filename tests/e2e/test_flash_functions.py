"""runpod-flash 1.21.0, unmodified, calls its functions on a skiff server (issue 35): skiff's
own Flash worker (``skiff.flash_worker``) runs them in the sandbox in place of the hosted Flash
image, with a pip dependency installed once from a package index of the test's own."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server

from flash_programs import (
    FLASH_LB_DOMAIN,
    WHEEL,
    flash_env,
    function_request,
    lb_flash_endpoint,
    package_index,
    run_flash,
)

SCRIPT = """
import asyncio, json, os, time
from runpod_flash import Endpoint, GpuType

ENV = json.loads(os.environ["WORKER_ENV"])


@Endpoint(name="words", cpu="cpu3c-2-4", dependencies=["skiffwords==1.0"], env=ENV)
async def describe(n):
    import skiffwords
    return skiffwords.intword(n)


@Endpoint(name="plain", cpu="cpu3c-2-4", env=ENV)
def add(a, b):
    print("adding", a, "and", b)
    return a + b


@Endpoint(name="plain", cpu="cpu3c-2-4", env=ENV)
def divide(a, b):
    return a / b


@Endpoint(name="plain", cpu="cpu3c-2-4", env=ENV)
def numbers():
    return (n for n in range(3))


@Endpoint(name="counter", cpu="cpu3c-2-4", env=ENV)
class Counter:
    def __init__(self, start):
        self.n = start

    def add(self, k):
        self.n += k
        return self.n


@Endpoint(name="gpu-env", gpu=GpuType.NVIDIA_GEFORCE_RTX_4090, env=ENV)
def visible_gpus():
    import os
    return os.environ.get("CUDA_VISIBLE_DEVICES")


@Endpoint(name="broken", cpu="cpu3c-2-4", dependencies=["skiffwords==9.9"], env=ENV)
def never():
    return 1


async def error_of(call):
    try:
        await call
    except Exception as exc:
        return str(exc)
    return None


async def main():
    out = {"first": await describe(1234567)}
    started = time.perf_counter()
    out["second"] = await describe(7_500)
    out["second_seconds"] = time.perf_counter() - started
    out["add"] = await add(2, 3)
    out["divide_error"] = await error_of(divide(1, 0))
    out["numbers_error"] = await error_of(numbers())
    counter = Counter(10)
    out["counted"] = [await counter.add(1), await counter.add(5)]
    other = Counter(100)
    out["other"] = await other.add(1)
    out["gpu"] = await visible_gpus()
    out["broken_error"] = await error_of(never())
    print(json.dumps(out))


asyncio.run(main())
"""


@pytest.fixture(scope="module")
def server(flash_server: Server) -> Server:
    return flash_server


def _endpoints(server: Server) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in server.http.get("/v1/endpoints").json()}


def _console_page(server: Server, path: str) -> str:
    """``path`` of the console, signed in with the server's key over plain HTTP."""
    with httpx.Client(base_url=server.url) as client:
        form = client.get("/console")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token is not None
        signed_in = client.post(
            "/console/login", data={"csrf": token.group(1), "api_key": server.key, "next": ""}
        )
        assert signed_in.status_code == 303, signed_in.text
        page = client.get(path)
        assert page.status_code == 200, page.text
        return page.text


def test_flash_functions_and_a_class_run_on_skiff_workers(server: Server, tmp_path: Path) -> None:
    with package_index(tmp_path / "index") as index:
        env = flash_env(server.url, server.key, tmp_path) | {
            "WORKER_ENV": json.dumps(index.pip_env()),
            # Where flash dev reads a worker's log while it waits: skiff's /v1/pod/{id}/logs.
            "RUNPOD_HAPI_URL": server.url,
        }
        out = run_flash(SCRIPT, env, tmp_path)
        downloads = index.downloads[WHEEL]

    # The dependency, installed with pip, computed on the worker; the second call found it.
    assert (out["first"], out["second"]) == ("1.2 million", "7.5 thousand")
    assert downloads == 1
    # flash dev's console showed the worker's lines as they came (read from /v1/pod/{id}/logs).
    assert "flash worker: installing skiffwords==1.0" in out["console"]
    assert out["add"] == 5
    # The function's exception with its type, message and the line it came from.
    error = out["divide_error"]
    assert "ZeroDivisionError: division by zero" in error
    assert 'File "<flash function divide>", line 2, in divide' in error and "a / b" in error
    assert "cannot be pickled" in out["numbers_error"] and "generator" in out["numbers_error"]
    # One instance's state across method calls; another instance has its own.
    assert out["counted"] == [11, 16] and out["other"] == 101
    assert out["gpu"] == "0"  # the declared GPU it was given, pinned as for any worker
    broken = out["broken_error"]
    assert "DependencyError" in broken and "skiffwords==9.9" in broken

    listed = _endpoints(server)
    assert {"live-words", "live-plain", "live-counter", "live-gpu-env"} <= set(listed)
    assert listed["live-gpu-env"]["computeType"] == "GPU"
    words = listed["live-words"]["id"]
    workers = server.http.get(f"/v1/endpoints/{words}", params={"includeWorkers": "true"}).json()
    assert len(workers["workers"]) == 1  # both calls on the one worker
    # Its log says what it installed, once.
    (worker,) = workers["workers"]
    # Installed where every worker of the endpoint finds it, in the endpoint's sandbox.
    cache = (server.cwd or Path.cwd()) / server.data_dir / "workers" / words / ".flash-cache"
    assert [p.name.startswith("py3.") for p in (cache / "deps").iterdir()] == [True]
    lines = server.http.get(f"/v1/endpoints/{words}/logs").json()["lines"]
    installs = [x for x in lines if "installing skiffwords==1.0" in x["line"]]
    assert [x["worker"] for x in installs] == [worker["id"]], lines[-20:]
    # The worker's log as the hosted log service gives it, for its owner only.
    own = server.http.get(f"/v1/pod/{worker['id']}/logs").json()
    assert any("installing skiffwords==1.0" in line for line in own["container"])
    assert all(line[:4].isdigit() and "T" in line.split(" ", 1)[0] for line in own["container"])
    other = {"Authorization": f"Bearer {server.user_key('flash-other')}"}
    refused = server.http.get(f"/v1/pod/{worker['id']}/logs", headers=other)
    assert refused.status_code == 404 and worker["id"] in refused.text
    # Listed in the console like any endpoint.
    assert "live-words" in _console_page(server, "/console/endpoints/live")
    # Metered like any worker: its running seconds are billed to the endpoint.
    server.wait_for(
        lambda: (
            sum(
                r["timeBilledMs"]
                for r in server.http.get(
                    "/v1/billing/endpoints", params={"bucketSize": "hour", "endpointId": words}
                ).json()
            )
            > 0
        ),
        what="the Flash worker's time billed",
    )


def test_a_load_balanced_flash_endpoint_answers_execute_over_http(server: Server) -> None:
    """runpod-flash calls a load-balanced endpoint's function with ``POST /execute`` at
    ``https://{id}.{domain}`` (its endpoint base URL's host); here the same request reaches
    skiff by that Host header, and by ``/lb/{id}``."""
    endpoint_id = lb_flash_endpoint(server, "runpod/flash-lb-cpu:py3.12-latest")
    code = "def area(w, h):\n    print('measuring')\n    return w * h\n"
    request = function_request("area", code, 3, 4)
    host = {"Host": f"{endpoint_id}.{FLASH_LB_DOMAIN}"}
    answer = server.http.post("/execute", json=request, headers=host, timeout=90)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"success": True, "json_result": 12, "stdout": "measuring\n"}

    failing = dict(request, function_code="def area(w, h):\n    return w / 0\n")
    failed = server.http.post(f"/lb/{endpoint_id}/execute", json=failing).json()
    assert failed["success"] is False and "ZeroDivisionError" in failed["error"]
    for body in (b"{not json", b"[" * 100_000 + b"]" * 100_000, b'"\xff\xfe"'):
        bad = server.http.post(f"/lb/{endpoint_id}/execute", content=body)
        assert bad.status_code == 400 and "not JSON" in bad.text, body[:20]
    for input in ("a\u0000b", "\ud800"):  # NUL and a lone surrogate as a function's name
        escaped = json.dumps(dict(request, function_name=input))  # \u escapes, as sent
        named = server.http.post(f"/lb/{endpoint_id}/execute", content=escaped).json()
        assert named["success"] is False and "BadRequest" in named["error"]
    assert server.http.get("/ping", headers=host).json() == {"status": "healthy"}
    # Straight at the worker's port on the loopback, as another tenant's code could, it runs
    # nothing: only what skiff's proxy sends carries the endpoint's key.
    with sqlite3.connect(server.data_dir / "skiff.db") as db:
        [(address,)] = db.execute(
            "SELECT address FROM workers WHERE endpoint_id = ? AND address IS NOT NULL",
            (endpoint_id,),
        ).fetchall()
    straight = httpx.post(f"http://{address}/execute", json=request, timeout=30)
    assert straight.status_code == 403, straight.text
    assert "skiff's proxy" in straight.json()["error"]
    forged = httpx.post(
        f"http://{address}/execute", json=request, headers={"X-Skiff-Lb-Key": "guess"}, timeout=30
    )
    assert forged.status_code == 403
