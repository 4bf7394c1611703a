"""The README's walk-through, run as written: the workers and the client of ``examples/`` against
a real server, unmodified, so what a newcomer copies is known to work."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from harness import Server

from flash_programs import flash_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _endpoint(server: Server, script: str, **fields: object) -> str:
    template = server.http.post(
        "/v1/templates",
        json={
            "name": f"example-{script}",
            "imageName": "local/example",
            "category": "CPU",
            "dockerStartCmd": [sys.executable, str(EXAMPLES / script)],
        },
    )
    assert template.status_code == 200, template.text
    endpoint = server.http.post(
        "/v1/endpoints",
        json={"templateId": template.json()["id"], "computeType": "CPU", **fields},
    )
    assert endpoint.status_code == 200, endpoint.text
    return str(endpoint.json()["id"])


def test_walkthrough_client_runs_against_the_example_workers(server: Server) -> None:
    hello = _endpoint(server, "handler.py", name="hello", workersMax=2, idleTimeout=60)
    words = _endpoint(server, "stream_handler.py")
    env = dict(
        os.environ,
        SKIFF_KEY=server.key,
        ENDPOINT_ID=hello,
        STREAM_ENDPOINT_ID=words,
        RUNPOD_ENDPOINT_BASE_URL=f"{server.url}/v2",
    )
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "client.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert ast.literal_eval(lines[0]) == {"greeting": "hello, sdk"}
    assert lines[1] in {"IN_QUEUE", "IN_PROGRESS"}
    assert ast.literal_eval(lines[2]) == {"greeting": "hello, later"}
    assert lines[3] == "COMPLETED"
    assert ast.literal_eval(lines[4])["status"] == "CANCELLED"
    health = ast.literal_eval(lines[5])
    assert set(health) >= {"jobs", "workers"}
    assert ast.literal_eval(lines[6]) == {"removed": 0, "status": "completed"}
    assert [ast.literal_eval(line) for line in lines[7:]] == [
        {"word": "one"},
        {"word": "two"},
        {"word": "three"},
    ]


def test_the_flash_example_computes_on_a_skiff_worker(server: Server, tmp_path: Path) -> None:
    # As the README runs it: humanize comes from the package index the host's pip uses.
    env = flash_env(server.url, server.key, tmp_path)
    run = subprocess.run(
        [sys.executable, "-W", "ignore", str(EXAMPLES / "flash_app.py")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
    assert run.stdout.strip().splitlines()[-1] == "1.2 million"
