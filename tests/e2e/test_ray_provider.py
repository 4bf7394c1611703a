"""Workers placed on a real Ray cluster (``SKIFF_PROVIDER=ray``): three nodes on this machine,
each declaring a different GPU type (tests/ray_cluster.py), and the real ``skiff serve`` and
runpod SDK as worker and client.

Priority placement across nodes, Ray's GPU assignment, logs streamed back, a stopped worker's
GPU handed back to Ray, a node stopped with ``ray stop --force`` mid-job (its job runs again on
another node, its GPUs leave the inventory), and a leader killed outright whose workers the next
leader takes over. The tests run in file order: the node stop is the last to use its node."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench.ray_nodes import RayCluster, ray_available, ray_cluster
from harness import WORKERS, Server, running

from pgtest import PG_DSN

A40, L4, L40S = "NVIDIA A40", "NVIDIA L4", "NVIDIA L40S"

pytestmark = pytest.mark.skipif(
    ray_available() is not None and not os.environ.get("SKIFF_TEST_REQUIRE_RAY"),
    reason=str(ray_available()),
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    problem = ray_available()
    assert problem is None, problem
    with ray_cluster(tmp_path_factory.mktemp("ray"), [A40, L4, L40S]) as started:
        yield started


def ray_env(cluster: RayCluster, **more: str | None) -> dict[str, str | None]:
    return {
        "SKIFF_PROVIDER": "ray",
        "SKIFF_RAY_ADDRESS": cluster.address,
        "SKIFF_RATE_LIMITS": "off",
        **more,
    }


@pytest.fixture(scope="module")
def server(cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("skiff-ray") / "data"
    with running(data, env=ray_env(cluster)) as started:
        yield started


@pytest.fixture(scope="module")
def runpod_sdk(server: Server) -> Any:
    import runpod

    runpod.api_key = server.key
    runpod.endpoint_url_base = f"{server.url}/v2"
    return runpod


def gpu_endpoint(server: Server, types: list[str], **fields: Any) -> str:
    template = server.create_template("ray_worker.py")
    body = {
        "templateId": template["id"],
        "computeType": "GPU",
        "gpuTypeIds": types,
        "idleTimeout": 60,
        **fields,
    }
    made = server.http.post("/v1/endpoints", json=body)
    assert made.status_code == 200, made.text
    return str(made.json()["id"])


def workers_of(server: Server, eid: str) -> list[dict[str, Any]]:
    body = server.http.get(f"/v1/endpoints/{eid}", params={"includeWorkers": "true"}).json()
    return sorted(body.get("workers", []), key=lambda w: w["startedAt"])


def status(server: Server, eid: str, job_id: str) -> dict[str, Any]:
    return dict(server.http.get(f"/v2/{eid}/status/{job_id}").json())


def gpu_types(server: Server) -> dict[str, int]:
    """The GPU types the server offers, as the SDK's ``runpod.get_gpus()`` asks for them."""
    query = {"query": "query { gpuTypes { id maxGpuCount } }"}
    answer = server.http.post("/graphql", json=query).json()
    return {gpu["id"]: gpu["maxGpuCount"] for gpu in answer["data"]["gpuTypes"]}


def test_the_inventory_is_the_clusters_and_every_node_reaches_the_server(server: Server) -> None:
    assert gpu_types(server) == {A40: 1, L4: 1, L40S: 1}
    server.wait_for(
        lambda: "every node of the cluster reaches the server" in server.tail_log(),
        what="the reachability check",
    )


def test_workers_go_to_the_preferred_type_first_and_to_the_next_when_it_is_full(
    server: Server, cluster: RayCluster, runpod_sdk: Any
) -> None:
    eid = gpu_endpoint(server, [L4, L40S], workersMax=2, scalerType="REQUEST_COUNT", scalerValue=1)
    endpoint = runpod_sdk.Endpoint(eid)
    # Long enough that the second job finds the first worker busy, however slow a start is.
    first = endpoint.run({"sleep": 10})
    server.wait_for(lambda: first.status() == "IN_PROGRESS", what="the first job to start")
    second = endpoint.run({"sleep": 1})
    outputs = [first.output(timeout=120), second.output(timeout=120)]
    placed = workers_of(server, eid)
    assert [w["gpu"] for w in placed] == [L4, L40S]
    # Each node has one GPU: Ray gave each actor its node's GPU 0.
    assert [o["cuda"] for o in outputs] == ["0", "0"]
    assert {o["worker"] for o in outputs} == {w["id"] for w in placed}
    # The handler's own lines came back from the nodes into the endpoint's log.
    lines = server.wait_for(
        lambda: [
            line
            for line in server.http.get(f"/v1/endpoints/{eid}/logs").json()["lines"]
            if "running job" in line["line"]
        ],
        what="the workers' log lines",
    )
    assert {line["worker"] for line in lines} == {w["id"] for w in placed}
    assert any(first.job_id in line["line"] for line in lines)
    # Scaled to zero: the workers stop and Ray has both GPUs free again.
    assert server.http.patch(f"/v1/endpoints/{eid}", json={"workersMax": 0}).status_code == 200
    server.wait_for(lambda: not workers_of(server, eid), timeout=60, what="the workers to stop")
    server.wait_for(
        lambda: cluster.available(f"skiff_gpu:{L4}") == 1 == cluster.available(f"skiff_gpu:{L40S}"),
        timeout=30,
        what="Ray to have both GPUs free",
    )
    assert cluster.actors("skiff") == []


def pod_state(server: Server, pod_id: str) -> dict[str, Any]:
    return dict(server.http.get(f"/v1/pods/{pod_id}").json())


def answer(url: str) -> dict[str, Any] | None:
    try:
        return dict(httpx.get(url, timeout=2).json())
    except (httpx.HTTPError, ValueError):
        return None


def test_a_gpu_pod_runs_on_its_types_node_restarts_in_place_and_hands_its_gpu_back(
    server: Server, cluster: RayCluster
) -> None:
    port = _free_port()
    made = server.http.post(
        "/v1/pods",
        json={
            "name": "on-ray",
            "imageName": "local/python",
            "computeType": "GPU",
            "gpuTypeIds": [L4],
            "gpuCount": 1,
            "volumeInGb": 0,
            "dockerStartCmd": [sys.executable, str(WORKERS / "pod_server.py"), str(port)],
            "ports": [f"{port}/http"],
        },
    )
    assert made.status_code == 201, made.text
    pod_id = made.json()["id"]
    pod = server.wait_for(
        lambda: (p := pod_state(server, pod_id))["status"] == "running" and p,
        what="the pod to run",
    )
    url = pod["urls"][f"{port}/http"]
    first = server.wait_for(lambda: answer(url), what="the pod to answer")
    assert (first["pod"], first["cuda"], first["gpus"]) == (pod_id, "0", "1")
    assert cluster.available(f"skiff_gpu:{L4}") == 0
    assert cluster.actors("skiff") == [f"skiff-pod-{pod_id}"]
    # `skiff gpus` shows the cluster's GPUs, node by node, and who holds each.
    rows = skiff_gpus(cluster)
    assert rows[L4][-1] == f"pod {pod_id}" and rows[A40][-1] == rows[L40S][-1] == "-"
    # Its disk is kept across a restart, in the same actor on the same node.
    assert httpx.post(url, content=b"kept").status_code == 200
    assert server.http.post(f"/v1/pods/{pod_id}/restart").status_code == 200
    again = server.wait_for(
        lambda: (a := answer(url)) is not None and a["pid"] != first["pid"] and a,
        what="the restarted pod to answer",
    )
    assert again["disk"] == "kept"
    # It may answer before the restart is written down.
    server.wait_for(lambda: pod_state(server, pod_id)["status"] == "running", what="running")
    # Its log came back from the node: a line of each start.
    logs = server.http.get(f"/v1/pods/{pod_id}/logs").json()["lines"]
    assert [line["line"] for line in logs] == [f"serving on {port}"] * 2, logs
    assert server.http.delete(f"/v1/pods/{pod_id}").status_code == 204
    server.wait_for(lambda: not cluster.actors("skiff"), what="the pod's actor to go")
    assert cluster.available(f"skiff_gpu:{L4}") == 1


def test_a_pod_with_a_volume_is_told_that_ray_nodes_mount_none(server: Server) -> None:
    made = server.http.post(
        "/v1/pods",
        json={
            "name": "with-volume",
            "imageName": "local/python",
            "computeType": "CPU",
            "vcpuCount": 1,
            "volumeInGb": 5,
            "dockerStartCmd": [sys.executable, "-c", "import time; time.sleep(60)"],
        },
    )
    assert made.status_code == 201, made.text
    pod_id = made.json()["id"]
    problem = server.wait_for(
        lambda: pod_state(server, pod_id).get("problem"), what="the pod's problem"
    )
    assert "no volume" in problem and "volumeInGb 0" in problem
    server.http.delete(f"/v1/pods/{pod_id}")


def test_a_cpu_worker_reserves_its_vcpus_on_some_node(
    server: Server, cluster: RayCluster, runpod_sdk: Any
) -> None:
    template = server.create_template("ray_worker.py")
    made = server.http.post(
        "/v1/endpoints",
        json={
            "templateId": template["id"],
            "computeType": "CPU",
            "vcpuCount": 1,
            "workersMax": 1,
            # Idle for as long as the test looks at what it holds.
            "idleTimeout": 60,
        },
    )
    assert made.status_code == 200, made.text
    eid = made.json()["id"]
    output = runpod_sdk.Endpoint(eid).run_sync({}, timeout=120)
    # No GPU for a CPU worker, one of the cluster's three CPUs held while it runs.
    assert output["cuda"] == ""
    assert cluster.available("CPU") == 2
    server.http.delete(f"/v1/endpoints/{eid}")
    server.wait_for(lambda: cluster.available("CPU") == 3, what="the CPU to be free again")


def skiff_gpus(cluster: RayCluster) -> dict[str, list[str]]:
    """``skiff gpus`` run by an operator on a Ray cluster: its rows by GPU type."""
    env = os.environ | {"SKIFF_PROVIDER": "ray", "SKIFF_RAY_ADDRESS": cluster.address}
    shown = subprocess.run(
        [sys.executable, "-m", "skiff", "gpus"], env=env, capture_output=True, check=True
    ).stdout.decode()
    header, *lines = shown.strip().splitlines()
    assert header.split() == ["GPU", "TYPE", "NODE", "HELD", "BY"], shown
    rows = {}
    for line in lines:
        for name in (A40, L4, L40S):
            if name + " " in line:
                rows[name] = line.replace(name, "").split(maxsplit=2)
    return rows


def test_a_load_balancing_worker_on_a_node_is_reached_at_the_nodes_address(
    server: Server,
) -> None:
    made = server.create_endpoint("lb_worker.py", type="LB", workersMax=1, vcpuCount=1)
    answer = server.http.post(f"/lb/{made['id']}/generate", json={"prompt": "hello"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["prompt"] == "hello"
    (worker,) = workers_of(server, made["id"])
    assert worker["id"] == answer.json()["worker"]
    server.http.delete(f"/v1/endpoints/{made['id']}")


def test_a_worker_that_dies_at_start_is_backed_off_with_its_last_lines_shown(
    server: Server,
) -> None:
    made = server.create_endpoint("crash_worker.py", workersMin=1, workersMax=1, vcpuCount=1)
    failure = server.wait_for(
        lambda: server.http.get(f"/v1/endpoints/{made['id']}").json().get("lastWorkerFailure"),
        what="the failed start to be recorded",
    )
    assert "exited with code 3 right after it started" in failure["error"]
    assert any("missing.safetensors" in line for line in failure["lastLogLines"]), failure
    server.http.delete(f"/v1/endpoints/{made['id']}")


def test_a_template_change_rolls_the_workers_onto_fresh_actors(
    server: Server, cluster: RayCluster
) -> None:
    template = server.create_template("ray_worker.py")
    made = server.http.post(
        "/v1/endpoints",
        json={
            "templateId": template["id"],
            "computeType": "GPU",
            "gpuTypeIds": [A40],
            "workersMin": 1,
            "workersMax": 1,
        },
    )
    eid = made.json()["id"]
    (old,) = server.wait_for(
        lambda: [w for w in workers_of(server, eid) if w["state"] == "idle"],
        what="the first worker",
    )
    changed = server.http.patch(f"/v1/templates/{template['id']}", json={"env": {"V": "2"}})
    assert changed.status_code == 200, changed.text
    # The new worker waits for the A40 until the old one's actor has let it go: it may still
    # be waiting the moment the old one leaves the list.
    (new,) = server.wait_for(
        lambda: (
            [w for w in workers_of(server, eid) if w["id"] != old["id"] and "gpu" in w]
            if old["id"] not in {w["id"] for w in workers_of(server, eid)}
            else []
        ),
        timeout=90,
        what="the old worker to be replaced by one holding the GPU",
    )
    assert new["gpu"] == A40
    assert cluster.actors("skiff") == [f"skiff-worker-{new['id']}"]
    server.http.delete(f"/v1/endpoints/{eid}")
    server.wait_for(lambda: not cluster.actors("skiff"), what="the actor to go")


def test_a_flashboot_standby_actor_takes_the_first_job_and_another_is_kept(
    server: Server, cluster: RayCluster
) -> None:
    eid = gpu_endpoint(server, [A40], workersMax=1, idleTimeout=1, flashboot=True)
    (standby,) = server.wait_for(
        lambda: [w for w in workers_of(server, eid) if w["state"] == "standby"],
        timeout=90,
        what="a standby worker",
    )
    server.wait_for(
        lambda: cluster.actors("skiff") == [f"skiff-worker-{standby['id']}"],
        what="its actor",
    )
    done = server.http.post(f"/v2/{eid}/runsync", json={"input": {}}, timeout=120).json()
    assert done["status"] == "COMPLETED", done
    # Promoted, not replaced: the standby's process ran it.
    assert done["output"]["worker"] == standby["id"]
    server.wait_for(
        lambda: [w["state"] for w in workers_of(server, eid)] == ["standby"],
        timeout=60,
        what="one standby again",
    )
    server.http.delete(f"/v1/endpoints/{eid}")
    server.wait_for(lambda: not cluster.actors("skiff"), what="the actor to go")


def test_a_job_past_its_execution_timeout_ends_its_worker_on_the_node_and_another_serves(
    server: Server, cluster: RayCluster, runpod_sdk: Any
) -> None:
    eid = gpu_endpoint(server, [A40], workersMax=1)
    endpoint = runpod_sdk.Endpoint(eid)
    stuck = endpoint.run({"input": {"sleep": 120}, "policy": {"executionTimeout": 5000}})
    server.wait_for(lambda: stuck.status() == "TIMED_OUT", timeout=60, what="TIMED_OUT")
    (first,) = workers_of(server, eid)
    # The synchronous handler cannot let go: after the stop grace its worker (and actor) is
    # ended, and a new one on the same node's GPU serves the next job.
    after = endpoint.run_sync({}, timeout=120)
    assert after["worker"] != first["id"] and after["cuda"] == "0"
    assert cluster.actors("skiff") == [f"skiff-worker-{after['worker']}"]
    server.http.delete(f"/v1/endpoints/{eid}")
    server.wait_for(lambda: not cluster.actors("skiff"), what="the actor to go")


def test_a_node_stopped_mid_job_sends_the_job_to_another_node_and_leaves_the_inventory(
    server: Server, cluster: RayCluster, runpod_sdk: Any
) -> None:
    eid = gpu_endpoint(server, [L40S, A40], workersMax=1)
    job = runpod_sdk.Endpoint(eid).run({"sleep": 8})
    server.wait_for(lambda: job.status() == "IN_PROGRESS", timeout=60, what="the job to start")
    (first,) = workers_of(server, eid)
    assert first["gpu"] == L40S
    node = next(n for n in cluster.nodes if n.gpu_type == L40S)
    node.ray_stop()
    output = job.output(timeout=120)
    assert output is not None, status(server, eid, job.job_id)
    assert output["worker"] != first["id"]
    (replacement,) = workers_of(server, eid)
    assert replacement["id"] == output["worker"] and replacement["gpu"] == A40
    server.wait_for(lambda: L40S not in gpu_types(server), what="the node's GPU to go")
    assert "its Ray actor is gone" in server.tail_log()
    server.http.delete(f"/v1/endpoints/{eid}")


def test_a_node_that_joins_adds_its_gpus_and_a_waiting_worker_starts_there(
    server: Server, cluster: RayCluster, runpod_sdk: Any
) -> None:
    h100 = "NVIDIA H100 80GB HBM3"
    eid = gpu_endpoint(server, [h100], workersMax=1)
    job = runpod_sdk.Endpoint(eid).run({})
    health = server.wait_for(
        lambda: server.http.get(f"/v2/{eid}/health").json().get("placement"),
        what="the job to wait for a GPU",
    )
    assert health["cause"] == "no-gpu", health
    cluster.add_node(h100)
    server.wait_for(lambda: h100 in gpu_types(server), what="the new node's GPU")
    output = job.output(timeout=120)
    assert output is not None and output["cuda"] == "0"
    (worker,) = workers_of(server, eid)
    assert worker["gpu"] == h100
    server.http.delete(f"/v1/endpoints/{eid}")


class Front:
    """What a load balancer in front of the replicas does for the tests: each connection goes
    to the first replica that accepts it."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        for port in self.ports:
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
                break
            except OSError:
                continue
        else:
            client.close()
            return
        upstream.settimeout(None)
        pipes = [(client, upstream), (upstream, client)]
        for source, sink in pipes:
            threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._listener.close()


def test_a_leader_killed_outright_leaves_its_workers_running_and_the_next_leader_takes_them_over(
    cluster: RayCluster, tmp_path: Path, schema: str
) -> None:
    ports = [_free_port(), _free_port()]
    front = Front(ports)
    namespace = f"skiff-{schema}"
    env = ray_env(
        cluster,
        SKIFF_DATABASE_URL=PG_DSN,
        SKIFF_DATABASE_SCHEMA=schema,
        SKIFF_LEADER_CHECK_SECONDS="0.2",
        SKIFF_PUBLIC_URL=front.url,
        SKIFF_RAY_NAMESPACE=namespace,
    )
    first = Server(tmp_path / "a", port=ports[0], env=env)
    second = Server(tmp_path / "b", port=ports[1], env=env)
    try:
        first.start()
        second.start()
        eid = gpu_endpoint(first, [L4], workersMin=1, workersMax=1)
        done = second.http.post(f"/v2/{eid}/runsync", json={"input": {}}, timeout=120).json()
        assert done["status"] == "COMPLETED", done
        (worker,) = workers_of(second, eid)
        assert worker["replica"] == first.http.get("/healthz").json()["replica"]
        assert cluster.actors(namespace) == [f"skiff-worker-{worker['id']}"]

        assert first.proc is not None
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
        first.proc = None
        second.wait_for(
            lambda: second.http.get("/healthz").json()["leader"], timeout=30, what="the takeover"
        )
        new_replica = second.http.get("/healthz").json()["replica"]
        (taken,) = second.wait_for(
            lambda: [w for w in workers_of(second, eid) if w["replica"] == new_replica],
            what="the worker to be taken over",
        )
        # The same worker, the same process, still on the GPU it had: nothing restarted.
        assert (taken["id"], taken["pid"], taken["gpu"]) == (worker["id"], worker["pid"], L4)
        after = second.http.post(
            f"/v2/{eid}/runsync", json={"input": {"sleep": 0.5}}, timeout=120
        ).json()
        assert after["status"] == "COMPLETED", after
        assert after["output"]["worker"] == worker["id"] and after["output"]["pid"] == worker["pid"]
        assert len(workers_of(second, eid)) == 1
        # Its output reaches the new leader's log of it.
        second.wait_for(
            lambda: any(
                after["id"] in line["line"]
                for line in second.http.get(f"/v1/endpoints/{eid}/logs").json()["lines"]
            ),
            what="the job's line in the new leader's log",
        )
        second.http.delete(f"/v1/endpoints/{eid}")
        second.wait_for(lambda: not cluster.actors(namespace), timeout=60, what="the actor to go")
    finally:
        for server in (second, first):
            server.stop()
        front.close()


def test_a_public_url_that_no_node_reaches_is_reported_at_start(
    cluster: RayCluster, tmp_path: Path
) -> None:
    unreachable = f"http://127.0.0.1:{_free_port()}"
    env = ray_env(cluster, SKIFF_PUBLIC_URL=unreachable, SKIFF_RAY_NAMESPACE="skiff-reach")
    with running(tmp_path / "data", env=env) as lonely:
        lonely.wait_for(
            lambda: "cannot reach the server" in lonely.tail_log(),
            timeout=90,
            what="the reachability warning",
        )
        assert unreachable in lonely.tail_log()


def test_a_cluster_address_nothing_answers_at_stops_the_server_saying_so(tmp_path: Path) -> None:
    env: dict[str, str | None] = {
        "SKIFF_PROVIDER": "ray",
        "SKIFF_RAY_ADDRESS": f"127.0.0.1:{_free_port()}",
    }
    server = Server(tmp_path / "data", env=env)
    with pytest.raises(RuntimeError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1"):
        server.start()
    server.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
