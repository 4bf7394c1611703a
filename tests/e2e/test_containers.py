"""Workers as containers (``SKIFF_PROVIDER=docker``) against the real Docker daemon, with the
real runpod SDK inside the container as worker and as client: a job completes in the image,
and a password-protected local registry (Debian's docker-registry, htpasswd auth) is pulled
from with the right password, a wrong one, and for an image it does not have."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server, free_port, running

from docker_image import CONTAINER_SERVER_ENV, PYTHON_IN_IMAGE, containers_of, docker_client
from eventually import eventually

USER, PASSWORD = "skiff", "registry-pw-0123"
GIB = 1024**3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, image: str) -> Iterator[Server]:
    # A disk check every second: what a container wrote past its volume's size is seen soon.
    env = {**CONTAINER_SERVER_ENV, "SKIFF_DISK_CHECK_SECONDS": "1"}
    with running(tmp_path_factory.mktemp("containers") / "data", env=env) as server:
        yield server


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, image: str) -> Iterator[str]:
    """A registry on 127.0.0.1 with htpasswd auth, holding the test image as skiff/worker:v1."""
    root = tmp_path_factory.mktemp("registry")
    htpasswd = subprocess.run(
        ["htpasswd", "-Bbn", USER, PASSWORD], check=True, capture_output=True, text=True
    ).stdout
    (root / "htpasswd").write_text(htpasswd)
    port = free_port()
    (root / "config.yml").write_text(
        f"""version: 0.1
storage:
  filesystem:
    rootdirectory: {root / "data"}
http:
  addr: 127.0.0.1:{port}
auth:
  htpasswd:
    realm: skiff-test
    path: {root / "htpasswd"}
"""
    )
    log = (root / "registry.log").open("wb")
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(root / "config.yml")], stdout=log, stderr=log
    )
    try:
        eventually(
            lambda: httpx.get(f"http://127.0.0.1:{port}/v2/").status_code == 401,
            "the registry to ask for credentials",
            ignoring=(httpx.TransportError,),
            context=lambda: (root / "registry.log").read_text(errors="replace")[-2000:],
        )
        address = f"127.0.0.1:{port}"
        client = docker_client()
        client.images.get(image).tag(f"{address}/skiff/worker", "v1")
        push(client, f"{address}/skiff/worker", "v1")
        yield address
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        # The registry's copy of the image is gone with the registry: so is its local tag.
        with contextlib.suppress(Exception):
            docker_client().images.remove(f"{address}/skiff/worker:v1", force=True)


def push(client: Any, repository: str, tag: str) -> None:
    """Push a local image to the test registry, with its password."""
    for event in client.api.push(
        repository,
        tag=tag,
        stream=True,
        decode=True,
        auth_config={"username": USER, "password": PASSWORD},
    ):
        assert "error" not in event, event


def endpoint(server: Server, image: str, auth_id: str | None = None, **fields: Any) -> str:
    body: dict[str, Any] = {
        "name": f"tpl-{time.monotonic_ns()}",
        "imageName": image,
        "env": {"SKIFF_TEST_VAR": "from-the-template"},
    }
    if auth_id:
        body["containerRegistryAuthId"] = auth_id
    template = server.http.post("/v1/templates", json=body)
    assert template.status_code == 200, template.text
    created = server.http.post(
        "/v1/endpoints",
        json={"templateId": template.json()["id"], "computeType": "CPU", **fields},
    )
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def registry_auth(server: Server, password: str) -> str:
    response = server.http.post(
        "/v1/containerregistryauth",
        json={"name": f"reg-{time.monotonic_ns()}", "username": USER, "password": password},
    )
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def runsync(server: Server, eid: str, body: dict[str, Any]) -> dict[str, Any]:
    response = server.http.post(f"/v2/{eid}/runsync", json={"input": body}, timeout=120)
    return dict(response.json())


def failure_of(server: Server, eid: str) -> Any:
    return server.http.get(f"/v1/endpoints/{eid}").json().get("lastWorkerFailure")


def test_a_job_runs_inside_the_templates_image(server: Server, image: str) -> None:
    eid = endpoint(server, image, workersMax=1)
    out = runsync(server, eid, {})
    assert out["status"] == "COMPLETED", out
    # A file only the image has: the handler runs in the image's own root filesystem.
    assert out["output"]["marker"] == "inside the skiff test image"
    assert out["output"]["custom"] == "from-the-template"
    # Nothing of the server's environment: PATH is the image's.
    assert out["output"]["path"].startswith("/opt/venv/bin:")
    server.http.delete(f"/v1/endpoints/{eid}")


def test_a_worker_container_has_a_process_limit_and_gains_no_privileges(
    server: Server, image: str
) -> None:
    eid = endpoint(server, image, workersMin=1, workersMax=1)
    try:
        container = server.wait_for(
            lambda: next((c for c in containers_of(eid) if c.status == "running"), None),
            what="a running worker container",
        )
        host_config = container.attrs["HostConfig"]
        assert host_config["PidsLimit"] == 4096  # SKIFF_CONTAINER_PIDS_LIMIT's default
        assert "no-new-privileges:true" in host_config["SecurityOpt"]
        # And the kernel applies it to the worker itself (the container's first process).
        code, status = container.exec_run(["cat", "/proc/1/status"])
        assert code == 0 and "NoNewPrivs:\t1" in status.decode(), status
    finally:
        server.http.delete(f"/v1/endpoints/{eid}")


def test_an_authenticated_pull_runs_the_private_image(server: Server, registry: str) -> None:
    docker_client().images.remove(f"{registry}/skiff/worker:v1", force=True)
    eid = endpoint(server, f"{registry}/skiff/worker:v1", registry_auth(server, PASSWORD))
    out = runsync(server, eid, {})
    assert out["status"] == "COMPLETED", out
    assert out["output"]["marker"] == "inside the skiff test image"
    server.http.delete(f"/v1/endpoints/{eid}")


def test_a_private_image_on_the_daemon_runs_for_no_template_without_credentials(
    server: Server, registry: str
) -> None:
    """Every tenant's images share one daemon: the copy a pull with credentials left is not
    run for a template without them (a pull without them is tried, and the registry refuses
    it), nor found by a prefix of its id, which Docker would take as its name."""
    private = f"{registry}/skiff/worker:v1"
    with_auth = endpoint(server, private, registry_auth(server, PASSWORD))
    assert runsync(server, with_auth, {})["status"] == "COMPLETED"
    image_id = docker_client().images.get(private).id.removeprefix("sha256:")
    for reference, says in ((private, "refused the credentials"), (image_id[:8], "could not be")):
        bare = endpoint(server, reference)
        server.http.post(f"/v2/{bare}/run", json={"input": {}})
        failure = server.wait_for(
            lambda bare=bare: failure_of(server, bare), what=f"{reference} refused"
        )
        assert says in failure["error"], failure
        server.http.delete(f"/v1/endpoints/{bare}")
    server.http.delete(f"/v1/endpoints/{with_auth}")


@pytest.mark.parametrize(
    ("what", "reference", "password", "says"),
    [
        ("wrong password", "skiff/worker:v1", "not-the-password", "refused the credentials"),
        ("missing image", "skiff/nothing:v1", PASSWORD, "does not exist"),
    ],
)
def test_a_failed_pull_makes_an_unhealthy_worker_saying_why(
    server: Server, registry: str, what: str, reference: str, password: str, says: str
) -> None:
    eid = endpoint(server, f"{registry}/{reference}", registry_auth(server, password))
    server.http.post(f"/v2/{eid}/run", json={"input": {}})
    failure = server.wait_for(lambda: failure_of(server, eid), what=f"a failure ({what})")
    assert says in failure["error"], failure
    assert password not in str(failure)
    assert any("pulling" in line for line in failure["lastLogLines"])
    server.wait_for(
        lambda: server.http.get(f"/v2/{eid}/health").json()["workers"]["unhealthy"] >= 1,
        what="an unhealthy worker",
    )
    server.http.delete(f"/v1/endpoints/{eid}")


def test_an_unreachable_registry_makes_an_unhealthy_worker_saying_so(server: Server) -> None:
    eid = endpoint(
        server, f"127.0.0.1:{free_port()}/skiff/worker:v1", registry_auth(server, PASSWORD)
    )
    server.http.post(f"/v2/{eid}/run", json={"input": {}})
    failure = server.wait_for(lambda: failure_of(server, eid), what="a failure")
    assert "could not be reached" in failure["error"], failure
    server.http.delete(f"/v1/endpoints/{eid}")


def test_the_password_never_reaches_the_servers_log(server: Server, registry: str) -> None:
    assert PASSWORD not in Path(server.log_path).read_text()


def test_two_container_endpoints_share_a_network_volume(server: Server, image: str) -> None:
    made = server.http.post("/v1/networkvolumes", json={"name": "shared", "size": 1})
    assert made.status_code == 200, made.text
    volume = made.json()["id"]
    writer = endpoint(server, image, workersMax=1, networkVolumeId=volume)
    reader = endpoint(server, image, workersMax=1, networkVolumeId=volume)
    wrote = runsync(server, writer, {"write": {"name": "note.txt", "text": "from a container"}})
    assert wrote["status"] == "COMPLETED", wrote
    read = runsync(server, reader, {"read": "note.txt"})
    assert read["status"] == "COMPLETED", read
    assert read["output"]["read"] == "from a container"
    # A bind mount of the volume's directory on the server: the file is there too.
    assert (server.data_dir / "volumes" / volume / "note.txt").read_text() == "from a container"
    for eid in (writer, reader):
        server.http.delete(f"/v1/endpoints/{eid}")


def test_a_worker_container_whose_network_volume_holds_more_than_its_size_is_ended(
    server: Server, image: str
) -> None:
    made = server.http.post("/v1/networkvolumes", json={"name": "filled", "size": 1})
    assert made.status_code == 200, made.text
    volume = made.json()["id"]
    eid = endpoint(server, image, workersMin=1, workersMax=1, networkVolumeId=volume)
    try:
        server.wait_for(
            lambda: next((c for c in containers_of(eid) if c.status == "running"), None),
            what="a running worker container",
        )
        # Real blocks, as a container's write would take them, in no time.
        with open(server.data_dir / "volumes" / volume / "over.bin", "wb") as over:
            os.posix_fallocate(over.fileno(), 0, GIB + GIB // 8)
        failure = server.wait_for(lambda: failure_of(server, eid), what="the worker's eviction")
        assert f"network volume {volume} held 1.13 GB, over its size (1 GB)" in failure["error"]
        # A volume keeps its files: its user grows it or removes some.
        assert (server.data_dir / "volumes" / volume / "over.bin").exists()
    finally:
        server.http.delete(f"/v1/endpoints/{eid}")


#: Takes 1.2 GB of real blocks on the container's own disk, in no time.
FILL_LAYER = (
    "import os; f = os.open('/filler', os.O_CREAT | os.O_WRONLY); "
    f"os.posix_fallocate(f, 0, {GIB * 6 // 5})"
)


def test_a_worker_container_that_writes_past_its_container_disk_is_ended(
    server: Server, image: str
) -> None:
    # overlay2 on ext4 (this machine's Docker) cannot bound a layer: the disk check does.
    template = server.http.post(
        "/v1/templates",
        json={"name": f"tpl-{time.monotonic_ns()}", "imageName": image, "containerDiskInGb": 1},
    )
    assert template.status_code == 200, template.text
    created = server.http.post(
        "/v1/endpoints",
        json={
            "templateId": template.json()["id"],
            "computeType": "CPU",
            "workersMin": 1,
            "workersMax": 1,
        },
    )
    assert created.status_code == 200, created.text
    eid = created.json()["id"]
    try:
        container = server.wait_for(
            lambda: next((c for c in containers_of(eid) if c.status == "running"), None),
            what="a running worker container",
        )
        code, said = container.exec_run([PYTHON_IN_IMAGE, "-c", FILL_LAYER])
        assert code == 0, said
        failure = server.wait_for(lambda: failure_of(server, eid), what="the worker's eviction")
        # The check may read the layer while it is still being filled: any size past 1 GB.
        held = re.search(
            f"worker {container.labels['dev.skiff.worker-id']}: its container disk held"
            r" (\d+\.\d\d) GB, over containerDiskInGb \(1 GB\)",
            failure["error"],
        )
        assert held is not None and float(held.group(1)) > 1.0, failure
        server.wait_for(
            lambda: all(c.id != container.id for c in containers_of(eid)),
            what="the container to go",
        )
    finally:
        server.http.delete(f"/v1/endpoints/{eid}")


class ThrottledProxy:
    """A TCP proxy in front of the registry that passes the registry's answers on at
    ``bytes_per_second``: a pull through it takes as long as a large one from afar, for real
    (the daemon reads a real registry, just slowly)."""

    def __init__(self, target: str, bytes_per_second: int) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._rate = bytes_per_second
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(
                target=self._pipe, args=(upstream, client, self._rate), daemon=True
            ).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, rate: int | None) -> None:
        chunk = 16 * 1024
        with contextlib.suppress(OSError):
            while data := source.recv(chunk):
                sink.sendall(data)
                if rate:
                    time.sleep(len(data) / rate)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()


@pytest.fixture(scope="module")
def large_image(registry: str, image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """skiff/large:v1 in the registry (not on this host): the test image and 12 MiB of
    incompressible bytes in a layer of its own, so that a pull has a layer to download."""
    context = tmp_path_factory.mktemp("large")
    (context / "Dockerfile").write_text(
        f"FROM {image}\nRUN head -c 12582912 /dev/urandom > /opt/ballast\n"
    )
    client = docker_client()
    built = f"{registry}/skiff/large:v1"
    client.images.build(path=str(context), tag=built, rm=True)
    push(client, f"{registry}/skiff/large", "v1")
    client.images.remove(built, force=True)
    return "skiff/large:v1"


def log_text(server: Server, eid: str) -> str:
    response = server.http.get(f"/v1/endpoints/{eid}/logs")
    assert response.status_code == 200, response.text
    return "\n".join(line["line"] for line in response.json()["lines"])


def test_a_slow_pull_shows_its_progress_and_holds_up_no_other_endpoint(
    server: Server, registry: str, large_image: str, image: str
) -> None:
    proxy = ThrottledProxy(registry, bytes_per_second=768 * 1024)
    slow_image = f"{proxy.address}/{large_image}"
    try:
        auth = registry_auth(server, PASSWORD)
        slow = endpoint(server, slow_image, auth, workersMax=1)
        given_up = endpoint(server, slow_image, auth, workersMax=1)
        queued = server.http.post(f"/v2/{slow}/run", json={"input": {}}).json()["id"]
        server.http.post(f"/v2/{given_up}/run", json={"input": {}})
        server.wait_for(
            lambda: "downloading" in log_text(server, slow), what="the pull's progress in the log"
        )
        # An endpoint whose image is here runs its job while the pull goes on: the scaler
        # did not wait for the pull.
        quick = endpoint(server, image, workersMax=1)
        assert runsync(server, quick, {})["status"] == "COMPLETED"
        workers = server.http.get(f"/v1/endpoints/{slow}?includeWorkers=true").json()["workers"]
        assert [w["state"] for w in workers] == ["initializing"], workers
        assert containers_of(slow) == []
        # An endpoint deleted while its worker pulls: the start is given up, and no container
        # of it ever runs.
        assert server.http.delete(f"/v1/endpoints/{given_up}").status_code == 204

        done = server.wait_for(
            lambda: (
                (s := server.http.get(f"/v2/{slow}/status/{queued}").json())["status"]
                == "COMPLETED"
                and s
            ),
            timeout=120,
            what="the job of the pulled image",
        )
        assert done["output"]["marker"] == "inside the skiff test image"
        assert containers_of(given_up) == []
        text = log_text(server, slow)
        assert f"pulling {slow_image}" in text
        assert "downloading 100%" in text or "Download complete" in text, text
        for eid in (slow, quick):
            server.http.delete(f"/v1/endpoints/{eid}")
    finally:
        proxy.close()
        with contextlib.suppress(Exception):
            docker_client().images.remove(slow_image, force=True)


def test_skiff_serve_with_containers_on_the_default_loopback_host_is_refused_saying_what_to_set(
    tmp_path: Path,
) -> None:
    """Its containers could not reach it: every job would wait out the 600 s start-up deadline
    in silence. Refused before anything is made (no Docker daemon needed to say so)."""
    server = Server(tmp_path / "data", env={"SKIFF_PROVIDER": "docker", "SKIFF_HOST": None})
    serve = ["serve", "--port", str(server.port), "--data-dir", str(server.data_dir)]
    child = subprocess.run(
        [sys.executable, "-m", "skiff", *serve],
        env=server.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode != 0, child.stdout + child.stderr
    errors = [line for line in child.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, child.stderr
    assert "listens on 127.0.0.1 (SKIFF_HOST, --host)" in errors[0], errors
    assert "SKIFF_HOST to the docker0 bridge's address" in errors[0], errors
    assert not server.data_dir.exists()
