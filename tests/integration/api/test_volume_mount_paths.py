"""``volumeMountPath`` through every door that takes it (the in-process app, ``conftest.py``):
``/v1/templates`` (create, update), ``/v1/pods`` (create, update), GraphQL's ``saveTemplate`` and
pod deploys, and a pod made from a template stored before the rule. A path no provider can mount
is refused at once (a 400 at ``volumeMountPath`` saying what is accepted, or a GraphQL error
naming the field), never accepted to leave a pod waiting for ever; nothing is stored."""

from __future__ import annotations

import sys
from typing import Any

import httpx
import pytest

from eventually import eventually_async
from in_process import ADMIN_KEY, InProcess

BAD_PATHS = ["/", "/etc", "../../", "/workspace/models", "/data/../etc", "/a:b"]
#: A pod's process that waits to be stopped, with no volume to mount.
SLEEPER = {
    "imageName": "local/python",
    "computeType": "CPU",
    "volumeInGb": 0,
    "dockerStartCmd": [sys.executable, "-c", "import time; time.sleep(600)"],
}


def refused_at_the_mount_path(answer: httpx.Response) -> str:
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["field"] == "volumeMountPath", body
    # Says what is accepted, not only what is wrong.
    assert "top-level directory such as /workspace" in body["message"], body
    return str(body["message"])


async def deleted(app: InProcess, pod_id: str) -> None:
    """Delete the pod and wait until its process has ended and it is gone, so that no process
    outlives the test's app."""
    assert (await app.http.delete(f"/v1/pods/{pod_id}")).status_code == 204

    async def gone() -> bool:
        return not await app.services.store.list_pods(None)

    await eventually_async(gone, "the deleted pod to be gone")


async def template_stored_with(app: InProcess, path: str) -> str:
    """A template whose ``volumeMountPath`` was written as ``path`` before the rule (the store
    keeps what it is given); its id."""
    made = await app.http.post(
        "/v1/templates",
        json={
            "name": f"old-{path}",
            "imageName": "local/python",
            "volumeInGb": 0,
            "dockerStartCmd": SLEEPER["dockerStartCmd"],
        },
    )
    assert made.status_code == 200, made.text
    template_id = str(made.json()["id"])
    admin = await app.services.auth.authenticate(ADMIN_KEY)
    stored = await app.services.store.get_template(admin.id, template_id)
    assert stored is not None
    await app.services.store.update_template(
        admin.id, stored.model_copy(update={"volumeMountPath": path})
    )
    return template_id


async def graphql(app: InProcess, query: str) -> dict[str, Any]:
    answer = await app.http.post("/graphql", json={"query": query})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


@pytest.mark.parametrize("path", BAD_PATHS)
async def test_a_template_with_a_bad_mount_path_is_a_400_and_is_not_stored(
    in_process: InProcess, path: str
) -> None:
    answer = await in_process.http.post(
        "/v1/templates", json={"name": "t", "imageName": "busybox", "volumeMountPath": path}
    )
    refused_at_the_mount_path(answer)
    assert (await in_process.http.get("/v1/templates")).json() == []


async def test_a_template_update_to_a_bad_mount_path_is_a_400_and_changes_nothing(
    in_process: InProcess,
) -> None:
    http = in_process.http
    made = await http.post(
        "/v1/templates", json={"name": "t", "imageName": "busybox", "volumeMountPath": "/data/"}
    )
    assert made.status_code == 200, made.text
    template = made.json()
    assert template["volumeMountPath"] == "/data"  # one trailing slash is dropped
    refused = await http.post(
        f"/v1/templates/{template['id']}/update", json={"volumeMountPath": "/usr"}
    )
    assert "'/usr' is a system directory" in refused_at_the_mount_path(refused)
    nulled = await http.post(
        f"/v1/templates/{template['id']}/update", json={"volumeMountPath": None}
    )
    assert nulled.status_code == 400 and nulled.json()["field"] == "volumeMountPath"
    kept = await http.get(f"/v1/templates/{template['id']}")
    assert kept.json()["volumeMountPath"] == "/data"


@pytest.mark.parametrize("path", BAD_PATHS)
async def test_a_pod_with_a_bad_mount_path_is_a_400_and_is_not_made(
    in_process: InProcess, path: str
) -> None:
    answer = await in_process.http.post("/v1/pods", json={**SLEEPER, "volumeMountPath": path})
    refused_at_the_mount_path(answer)
    assert await in_process.services.store.list_pods(None) == []


async def test_a_pod_update_to_a_bad_mount_path_is_a_400_and_changes_nothing(
    in_process: InProcess,
) -> None:
    http = in_process.http
    made = await http.post("/v1/pods", json={**SLEEPER, "volumeMountPath": "/models"})
    assert made.status_code == 201, made.text
    pod_id = made.json()["id"]
    try:
        refused = await http.patch(f"/v1/pods/{pod_id}", json={"volumeMountPath": "/proc"})
        refused_at_the_mount_path(refused)
        assert (await http.get(f"/v1/pods/{pod_id}")).json()["volumeMountPath"] == "/models"
    finally:
        await deleted(in_process, pod_id)


async def test_a_pod_from_a_template_stored_with_a_bad_mount_path_is_a_400_naming_it(
    in_process: InProcess,
) -> None:
    http, store = in_process.http, in_process.services.store
    template_id = await template_stored_with(in_process, "/etc")
    # It still loads (a listing never fails on it)...
    assert (await http.get(f"/v1/templates/{template_id}")).json()["volumeMountPath"] == "/etc"

    # ...and a pod that takes its path from it is refused, naming the template.
    answer = await http.post("/v1/pods", json={"templateId": template_id, "computeType": "CPU"})
    message = refused_at_the_mount_path(answer)
    assert template_id in message and "'/etc' is a system directory" in message
    assert await store.list_pods(None) == []

    # A pod that gives its own path does not use the template's.
    made_pod = await http.post(
        "/v1/pods",
        json={"templateId": template_id, "computeType": "CPU", "volumeMountPath": "/data"},
    )
    assert made_pod.status_code == 201, made_pod.text
    assert made_pod.json()["volumeMountPath"] == "/data"
    await deleted(in_process, made_pod.json()["id"])


async def test_graphql_save_template_refuses_a_bad_mount_path_naming_the_field(
    in_process: InProcess,
) -> None:
    answer = await graphql(
        in_process,
        'mutation { saveTemplate(input: {name: "t", imageName: "busybox", '
        'volumeMountPath: "/etc"}) { id volumeMountPath } }',
    )
    (error,) = answer["errors"]
    assert error["message"].startswith("volumeMountPath: '/etc' is a system directory")
    assert "/workspace" in error["message"]
    assert (await in_process.http.get("/v1/templates")).json() == []
    # What the runpod SDK sends by default: no volumeMountPath, then /workspace.
    saved = await graphql(
        in_process,
        'mutation { saveTemplate(input: {name: "t", imageName: "busybox"}) '
        "{ id volumeMountPath } }",
    )
    assert saved["data"]["saveTemplate"]["volumeMountPath"] == "/workspace", saved


@pytest.mark.parametrize("mutation", ["podFindAndDeployOnDemand", "deployCpuPod"])
async def test_graphql_pod_deploys_refuse_a_bad_mount_path_naming_the_field(
    in_process: InProcess, mutation: str
) -> None:
    answer = await graphql(
        in_process,
        f'mutation {{ {mutation}(input: {{imageName: "busybox", volumeMountPath: "/"}}) '
        "{ id } }",
    )
    (error,) = answer["errors"]
    assert error["message"].startswith("volumeMountPath: '/' is the root directory"), error
    assert await in_process.services.store.list_pods(None) == []


async def test_graphql_deploy_from_a_template_stored_with_a_bad_mount_path_is_refused(
    in_process: InProcess,
) -> None:
    template_id = await template_stored_with(in_process, "/var")
    answer = await graphql(
        in_process, f'mutation {{ deployCpuPod(input: {{templateId: "{template_id}"}}) {{ id }} }}'
    )
    (error,) = answer["errors"]
    assert error["message"].startswith(f"volumeMountPath: template {template_id}'s"), error
    assert await in_process.services.store.list_pods(None) == []
