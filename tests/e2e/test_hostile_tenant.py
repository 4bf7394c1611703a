"""A hostile second tenant on the default local provider, in a real ``skiff serve``: user B's
worker and pod each try to read the database (by path, by ``find``, through the server's
``/proc/<pid>/fd``), other processes' environments, other users' volumes and homes, and to write
into the data directory (``workers/hostile_probe.py``). The sandbox (providers/bubblewrap.py)
stops every attempt, and user A's secrets (a registry password, a template's env value, a job's
input and ``s3Config``, a pod's env value, the webhook signing secret, the worker token in A's
worker's environment) appear nowhere in B's outputs or logs; wherever the data directory lies.
Where the kernel fences ports, B cannot bind the port A's pod declares either.

A server that cannot make a sandbox (no ``bwrap`` on its ``PATH``) still runs the
administrator's endpoint, and tells user B why B's workers and pods wait."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import WORKERS, Server, running

from pod_programs import pod_port
from skiff.providers import bubblewrap, port_fence

REPO = Path(__file__).resolve().parents[2]
PROBE = WORKERS / "hostile_probe.py"

needs_bwrap = pytest.mark.skipif(
    bubblewrap.executable() is None,
    reason="bubblewrap (bwrap) makes the sandbox: .ci/run installs it",
)


def _client(server: Server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def _endpoint(http: httpx.Client, argv: list[str], **fields: Any) -> dict[str, Any]:
    env = fields.pop("env", {})
    template = _ok(
        http.post(
            "/v1/templates",
            json={
                "name": f"tpl-{time.monotonic_ns()}",
                "imageName": "local/worker",
                "dockerStartCmd": argv,
                "env": env,
                **fields.pop("template", {}),
            },
        )
    )
    return _ok(
        http.post(
            "/v1/endpoints", json={"templateId": template["id"], "computeType": "CPU", **fields}
        )
    )


def _pod(http: httpx.Client, argv: list[str], **fields: Any) -> dict[str, Any]:
    body = {"imageName": "local/python", "computeType": "CPU", "dockerStartCmd": argv}
    return _ok(http.post("/v1/pods", json=body | fields))


def _finished(server: Server, http: httpx.Client, endpoint_id: str, job_id: str) -> Any:
    def done() -> dict[str, Any] | None:
        job = dict(http.get(f"/v2/{endpoint_id}/status/{job_id}").json())
        return job if job["status"] in ("COMPLETED", "FAILED") else None

    job = server.wait_for(done, timeout=120, what=f"job {job_id}")
    assert job["status"] == "COMPLETED", job
    return job["output"]


class TenantA:
    """User A (the administrator): secrets in every place skiff keeps one, and a worker and a
    pod running with theirs in their environments."""

    def __init__(self, server: Server) -> None:
        http = server.http
        self.markers = {
            "registry": "ALICE-REGISTRY-PASSWORD-7f3a",
            "template_env": "ALICE-TEMPLATE-ENV-91c2",
            "job_input": "ALICE-JOB-INPUT-5d0e",
            "s3": "ALICE-S3-SECRET-c8b4",
            "pod_env": "ALICE-POD-ENV-2e77",
        }
        _ok(
            http.post(
                "/v1/containerregistryauth",
                json={"name": "a", "username": "alice", "password": self.markers["registry"]},
            )
        )
        self.markers["webhook"] = _ok(http.get("/v1/webhooksecret"))["secret"]
        self.endpoint = _endpoint(
            http,
            [sys.executable, str(WORKERS / "echo_worker.py")],
            env={"ALICE_ENV": self.markers["template_env"]},
            workersMin=1,
        )
        job = _ok(
            http.post(
                f"/v2/{self.endpoint['id']}/run",
                json={
                    "input": {"secret": self.markers["job_input"]},
                    "s3Config": {
                        "accessId": "alice",
                        "accessSecret": self.markers["s3"],
                        "bucketName": "b",
                        "endpointUrl": "https://s3.example.com",
                    },
                },
            )
        )
        _finished(server, http, self.endpoint["id"], job["id"])
        #: A port A's pod declares and has yet to bind: free for a hostile tenant to take.
        self.port = pod_port()
        self.pod = _pod(
            http,
            [sys.executable, "-c", "import signal; signal.pause()"],
            name="alice",
            ports=[f"{self.port}/http"],
            env={"ALICE_POD": self.markers["pod_env"]},
        )
        # Its worker's token is in that worker's environment; the endpoint id stands for it
        # (the token is never shown, and the id is in the same environment).
        self.markers["worker_env"] = f"RUNPOD_ENDPOINT_ID={self.endpoint['id']}"

    def secrets(self) -> list[str]:
        return list(self.markers.values())


def _probe_input(server: Server, markers: list[str]) -> dict[str, Any]:
    data_dir = (server.cwd or Path.cwd()) / server.data_dir
    assert server.proc is not None
    return {
        "data_dir": str(data_dir.resolve()),
        "volumes_dir": str((data_dir / "volumes").resolve()),
        "server_pid": server.proc.pid,
        "markers": markers,
    }


def _pod_report(server: Server, http: httpx.Client, pod_id: str) -> dict[str, Any]:
    def reported() -> dict[str, Any] | None:
        for line in http.get(f"/v1/pods/{pod_id}/logs").json()["lines"]:
            if line["line"].startswith("PROBE "):
                return dict(json.loads(line["line"][len("PROBE ") :]))
        return None

    return dict(server.wait_for(reported, timeout=120, what=f"pod {pod_id}'s probe"))


def _everything_b_sees(http: httpx.Client, endpoint_id: str, pod_id: str) -> str:
    return "\n".join(
        [
            http.get(f"/v1/endpoints/{endpoint_id}/logs").text,
            http.get(f"/v1/pods/{pod_id}/logs").text,
        ]
    )


def _hostile_tenant_is_kept_out(server: Server) -> None:
    alice = TenantA(server)
    bob = _client(server, server.user_key("bob"))
    data_dir = Path(_probe_input(server, [])["data_dir"])
    spec = _probe_input(server, alice.secrets())
    if port_fence.fence_problem() is None:
        spec["ports"] = [alice.port]
    endpoint = _endpoint(bob, [sys.executable, str(PROBE)])
    job = _ok(bob.post(f"/v2/{endpoint['id']}/run", json={"input": spec}))
    worker_report = _finished(server, bob, endpoint["id"], job["id"])
    pod = _pod(bob, [sys.executable, str(PROBE), json.dumps(spec)], name="bob", volumeInGb=1)
    pod_report = _pod_report(server, bob, pod["id"])
    for report in (worker_report, pod_report):
        assert report["found"] == [], report
        assert report["reached"] == [], report
        assert report["uid"] == bubblewrap.SANDBOX_UID
        # Its own processes only: the worker and the SDK's heartbeat, or the pod's one, and
        # the sandbox's init; never the server's dozens.
        assert report["processes"] <= 6, report
    assert not (data_dir / "pwned").exists()
    seen = _everything_b_sees(bob, endpoint["id"], pod["id"])
    seen += json.dumps(worker_report) + json.dumps(pod_report)
    for secret in alice.secrets():
        assert secret not in seen


@needs_bwrap
def test_a_tenant_with_an_absolute_data_dir_cannot_reach_another_tenants_secrets(
    tmp_path: Path,
) -> None:
    with running(tmp_path / "data") as server:
        _hostile_tenant_is_kept_out(server)


@needs_bwrap
def test_a_tenant_with_a_relative_data_dir_cannot_reach_another_tenants_secrets(
    tmp_path: Path,
) -> None:
    with running(Path(".skiff"), cwd=tmp_path) as server:
        _hostile_tenant_is_kept_out(server)


@pytest.fixture
def data_dir_in_checkout() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp(prefix=".skiff-hostile-", dir=REPO))
    try:
        yield made / "data"
    finally:
        shutil.rmtree(made, ignore_errors=True)


@needs_bwrap
def test_a_tenant_with_the_data_dir_inside_the_checkout_cannot_reach_another_tenants_secrets(
    data_dir_in_checkout: Path,
) -> None:
    with running(data_dir_in_checkout) as server:
        _hostile_tenant_is_kept_out(server)


def _parent_name(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    parent = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
    return Path(f"/proc/{parent}/comm").read_text().strip()


@needs_bwrap
def test_a_worker_forked_in_its_endpoints_sandbox_cannot_reach_another_tenants_secrets(
    tmp_path: Path,
) -> None:
    with running(tmp_path / "data") as server:
        alice = TenantA(server)
        bob = _client(server, server.user_key("bob"))
        spec = _probe_input(server, alice.secrets())
        endpoint = _endpoint(bob, [sys.executable, str(PROBE)], workersMax=1)
        eid = endpoint["id"]

        def probe() -> tuple[dict[str, Any], str]:
            job = _ok(bob.post(f"/v2/{eid}/run", json={"input": spec}))
            report = _finished(server, bob, eid, job["id"])
            return report, _ok(bob.get(f"/v2/{eid}/status/{job['id']}"))["workerId"]

        plain, _ = probe()  # the endpoint's first worker starts plainly; its zygote then
        server.wait_for(
            lambda: (
                f"in the sandbox of {(Path(spec['data_dir']) / 'workers' / eid)} is ready"
                in server.log_path.read_text()
            ),
            what="the zygote in bob's sandbox",
        )
        # Scaled to zero and back: the next worker comes out of the zygote.
        _ok(bob.patch(f"/v1/endpoints/{eid}", json={"workersMax": 0}))
        server.wait_for(
            lambda: (
                not _ok(bob.get(f"/v1/endpoints/{eid}", params={"includeWorkers": "true"}))[
                    "workers"
                ]
            ),
            what="bob's worker to stop",
        )
        _ok(bob.patch(f"/v1/endpoints/{eid}", json={"workersMax": 1}))
        forked, worker_id = probe()
        workers = _ok(bob.get(f"/v1/endpoints/{eid}", params={"includeWorkers": "true"}))
        (worker,) = [w for w in workers["workers"] if w["id"] == worker_id]
        assert _parent_name(int(worker["pid"])).startswith("python")  # the zygote, not bwrap
        for report in (plain, forked):
            assert report["found"] == [] and report["reached"] == [], report
            assert report["uid"] == bubblewrap.SANDBOX_UID
            assert report["processes"] <= 6, report
        for secret in alice.secrets():
            assert secret not in json.dumps(forked)


def test_a_server_without_a_sandbox_runs_the_administrators_endpoint_and_tells_others_why(
    tmp_path: Path,
) -> None:
    # A PATH without bwrap: the server finds no sandbox to make.
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("find",):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    with running(tmp_path / "data", env={"PATH": str(bare)}) as server:
        admin = _endpoint(server.http, [sys.executable, str(WORKERS / "echo_worker.py")])
        job = _ok(server.http.post(f"/v2/{admin['id']}/run", json={"input": {"n": 1}}))
        assert _finished(server, server.http, admin["id"], job["id"]) == {"echo": {"n": 1}}

        bob = _client(server, server.user_key("bob"))
        theirs = _endpoint(bob, [sys.executable, str(WORKERS / "echo_worker.py")])
        _ok(bob.post(f"/v2/{theirs['id']}/run", json={"input": {"n": 2}}))

        def blocked() -> dict[str, Any] | None:
            placement = bob.get(f"/v2/{theirs['id']}/health").json().get("placement")
            return placement if placement else None

        placement = server.wait_for(blocked, what="bob's endpoint to say why it waits")
        assert placement["cause"] == "no-sandbox"
        assert "bubblewrap" in placement["reason"]
        pod = _pod(bob, [sys.executable, "-c", "print('ran')"], name="bob")

        def pod_problem() -> str | None:
            got = bob.get(f"/v1/pods/{pod['id']}").json()
            return str(got.get("problem") or "") or None

        assert "sandbox" in server.wait_for(pod_problem, what="bob's pod to say why it waits")
        assert bob.get(f"/v2/{theirs['id']}/health").json()["workers"].get("running", 0) == 0
