"""``/v1/pods``: the reference's pod operations (create 201, list with filters, get, update by
PATCH or POST .../update, delete) and actions (start, stop, restart, reset), and a pod's log."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field
from starlette.responses import Response

from skiff.api.documented_errors import BAD
from skiff.api.needs import needs
from skiff.api.updates import patch_or_post_update
from skiff.domain import times
from skiff.domain.containers import DEFAULT_FLAVOR, MEMORY_GB_PER_VCPU
from skiff.domain.endpoints import ComputeType
from skiff.domain.permissions import READ, WRITE
from skiff.domain.pods import DesiredStatus, Pod, PodCreate, PodSpec, PodUpdate, runtime_status
from skiff.domain.users import User
from skiff.services.hub import Services
from skiff.services.pods import PodFilters


class PodGpu(BaseModel):
    id: str = Field(description="The GPU type (NVML's name)")
    count: int
    displayName: str


class PodSsh(BaseModel):
    host: str
    port: int = Field(description="Its own SSH port: any user name (root) leads into it")
    command: str = Field(description="The ssh command that gets in with your settings' key")
    gatewayPort: int | None = Field(
        description="The server's SSH port, where the user name is the pod's id"
    )


class PodOut(BaseModel):
    """A pod, with the v1 reference's fields and skiff's own where noted."""

    id: str
    name: str
    desiredStatus: DesiredStatus
    image: str
    dockerEntrypoint: list[str]
    dockerStartCmd: list[str]
    env: dict[str, str]
    templateId: str | None
    containerRegistryAuthId: str | None
    gpu: PodGpu | None = Field(description="The GPUs it holds while it runs (null: none)")
    gpuCount: int
    vcpuCount: int
    memoryInGb: float | None = Field(description="CPU pods: the memory it is given")
    containerDiskInGb: int
    volumeInGb: int
    volumeMountPath: str
    networkVolumeId: str | None
    ports: list[str]
    costPerHr: float = Field(
        description="USD per hour at the operator's price table (SKIFF_PRICES): its GPUs or "
        "vCPUs and its volume"
    )
    lastStartedAt: str | None
    lastStatusChange: str = Field(description="When desiredStatus last changed (ISO-8601)")
    endpointId: str | None = Field(
        default=None, description="Always null: serverless workers are listed with endpoints"
    )
    interruptible: bool
    locked: bool
    computeType: ComputeType
    createdAt: str
    # skiff's own:
    status: str = Field(
        description="What runs now: running, restarting (in place: its ports may move), "
        "starting (placed, its instance on its way), "
        "waiting (wanted, not placed: see problem), stopped, terminating"
    )
    problem: str | None = Field(description="Why it does not run although it should")
    publicIp: str = Field(
        description="The address its ports are reached at: the server's public host, or the "
        "address of the Ray node it runs on (SKIFF_PROVIDER=ray)"
    )
    portMappings: dict[str, int] = Field(
        description='Each port ("8888/http") and the host port it is reached on'
    )
    urls: dict[str, str] = Field(description="The address of each http port")
    ssh: PodSsh | None = Field(
        default=None,
        description="Where skiff serves SSH into it while it runs (SKIFF_SSH_PORT is set); "
        "null otherwise",
    )
    restartedFor: list[str] | None = Field(
        default=None,
        description="On an update's answer: the changed settings that restart the pod fresh",
    )


#: The settings a pod's answer shows as its spec holds them, under the same names: every one
#: the two models share but ``gpuCount``, which a CPU pod shows as 0.
_SPEC_AS_IS = (PodSpec.model_fields.keys() & PodOut.model_fields.keys()) - {"gpuCount"}


def pod_out(services: Services, pod: Pod, restarted_for: list[str] | None = None) -> PodOut:
    spec, placement = pod.spec, pod.placement
    gpu = None
    if placement.gpuName and placement.gpuIds:
        gpu = PodGpu(
            id=placement.gpuName, count=len(placement.gpuIds), displayName=placement.gpuName
        )
    memory = None
    if spec.computeType is ComputeType.CPU:
        flavor = spec.cpuFlavorIds[0] if spec.cpuFlavorIds else DEFAULT_FLAVOR
        memory = float(spec.vcpuCount * MEMORY_GB_PER_VCPU[flavor])
    runner = services.pod_runner
    urls = {
        port: url
        for port, host_port in placement.portMappings.items()
        if (url := runner.port_url(pod, port, host_port)) is not None
    }
    ssh = None
    address = runner.ssh_address(pod)
    if address is not None:
        host, port = address
        ssh = PodSsh(
            host=host,
            port=port,
            command=f"ssh root@{host} -p {port}",
            gatewayPort=services.pod_shells.gateway_port,
        )
    return PodOut(
        **spec.model_dump(include=_SPEC_AS_IS),
        id=pod.id,
        desiredStatus=pod.desiredStatus,
        image=spec.imageName,
        gpu=gpu,
        gpuCount=spec.gpuCount if spec.computeType is ComputeType.GPU else 0,
        memoryInGb=memory,
        costPerHr=round(services.billing.pod_cost_per_hour(pod), 6),
        lastStartedAt=times.iso(pod.lastStartedAt) if pod.lastStartedAt else None,
        lastStatusChange=times.iso(pod.lastStatusChange),
        createdAt=times.iso(pod.createdAt),
        status=runtime_status(pod),
        problem=placement.problem,
        publicIp=runner.host_of(pod),
        portMappings=placement.portMappings,
        urls=urls,
        ssh=ssh,
        restartedFor=restarted_for,
    )


NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "Pod not found (or not yours)"}}
BUSY: dict[int | str, dict[str, Any]] = {
    409: {"description": "No GPU of the wanted types is free, or the pod is locked"}
}


def router(services: Services, user_dep: Any) -> APIRouter:
    pods = APIRouter(prefix="/pods", tags=["pods"])
    UserDep = Annotated[User, Depends(user_dep)]

    def out(pod: Pod, restarted_for: list[str] | None = None) -> PodOut:
        return pod_out(services, pod, restarted_for)

    @pods.post("", status_code=201, response_model=PodOut, responses={**BAD, **BUSY})
    @needs(WRITE)
    async def create_pod(body: PodCreate, user: UserDep) -> PodOut:
        """Create a pod from `imageName` or `templateId` (the input overrides the template's
        settings; environment variables merge). It starts at once on GPUs free now, in
        `gpuTypeIds` priority order, or is refused (409) naming what is missing."""
        return out(await services.pods.create(user, body))

    @pods.get("", response_model=list[PodOut])
    @needs(READ)
    async def list_pods(
        user: UserDep,
        computeType: ComputeType | None = None,
        desiredStatus: DesiredStatus | None = None,
        endpointId: str | None = None,
        gpuTypeId: Annotated[list[str] | None, Query()] = None,
        imageName: str | None = None,
        name: str | None = None,
        networkVolumeId: str | None = None,
        templateId: str | None = None,
        includeMachine: bool = False,
        includeNetworkVolume: bool = False,
        includeSavingsPlans: bool = False,
        includeTemplate: bool = False,
        includeWorkers: bool = False,
    ) -> list[PodOut]:
        """Your pods, oldest first. `endpointId` finds none: serverless workers are listed with
        their endpoint (`GET /endpoints/{id}?includeWorkers=true`). The `include*` flags are
        accepted and change nothing."""
        filters = PodFilters(
            computeType=computeType,
            desiredStatus=desiredStatus,
            endpointId=endpointId,
            gpuTypeIds=tuple(gpuTypeId or ()),
            imageName=imageName,
            name=name,
            networkVolumeId=networkVolumeId,
            templateId=templateId,
        )
        return [out(p) for p in await services.pods.all(user, filters)]

    @pods.get("/{pod_id}", response_model=PodOut, responses=NOT_FOUND)
    @needs(READ)
    async def get_pod(pod_id: str, user: UserDep) -> PodOut:
        return out(await services.pods.get(user, pod_id))

    @patch_or_post_update(pods, "/{pod_id}", response_model=PodOut, responses={**BAD, **NOT_FOUND})
    @needs(WRITE)
    async def update_pod(pod_id: str, body: PodUpdate, user: UserDep) -> PodOut:
        """Change its settings. A change to what runs (image, command, env, ports, disk, volume
        size or path, registry auth) restarts a running pod fresh (its container disk wiped,
        its volume kept) and is named in `restartedFor`; a name or `locked` restarts nothing.
        A volume never shrinks (400, `volumeInGb`)."""
        pod, restart = await services.pods.update(user, pod_id, body)
        return out(pod, restart)

    @pods.delete("/{pod_id}", status_code=204, responses={**NOT_FOUND, **BUSY})
    @needs(WRITE)
    async def delete_pod(pod_id: str, user: UserDep) -> Response:
        """End the pod and remove it with its volume, permanently (a network volume is kept).
        A locked pod is refused (409)."""
        await services.pods.delete(user, pod_id)
        return Response(status_code=204)

    @pods.post("/{pod_id}/start", response_model=PodOut, responses={**NOT_FOUND, **BUSY})
    @needs(WRITE)
    async def start_pod(pod_id: str, user: UserDep) -> PodOut:
        """Start a stopped pod on GPUs free now (409 naming what is missing). Its volume is as
        it was; its container disk starts empty."""
        return out(await services.pods.start(user, pod_id))

    @pods.post("/{pod_id}/stop", response_model=PodOut, responses={**NOT_FOUND, **BUSY})
    @needs(WRITE)
    async def stop_pod(pod_id: str, user: UserDep) -> PodOut:
        """End its instance and free its GPUs; its volume is kept."""
        return out(await services.pods.stop(user, pod_id))

    @pods.post("/{pod_id}/restart", response_model=PodOut, responses={**NOT_FOUND, **BUSY})
    @needs(WRITE)
    async def restart_pod(pod_id: str, user: UserDep) -> PodOut:
        """Restart its instance in place: the same GPUs, its container disk kept."""
        return out(await services.pods.restart(user, pod_id))

    @pods.post("/{pod_id}/reset", response_model=PodOut, responses={**NOT_FOUND, **BUSY})
    @needs(WRITE)
    async def reset_pod(pod_id: str, user: UserDep) -> PodOut:
        """Start it fresh from its image: the container disk is wiped, the volume kept."""
        return out(await services.pods.reset(user, pod_id))

    return pods
