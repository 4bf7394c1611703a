"""``/v1/pods`` through the in-process app (``conftest.py``) on a real SQLite file, with pods run
as real processes by the local provider (their volume mounted through bubblewrap): create from an
image or a template, reach the pod's HTTP port, stop, start, restart, reset, update and delete,
with the reference's fields and filters, and a clear refusal for bad input, for GPUs this server
does not have, and for a locked pod. Another user sees none of it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from eventually import eventually_async
from in_process import InProcess
from pod_programs import SERVER, pod_port
from skiff.providers import bubblewrap, port_fence
from skiff.served_ports import reserved_ports

needs_bwrap = pytest.mark.skipif(
    bubblewrap.executable() is None, reason="bubblewrap (bwrap) mounts a process pod's volume"
)


def server_pod(port: int, **fields: Any) -> dict[str, Any]:
    return {
        "name": "web",
        "imageName": "local/python",
        "computeType": "CPU",
        "dockerStartCmd": [sys.executable, "-c", SERVER, str(port)],
        "ports": [f"{port}/http"],
        "volumeInGb": 1,
        "env": {"GREETING": "hello"},
        **fields,
    }


async def pod_of(app: InProcess, pod_id: str) -> dict[str, Any]:
    answer = await app.http.get(f"/v1/pods/{pod_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def until(app: InProcess, pod_id: str, status: str) -> dict[str, Any]:
    async def there() -> dict[str, Any] | None:
        pod = await pod_of(app, pod_id)
        return pod if pod["status"] == status else None

    return await eventually_async(there, f"pod {pod_id} to become {status}")


async def write_disk(url: str, text: str) -> None:
    async with httpx.AsyncClient() as client:
        assert (await client.post(url, content=text)).json() == {"written": True}


async def answer_of(url: str) -> dict[str, Any]:
    """What the pod's server answers at ``url`` now (a TransportError while it is down)."""
    async with httpx.AsyncClient() as client:
        return dict((await client.get(url)).json())


async def served(url: str) -> dict[str, Any]:
    """What the pod's server answers at ``url`` once it is up."""
    return await eventually_async(
        lambda: answer_of(url), f"{url} to answer", ignoring=(httpx.TransportError,)
    )


def refusal(answer: httpx.Response, status: int, field: str | None = None) -> str:
    assert answer.status_code == status, answer.text
    body = answer.json()
    if field is not None:
        assert body.get("field") == field, body
    return str(body["message"])


@needs_bwrap
async def test_a_pod_runs_serves_its_port_and_keeps_its_volume_across_stop_and_start(
    in_process: InProcess, tmp_path: Path
) -> None:
    port = pod_port()
    made = await in_process.http.post("/v1/pods", json=server_pod(port))
    assert made.status_code == 201, made.text
    pod = made.json()
    assert pod["desiredStatus"] == "RUNNING" and pod["image"] == "local/python"
    assert pod["volumeMountPath"] == "/workspace" and pod["containerDiskInGb"] == 50
    running = await until(in_process, pod["id"], "running")
    assert running["portMappings"] == {f"{port}/http": port}
    url = running["urls"][f"{port}/http"]
    assert url == f"http://127.0.0.1:{port}"
    assert running["lastStartedAt"] is not None
    # SSH is off unless the server sets its port: no address is given out.
    assert running["ssh"] is None
    first = await served(url)
    assert (first["starts"], first["disk"], first["pod"]) == (1, None, pod["id"])
    assert (first["greeting"], first["gpus"], first["cuda"]) == ("hello", "0", "")
    await write_disk(url, "first")

    stopped = await in_process.http.post(f"/v1/pods/{pod['id']}/stop")
    assert stopped.json()["desiredStatus"] == "EXITED"
    await until(in_process, pod["id"], "stopped")
    with pytest.raises(httpx.TransportError):
        await answer_of(url)

    started = await in_process.http.post(f"/v1/pods/{pod['id']}/start")
    assert started.json()["desiredStatus"] == "RUNNING"
    await until(in_process, pod["id"], "running")
    again = await served(url)
    # The volume kept the count; the disk of the instance before is gone (a stop ends the
    # instance and its disk, as on the hosted platform).
    assert again["starts"] == 2 and again["disk"] is None


@needs_bwrap
async def test_restart_keeps_the_disk_and_reset_wipes_it_keeping_the_volume(
    in_process: InProcess,
) -> None:
    port = pod_port()
    pod = (await in_process.http.post("/v1/pods", json=server_pod(port))).json()
    url = (await until(in_process, pod["id"], "running"))["urls"][f"{port}/http"]
    assert (await served(url))["starts"] == 1
    await write_disk(url, "on the disk")

    restarted = await in_process.http.post(f"/v1/pods/{pod['id']}/restart")
    assert restarted.status_code == 200, restarted.text
    await _until_served(url, lambda s: s["starts"] == 2, "a second start")
    assert (await served(url))["disk"] == "on the disk"

    reset = await in_process.http.post(f"/v1/pods/{pod['id']}/reset")
    assert reset.status_code == 200, reset.text
    await _until_served(url, lambda s: s["starts"] == 3, "a third start")
    assert (await served(url))["disk"] is None


async def _until_served(url: str, done: Callable[[dict[str, Any]], bool], what: str) -> None:
    async def answered() -> bool:
        return done(await answer_of(url))

    await eventually_async(answered, f"{url} to answer {what}", ignoring=(httpx.TransportError,))


@needs_bwrap
async def test_an_update_of_what_runs_restarts_the_pod_and_says_so(
    in_process: InProcess,
) -> None:
    port = pod_port()
    pod = (await in_process.http.post("/v1/pods", json=server_pod(port))).json()
    url = (await until(in_process, pod["id"], "running"))["urls"][f"{port}/http"]
    renamed = await in_process.http.patch(f"/v1/pods/{pod['id']}", json={"name": "renamed"})
    assert renamed.json()["restartedFor"] == [] and renamed.json()["name"] == "renamed"
    changed = await in_process.http.post(
        f"/v1/pods/{pod['id']}/update", json={"env": {"GREETING": "changed"}}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["restartedFor"] == ["env"]
    await _until_served(url, lambda s: s["greeting"] == "changed", "the changed greeting")
    shrink = await in_process.http.patch(f"/v1/pods/{pod['id']}", json={"volumeInGb": 0})
    assert "never shrinks" in refusal(shrink, 400, "volumeInGb")


@needs_bwrap
async def test_a_deleted_pod_is_gone_with_its_volume(in_process: InProcess) -> None:
    pod = (await in_process.http.post("/v1/pods", json=server_pod(pod_port()))).json()
    await until(in_process, pod["id"], "running")
    volume = in_process.services.settings.volumes_path() / "pods" / pod["id"]
    # Running is its process started; the file is written once its program gets going.
    await eventually_async(lambda: (volume / "starts").exists(), "the pod to write its volume")
    assert (await in_process.http.delete(f"/v1/pods/{pod['id']}")).status_code == 204
    assert (await in_process.http.get(f"/v1/pods/{pod['id']}")).status_code == 404
    assert [p["id"] for p in (await in_process.http.get("/v1/pods")).json()] == []
    await eventually_async(lambda: not volume.exists(), "the volume to be removed")

    # The record goes last, after the volume (``Pods.delete``).
    async def no_record() -> bool:
        return await in_process.services.store.list_pods(None) == []

    await eventually_async(no_record, "the pod's record to be removed")


async def test_a_locked_pod_refuses_stop_restart_reset_and_delete(in_process: InProcess) -> None:
    pod = (
        await in_process.http.post(
            "/v1/pods", json=server_pod(pod_port(), locked=True, volumeInGb=0)
        )
    ).json()
    for action in ("stop", "restart", "reset"):
        answer = await in_process.http.post(f"/v1/pods/{pod['id']}/{action}")
        assert "locked" in refusal(answer, 409)
    assert "locked" in refusal(await in_process.http.delete(f"/v1/pods/{pod['id']}"), 409)
    unlocked = await in_process.http.patch(f"/v1/pods/{pod['id']}", json={"locked": False})
    assert unlocked.json()["locked"] is False
    assert (await in_process.http.delete(f"/v1/pods/{pod['id']}")).status_code == 204


async def test_a_template_gives_the_pod_what_the_input_leaves_out(in_process: InProcess) -> None:
    template = await in_process.http.post(
        "/v1/templates",
        json={
            "name": "web",
            "imageName": "local/python",
            "dockerStartCmd": [sys.executable, "-c", "import time; time.sleep(60)"],
            "env": {"A": "template", "B": "template"},
            "ports": ["8888/http"],
            "volumeInGb": 0,
        },
    )
    made = await in_process.http.post(
        "/v1/pods",
        json={"templateId": template.json()["id"], "computeType": "CPU", "env": {"B": "pod"}},
    )
    assert made.status_code == 201, made.text
    pod = made.json()
    assert pod["templateId"] == template.json()["id"] and pod["ports"] == ["8888/http"]
    assert pod["env"] == {"A": "template", "B": "pod"} and pod["name"] == "my pod"
    listed = await in_process.http.get(
        "/v1/pods", params={"templateId": template.json()["id"], "computeType": "CPU"}
    )
    assert [p["id"] for p in listed.json()] == [pod["id"]]
    assert (await in_process.http.get("/v1/pods", params={"name": "other"})).json() == []
    assert (await in_process.http.get("/v1/pods", params={"endpointId": "e"})).json() == []
    await in_process.http.delete(f"/v1/pods/{pod['id']}")


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"ports": ["8888"]}, "ports", "N/http or N/tcp"),
        ({"ports": ["8888/udp"]}, "ports", "http or tcp"),
        ({"volumeMountPath": "workspace"}, "volumeMountPath", "absolute"),
        ({"templateId": "nope"}, "templateId", "no template"),
        ({"networkVolumeId": "nope"}, "networkVolumeId", "no network volume"),
        ({"containerRegistryAuthId": "nope"}, "containerRegistryAuthId", "no container"),
        ({"imageName": "Not An Image"}, "imageName", "not a valid image reference"),
    ],
)
async def test_bad_input_is_refused_naming_the_field(
    in_process: InProcess, fields: dict[str, Any], field: str, says: str
) -> None:
    answer = await in_process.http.post("/v1/pods", json=server_pod(pod_port(), **fields))
    assert says in refusal(answer, 400, field)
    assert await in_process.services.store.list_pods(None) == []


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"dockerStartCmd": []}, "dockerStartCmd", "has neither"),
        ({"dockerStartCmd": ["no-such-program-here", "x"]}, "dockerStartCmd", "not a program"),
        ({"dockerEntrypoint": ["/no/such/program"]}, "dockerEntrypoint", "not an executable file"),
        ({"dockerStartCmd": ["./run.sh"]}, "dockerStartCmd", "relative path"),
        # Looked up on the PATH the pod runs with: its own, when it sets one.
        ({"dockerStartCmd": ["sh"], "env": {"PATH": "/nowhere"}}, "dockerStartCmd", "/nowhere"),
    ],
)
async def test_a_process_pod_whose_command_cannot_start_is_refused_naming_the_field(
    in_process: InProcess, fields: dict[str, Any], field: str, says: str
) -> None:
    # Accepted, it would start, fail and start again for ever.
    answer = await in_process.http.post("/v1/pods", json=server_pod(pod_port(), **fields))
    assert says in refusal(answer, 400, field)
    assert await in_process.services.store.list_pods(None) == []


async def test_a_process_pod_whose_program_is_not_executable_is_refused(
    in_process: InProcess, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a program")
    notes.chmod(0o644)
    answer = await in_process.http.post(
        "/v1/pods", json=server_pod(pod_port(), dockerStartCmd=[str(notes)])
    )
    assert "not an executable file" in refusal(answer, 400, "dockerStartCmd")


async def test_a_process_pod_may_run_a_program_of_its_volume_and_is_not_updated_to_a_missing_one(
    in_process: InProcess,
) -> None:
    # What is in its volume only the pod sees: not checked.
    body = server_pod(pod_port(), dockerStartCmd=["/workspace/start.sh"])
    made = await in_process.http.post("/v1/pods", json=body)
    assert made.status_code == 201, made.text
    pod_id = made.json()["id"]
    answer = await in_process.http.patch(
        f"/v1/pods/{pod_id}", json={"dockerStartCmd": ["no-such-program-here"]}
    )
    assert "not a program" in refusal(answer, 400, "dockerStartCmd")
    assert (await pod_of(in_process, pod_id))["dockerStartCmd"] == ["/workspace/start.sh"]
    await in_process.http.delete(f"/v1/pods/{pod_id}")


@needs_bwrap
@pytest.mark.skipif(
    port_fence.fence_problem() is not None or reserved_ports() is None,
    reason="the sandbox fences no ports on this host, or keeps none below its range",
)
async def test_a_process_pod_declaring_a_port_kept_for_others_is_refused_naming_the_field(
    in_process: InProcess,
) -> None:
    # Accepted, it would start, be refused its port and start again for ever.
    kept, ephemeral = reserved_ports(), port_fence.ephemeral_ports()
    assert kept is not None
    for port, whose in ((kept[0], "load-balancing workers"), (ephemeral[-1], "any process")):
        answer = await in_process.http.post("/v1/pods", json=server_pod(port))
        assert f"port {port} is among the ports this host keeps for {whose}" in refusal(
            answer, 400, "ports"
        )
    assert await in_process.services.store.list_pods(None) == []

    made = await in_process.http.post("/v1/pods", json=server_pod(pod_port()))
    assert made.status_code == 201, made.text
    pod_id, ports = made.json()["id"], made.json()["ports"]
    answer = await in_process.http.patch(f"/v1/pods/{pod_id}", json={"ports": [f"{kept[-1]}/tcp"]})
    assert f"port {kept[-1]}" in refusal(answer, 400, "ports")
    assert (await pod_of(in_process, pod_id))["ports"] == ports
    await in_process.http.delete(f"/v1/pods/{pod_id}")


async def test_a_gpu_pod_without_such_a_gpu_is_refused_naming_what_is_missing(
    in_process: InProcess,
) -> None:
    answer = await in_process.http.post(
        "/v1/pods",
        json={
            "imageName": "local/python",
            "gpuTypeIds": ["NVIDIA H100 80GB HBM3"],
            "gpuCount": 2,
            "dockerStartCmd": ["true"],
        },
    )
    message = refusal(answer, 409)
    assert "NVIDIA H100 80GB HBM3" in message and "no GPUs" in message
    assert await in_process.services.store.list_pods(None) == []


async def test_another_users_key_sees_none_of_it(in_process: InProcess) -> None:
    pod = (await in_process.http.post("/v1/pods", json=server_pod(pod_port(), volumeInGb=0))).json()
    issued = await in_process.services.auth.issue_key("bob", is_admin=False, label="test")
    async with httpx.AsyncClient(
        transport=in_process.transport,
        base_url=str(in_process.http.base_url),
        headers={"Authorization": f"Bearer {issued.key}"},
    ) as bob:
        assert (await bob.get("/v1/pods")).json() == []
        assert (await bob.get(f"/v1/pods/{pod['id']}")).status_code == 404
        for action in ("stop", "start", "restart", "reset"):
            assert (await bob.post(f"/v1/pods/{pod['id']}/{action}")).status_code == 404
        assert (await bob.patch(f"/v1/pods/{pod['id']}", json={"name": "x"})).status_code == 404
        assert (await bob.delete(f"/v1/pods/{pod['id']}")).status_code == 404
        assert (await bob.get(f"/v1/pods/{pod['id']}/logs")).status_code == 404
    assert (await pod_of(in_process, pod["id"]))["name"] == "web"


async def test_a_volume_the_disk_has_no_room_for_is_refused_naming_the_field(
    in_process: InProcess,
) -> None:
    # 4000 GB is within the field's bounds and past what any test machine's disk has free.
    answer = await in_process.http.post("/v1/pods", json=server_pod(pod_port(), volumeInGb=4000))
    assert "4000 GB does not fit" in refusal(answer, 400, "volumeInGb")
    pod = (await in_process.http.post("/v1/pods", json=server_pod(pod_port()))).json()
    grown = await in_process.http.patch(f"/v1/pods/{pod['id']}", json={"volumeInGb": 4000})
    assert "does not fit" in refusal(grown, 400, "volumeInGb")
    assert (await pod_of(in_process, pod["id"]))["volumeInGb"] == 1
    # A network volume in its place needs no room of its own.
    volume = await in_process.http.post("/v1/networkvolumes", json={"name": "v", "size": 1})
    made = await in_process.http.post(
        "/v1/pods",
        json=server_pod(pod_port(), volumeInGb=4000, networkVolumeId=volume.json()["id"]),
    )
    assert made.status_code == 201, made.text
