"""The runpod SDK's management half (``runpod.api``) against a real ``skiff serve``, unmodified:
it posts GraphQL to ``$RUNPOD_API_BASE_URL/graphql``. Who you are, this host's GPU types, your
endpoints and pods, and a pod stopped, resumed and terminated; an operation skiff does not
serve yet raises the SDK's own ``QueryError`` naming it, and a wrong key its
``AuthenticationError``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Server, running

RTX = "NVIDIA GeForce RTX 4090"
#: The GPU type `runpod pod create`'s default pod asks for.
RTX_3090 = "NVIDIA GeForce RTX 3090"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    prices = tmp_path_factory.mktemp("prices") / "prices.toml"
    prices.write_text(f'[gpu_hour]\n"{RTX}" = 0.69\n')
    env: dict[str, str | None] = {
        "SKIFF_GPUS": f"{RTX}:2,{RTX_3090}:1",
        "SKIFF_PRICES": str(prices),
    }
    with running(tmp_path_factory.mktemp("sdk-api") / "data", env=env) as server:
        yield server


@pytest.fixture
def sdk(fleet: Server) -> Iterator[Any]:
    import runpod

    os.environ["RUNPOD_API_BASE_URL"] = fleet.url
    runpod.api_key = fleet.key
    try:
        yield runpod
    finally:
        os.environ.pop("RUNPOD_API_BASE_URL", None)


def test_who_i_am_my_volumes_and_the_hosts_gpu_types(fleet: Server, sdk: Any) -> None:
    volume = fleet.http.post("/v1/networkvolumes", json={"name": "models", "size": 1}).json()
    me = sdk.get_user()
    assert me["id"] and me["pubKey"] is None
    assert {"id": volume["id"], "name": "models", "size": 1, "dataCenterId": "local"} in me[
        "networkVolumes"
    ]
    assert sdk.get_gpus() == [
        {"id": RTX, "displayName": RTX, "memoryInGb": None},
        {"id": RTX_3090, "displayName": RTX_3090, "memoryInGb": None},
    ]
    gpu = sdk.get_gpu(RTX, 2)
    assert gpu["maxGpuCount"] == 2 and gpu["securePrice"] == 0.69
    assert gpu["lowestPrice"]["uninterruptablePrice"] == pytest.approx(1.38)


def test_my_endpoints_as_the_sdk_lists_them(fleet: Server, sdk: Any) -> None:
    endpoint = fleet.create_endpoint(name="listed", workersMax=2, env={"A": "1"})
    (listed,) = [e for e in sdk.get_endpoints() if e["id"] == endpoint["id"]]
    assert (listed["name"], listed["workersMax"], listed["gpuIds"]) == ("listed", 2, "CPU")
    assert listed["env"] == [{"key": "A", "value": "1"}]


def test_the_sdk_creates_an_endpoint_no_gpu_here_can_serve_despite_the_warning(
    fleet: Server, sdk: Any
) -> None:
    """The answer carries ``extensions.warnings`` beside the data; the SDK parses it as before."""
    template = sdk.create_template(name="sdk-warned", image_name="local/worker")
    h100 = "NVIDIA H100 80GB HBM3"  # not in this fleet
    endpoint = sdk.create_endpoint(name="sdk-warned", template_id=template["id"], gpu_ids=h100)
    assert (endpoint["name"], endpoint["gpuIds"]) == ("sdk-warned", h100)
    stored = fleet.http.get(f"/v1/endpoints/{endpoint['id']}").json()
    assert stored["placement"]["cause"] == "no-gpu"
    fleet.http.delete(f"/v1/endpoints/{endpoint['id']}")
    fleet.http.delete(f"/v1/templates/{template['id']}")


def test_a_pod_is_listed_stopped_resumed_and_terminated(
    fleet: Server, sdk: Any, tmp_path: Path
) -> None:
    made = fleet.http.post(
        "/v1/pods",
        json={
            "name": "sdk-pod",
            "imageName": "local/python",
            "gpuTypeIds": [RTX],
            "volumeInGb": 0,
            "dockerStartCmd": [sys.executable, "-c", "import time; time.sleep(600)"],
        },
    )
    assert made.status_code == 201, made.text
    pod_id = made.json()["id"]
    fleet.wait_for(
        lambda: fleet.http.get(f"/v1/pods/{pod_id}").json()["status"] == "running",
        what="the pod to run",
    )
    (listed,) = [p for p in sdk.get_pods() if p["id"] == pod_id]
    assert (listed["name"], listed["desiredStatus"], listed["gpuCount"]) == (
        "sdk-pod",
        "RUNNING",
        1,
    )
    assert listed["machine"]["gpuDisplayName"] == RTX and listed["costPerHr"] == 0.69
    assert sdk.get_pod(pod_id)["id"] == pod_id
    assert sdk.get_pod("no-such-pod") is None

    assert sdk.stop_pod(pod_id) == {"id": pod_id, "desiredStatus": "EXITED"}
    resumed = sdk.resume_pod(pod_id, 1)
    assert resumed["desiredStatus"] == "RUNNING"
    sdk.terminate_pod(pod_id)
    assert fleet.http.get(f"/v1/pods/{pod_id}").status_code == 404
    with pytest.raises(sdk.error.QueryError, match="not found"):
        sdk.stop_pod(pod_id)


def test_an_operation_skiff_does_not_serve_raises_the_sdks_query_error(sdk: Any) -> None:
    from runpod.api.graphql import run_graphql_query

    with pytest.raises(sdk.error.QueryError, match="Cannot query field 'savingsPlans'"):
        run_graphql_query("query { myself { savingsPlans { id } } }")


def test_the_users_public_key_is_set_and_read_back(sdk: Any) -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI me@laptop"
    assert sdk.update_user_settings(key)["pubKey"] == key
    assert sdk.get_user()["pubKey"] == key
    with pytest.raises(sdk.error.QueryError, match="printable"):
        sdk.update_user_settings("ssh-ed25519 \u0007")


def test_templates_endpoints_and_registry_auths_are_made_as_the_sdk_asks(
    fleet: Server, sdk: Any
) -> None:
    auth = sdk.create_container_registry_auth("registry", "me", "secret")
    assert auth["name"] == "registry" and auth["id"]
    changed = sdk.update_container_registry_auth(auth["id"], "me2", "secret2")
    assert changed == {"id": auth["id"], "name": "registry"}
    with pytest.raises(sdk.error.QueryError, match="not found"):
        sdk.update_container_registry_auth("nope", "me2", "secret2")
    template = sdk.create_template(
        name="sdk-template",
        image_name="local/worker",
        docker_start_cmd=f"{sys.executable} -c 'print(1)'",
        ports="8888/http",
        env={"A": "1"},
        is_serverless=True,
        registry_auth_id=auth["id"],
    )
    assert template["name"] == "sdk-template" and template["ports"] == "8888/http"
    assert template["env"] == [{"key": "A", "value": "1"}] and template["isServerless"]
    stored = fleet.http.get(f"/v1/templates/{template['id']}").json()
    assert stored["dockerStartCmd"][1:] == ["-c", "print(1)"]
    assert stored["containerRegistryAuthId"] == auth["id"]

    endpoint = sdk.create_endpoint(
        name="sdk-endpoint", template_id=template["id"], gpu_ids=RTX, workers_max=2
    )
    assert (endpoint["name"], endpoint["workersMax"], endpoint["gpuIds"]) == (
        "sdk-endpoint",
        2,
        RTX,
    )
    pooled = sdk.create_endpoint(name="pooled", template_id=template["id"])  # AMPERE_16
    assert fleet.http.get(f"/v1/endpoints/{pooled['id']}").json()["gpuTypeIds"] == []
    other = sdk.create_template(name="sdk-template-2", image_name="local/worker")
    moved = sdk.update_endpoint_template(endpoint_id=endpoint["id"], template_id=other["id"])
    assert moved == {"id": endpoint["id"], "templateId": other["id"]}
    with pytest.raises(sdk.error.QueryError, match=r"no template|not found"):
        sdk.update_endpoint_template(endpoint_id=endpoint["id"], template_id="nope")

    for made in (endpoint, pooled):
        fleet.http.delete(f"/v1/endpoints/{made['id']}")
    fleet.http.delete(f"/v1/templates/{template['id']}")
    assert sdk.delete_container_registry_auth(auth["id"]) is True
    with pytest.raises(sdk.error.QueryError, match="not found"):
        sdk.delete_container_registry_auth(auth["id"])


def test_a_wrong_key_raises_the_sdks_authentication_error(sdk: Any) -> None:
    with pytest.raises(sdk.error.AuthenticationError):
        sdk.get_user(api_key="not-a-key")


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{", 400),
        (b"[]", 400),
        (b'{"query": 5}', 400),
        (b'{"query": "{ myself { id "}', 200),  # a syntax error, the GraphQL way
        (b'{"query": "\\udfff"}', 400),  # a lone surrogate is no JSON text
        (b'{"query": "' + b"{ myself " * 500 + b'"}', 200),
    ],
)
def test_bad_graphql_is_refused_clearly_never_a_server_error(
    fleet: Server, body: bytes, status: int
) -> None:
    answer = fleet.http.post("/graphql", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == status, answer.text
    assert answer.json()["errors"][0]["message"]


def test_an_id_holding_a_nul_is_refused_before_any_lookup(fleet: Server) -> None:
    query = {"query": '{ pod(input: {podId: "a\\u0000b"}) { id } }'}
    answer = fleet.http.post("/graphql", json=query)
    assert answer.json() == {"errors": [{"message": "NUL characters are not accepted"}]}


def test_another_users_key_sees_and_touches_none_of_it(fleet: Server, sdk: Any) -> None:
    made = fleet.http.post(
        "/v1/pods",
        json={
            "name": "mine",
            "imageName": "x",
            "computeType": "CPU",
            "volumeInGb": 0,
            "dockerStartCmd": ["sleep", "600"],
        },
    )
    pod_id = made.json()["id"]
    printed = subprocess.run(
        [sys.executable, "-m", "skiff", "keys", "create", "--user", "bob"],
        env=fleet.env() | {"SKIFF_DATA_DIR": str(fleet.data_dir)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    bob = next(word for word in printed.split() if word.startswith("sk_"))
    assert sdk.get_pods(api_key=bob) == []
    assert sdk.get_pod(pod_id, api_key=bob) is None
    assert sdk.get_user(api_key=bob)["networkVolumes"] == []
    fleet.http.delete(f"/v1/pods/{pod_id}")


def test_create_pod_makes_a_gpu_pod_and_a_cpu_pod(fleet: Server, sdk: Any) -> None:
    sleeper = f"{sys.executable} -c 'import time; time.sleep(600)'"
    made = sdk.create_pod(
        "sdk-made",
        "local/python",
        RTX,
        docker_args=sleeper,
        ports="8888/http, 22/tcp",
        env={"A": "1"},
        volume_mount_path="/workspace",
    )
    assert made["imageName"] == "local/python" and made["env"] == ["A=1"]
    pod = fleet.http.get(f"/v1/pods/{made['id']}").json()
    assert pod["gpuCount"] == 1 and pod["ports"] == ["8888/http", "22/tcp"]
    assert pod["dockerStartCmd"][1:] == ["-c", "import time; time.sleep(600)"]
    cpu = sdk.create_pod("sdk-cpu", "local/python", instance_id="cpu3c-4-8", docker_args=sleeper)
    cpu_pod = fleet.http.get(f"/v1/pods/{cpu['id']}").json()
    assert (cpu_pod["computeType"], cpu_pod["vcpuCount"]) == ("CPU", 4)
    for pod_id in (made["id"], cpu["id"]):
        sdk.terminate_pod(pod_id)


def test_create_pod_refusals_come_back_as_the_sdks_errors(sdk: Any) -> None:
    # The SDK checks the GPU type first (get_gpu): this host has none of that type.
    with pytest.raises(ValueError):
        sdk.create_pod("nope", "local/python", "NVIDIA H100 80GB HBM3")
    with pytest.raises(sdk.error.QueryError, match="N/http or N/tcp"):
        sdk.create_pod("bad-port", "local/python", RTX, ports="8888")
    # Pods here are processes (the local provider): one with no command, or one whose program
    # is not there, would never start.
    with pytest.raises(sdk.error.QueryError, match=r"dockerStartCmd: .*has neither"):
        sdk.create_pod("no-command", "local/python", RTX)
    with pytest.raises(sdk.error.QueryError, match="'no-such-program' is not a program"):
        sdk.create_pod("missing", "local/python", RTX, docker_args="no-such-program --serve")


def runpod_cli(fleet: Server, home: Path) -> Callable[..., str]:
    """The ``runpod`` command-line tool, configured with the fleet's key in ``home``: what it
    prints (its error output when it is expected to fail)."""
    env = {**os.environ, "HOME": str(home), "RUNPOD_API_BASE_URL": fleet.url}
    program = str(Path(sys.executable).parent / "runpod")

    def cli(*args: str, given: str = "", succeeds: bool = True) -> str:
        done = subprocess.run(
            [program, *args], env=env, input=given, capture_output=True, text=True
        )
        assert (done.returncode == 0) is succeeds, done.stdout + done.stderr
        return done.stdout if succeeds else done.stderr

    cli("config", fleet.key)
    assert (home / ".runpod" / "config.toml").exists()
    return cli


def cpu_pod(fleet: Server, name: str, command: list[str]) -> str:
    made = fleet.http.post(
        "/v1/pods",
        json={
            "name": name,
            "imageName": "local/python",
            "computeType": "CPU",
            "volumeInGb": 0,
            "dockerStartCmd": command,
        },
    )
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def test_the_runpod_clis_default_pod_is_refused_saying_why(fleet: Server, tmp_path: Path) -> None:
    # The CLI's create launches its default pod (runpod/base on an RTX 3090, port 22/tcp): an
    # image, no command. Pods here are processes (the local provider), which run commands, not
    # images: refused, saying so, rather than accepted to fail and start again for ever.
    cli = runpod_cli(fleet, tmp_path)
    refused = cli("pod", "create", "cli-pod", given="y\n", succeeds=False)
    assert "dockerStartCmd" in refused and "has neither" in refused, refused
    assert [p for p in fleet.http.get("/v1/pods").json() if p["name"] == "cli-pod"] == []


def test_runpod_pod_list_shows_a_pod_whose_process_keeps_exiting_as_restarting(
    fleet: Server, sdk: Any, tmp_path: Path
) -> None:
    # The list's Status is the SDK's desiredStatus: RUNNING for a pod that runs, RESTARTING for
    # one whose process keeps exiting (started again after a back-off), never RUNNING.
    cli = runpod_cli(fleet, tmp_path)
    up = cpu_pod(fleet, "cli-up", [sys.executable, "-c", "import time; time.sleep(600)"])
    down = cpu_pod(fleet, "cli-down", ["sh", "-c", "exit 3"])
    fleet.wait_for(
        lambda: fleet.http.get(f"/v1/pods/{up}").json()["status"] == "running",
        what="the pod to run",
    )

    def listed_between_its_starts() -> tuple[dict[str, str], dict[str, Any]] | None:
        # The same exit before and after the listing: it was down all along.
        before = fleet.http.get(f"/v1/pods/{down}").json()
        if before["status"] != "waiting" or "exited with code 3" not in str(before["problem"]):
            return None
        listed = cli("pod", "list")
        (read,) = [p for p in sdk.get_pods() if p["id"] == down]
        after = fleet.http.get(f"/v1/pods/{down}").json()
        if (after["problem"], after["lastStartedAt"]) != (
            before["problem"],
            before["lastStartedAt"],
        ):
            return None
        rows = [[cell.strip() for cell in line.split("|")] for line in listed.splitlines()]
        return {row[1]: row[3] for row in rows if len(row) > 3}, read

    statuses, read = fleet.wait_for(listed_between_its_starts, what="the pod to be down")
    assert (statuses[up], statuses[down]) == ("RUNNING", "RESTARTING"), statuses
    # The SDK's own read agrees: no runtime, no uptime while it is down.
    assert (read["desiredStatus"], read["runtime"], read["uptimeSeconds"]) == (
        "RESTARTING",
        None,
        None,
    )
    for pod_id in (up, down):
        fleet.http.delete(f"/v1/pods/{pod_id}")
