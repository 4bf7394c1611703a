"""runpod-flash's live path (``flash dev``, ``FLASH_IS_LIVE_PROVISIONING=true``) against a real
``skiff serve``: the GraphQL its client sends to find and save its template and endpoint, check
stock and delete, made by runpod-flash 1.21.0 itself, unmodified, in a process of its own (it
reads its URLs at import)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from graphql import build_schema, parse, validate
from harness import Server

from flash_programs import FLASH_GPU, flash_env
from skiff.api.graphql import SDL

#: A GraphQL operation's first line, as the client's triple-quoted strings begin.
OPERATION = re.compile(r"(query|mutation)\s+\w+\s*[({]")

#: The client's calls on the live path: what deploying, checking and removing an endpoint
#: sends. (Flash apps, builds and environments are the deployed path's.)
LIVE_PATH = (
    "get_template",
    "update_template",
    "save_endpoint",
    "get_gpu_lowest_price_stock_status",
    "get_cpu_specific_stock_status",
    "delete_endpoint",
    "endpoint_exists",
)

#: The source of each client method named on the command line, as JSON.
DOCUMENTS = """
import inspect, json, sys
from runpod_flash.core.api.runpod import RunpodGraphQLClient
print(json.dumps({n: inspect.getsource(getattr(RunpodGraphQLClient, n)) for n in sys.argv[1:]}))
"""

SCRIPT = """
import asyncio, json, sys
from runpod_flash.core.api.runpod import RunpodGraphQLClient
from runpod_flash.core.resources import CpuLiveServerless, LiveServerless

def payload(resource):
    return resource.model_dump(exclude=resource._payload_exclude(), exclude_none=True, mode="json")

async def main():
    client = RunpodGraphQLClient()
    out = {}
    cpu = payload(CpuLiveServerless(name="hello", instanceIds=["cpu3c-2-4"], env={"A": "1"}))
    out["cpu"] = await client.save_endpoint(cpu)
    # A second endpoint of the same template (flash names templates by their contents).
    out["twin"] = await client.save_endpoint(dict(cpu, name="hello-twin"))
    out["updated"] = await client.save_endpoint(dict(cpu, id=out["cpu"]["id"], workersMax=3))
    out["template"] = await client.get_template(out["cpu"]["templateId"])
    out["gpu"] = await client.save_endpoint(payload(LiveServerless(name="gpu-hello")))
    out["cpu_stock"] = await client.get_cpu_specific_stock_status("cpu3c", "cpu3c-2-4", "")
    out["cpu_too_big"] = await client.get_cpu_specific_stock_status("cpu3c", "cpu3c-512-4", "")
    out["gpu_stock"] = await client.get_gpu_lowest_price_stock_status(sys.argv[1], 1)
    out["gpu_too_many"] = await client.get_gpu_lowest_price_stock_status(sys.argv[1], 8)
    out["exists"] = await client.endpoint_exists(out["twin"]["id"])
    out["deleted"] = await client.delete_endpoint(out["twin"]["id"])
    out["exists_after"] = await client.endpoint_exists(out["twin"]["id"])
    await client.close()
    print(json.dumps(out))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def server(flash_server: Server) -> Server:
    return flash_server


def _flash(server: Server, tmp_path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", SCRIPT, FLASH_GPU],
        env=flash_env(server.url, server.key, tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_every_operation_of_the_live_path_is_one_skiff_answers(tmp_path: Path) -> None:
    # Read in a process of its own: importing runpod-flash configures logging for the whole
    # process (and warns of URLs other tests set).
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", DOCUMENTS, *LIVE_PATH],
        env={**os.environ, "RUNPOD_API_KEY": "unused", "HOME": str(tmp_path)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sources: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    schema = build_schema(SDL)
    for name in LIVE_PATH:
        texts = [t for t in sources[name].split('"""') if OPERATION.match(t.strip())]
        assert texts, name
        for text in texts:
            assert validate(schema, parse(text)) == [], (name, text)


def test_flash_saves_finds_checks_and_deletes_its_endpoints(server: Server, tmp_path: Path) -> None:
    out = _flash(server, tmp_path)

    cpu, twin, updated, gpu = out["cpu"], out["twin"], out["updated"], out["gpu"]
    assert cpu["gpuIds"] == "CPU" and cpu["instanceIds"] == ["cpu3c-2-4"]
    assert cpu["type"] == "QB" and cpu["workersMin"] == 0 and cpu["workersMax"] == 1
    # "0" is flash's "no limit of its own": skiff's default stands.
    assert cpu["executionTimeoutMs"] == 600_000
    assert twin["templateId"] == cpu["templateId"]  # the template found by name, not refused
    assert updated["id"] == cpu["id"] and updated["workersMax"] == 3
    assert out["template"]["imageName"].startswith("runpod/flash-cpu:")
    assert gpu["gpuIds"] != "CPU"
    assert (out["cpu_stock"], out["cpu_too_big"]) == ("High", None)
    assert (out["gpu_stock"], out["gpu_too_many"]) == ("High", None)
    assert out["exists"] is True and out["deleted"] == {"success": True}
    assert out["exists_after"] is False

    # Flash names a live endpoint "live-" and the name it was given; the twin is gone.
    listed = {e["name"]: e for e in server.http.get("/v1/endpoints").json()}
    assert set(listed) == {"live-hello", "live-gpu-hello"}
    hello = listed["live-hello"]
    assert hello["computeType"] == "CPU" and hello["workersMax"] == 3
    assert hello["instanceIds"] == ["cpu3c-2-4"]
