"""Pods, per owner: create (from an image or a template), list with the reference's filters,
read, update, delete, and the actions start, stop, restart and reset.

This service records what the user asks for (settings, ``desiredStatus``, ``version`` for a
fresh instance, ``restarts`` for one in place); the pod runner (``pod_runner.py``) makes it so.
A pod asked to run takes its GPUs at once, or is refused naming what is missing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from skiff.clock import Clock
from skiff.domain.endpoints import ComputeType
from skiff.domain.mount_paths import check_mount_path
from skiff.domain.pods import (
    DesiredStatus,
    Pod,
    PodCreate,
    PodSpec,
    PodUpdate,
    apply_pod_update,
    spec_from_create,
)
from skiff.domain.quotas import Owned
from skiff.domain.templates import Template
from skiff.domain.users import User
from skiff.domain.volumes import room_refusal
from skiff.errors import Conflict, Invalid, NotFound
from skiff.ids import short_id
from skiff.services.pod_runner import PodRunner
from skiff.services.quotas import Quotas
from skiff.services.secrets import check_references
from skiff.services.wakeups import Wake, Wakeups
from skiff.store.base import Store
from skiff.volume_dirs import VolumeDirs


@dataclass(frozen=True, slots=True)
class PodFilters:
    """The list's filters (the reference's query parameters); None: not filtered on."""

    computeType: ComputeType | None = None
    desiredStatus: DesiredStatus | None = None
    endpointId: str | None = None
    gpuTypeIds: tuple[str, ...] = ()
    imageName: str | None = None
    name: str | None = None
    networkVolumeId: str | None = None
    templateId: str | None = None

    def match(self, pod: Pod) -> bool:
        spec = pod.spec
        if self.endpointId is not None:
            # A serverless worker is not a pod here: /v1/endpoints/{id}?includeWorkers=true.
            return False
        held = {pod.placement.gpuName, *spec.gpuTypeIds} - {None}
        return (
            (self.computeType is None or spec.computeType is self.computeType)
            and (self.desiredStatus is None or pod.desiredStatus is self.desiredStatus)
            and (not self.gpuTypeIds or bool(held & set(self.gpuTypeIds)))
            and (self.imageName is None or spec.imageName == self.imageName)
            and (self.name is None or spec.name == self.name)
            and (self.networkVolumeId is None or spec.networkVolumeId == self.networkVolumeId)
            and (self.templateId is None or spec.templateId == self.templateId)
        )


def _command_of(spec: PodSpec) -> tuple[object, ...]:
    """What a provider's ``command_problem`` reads: a change to any of it asks again."""
    return (
        spec.dockerEntrypoint,
        spec.dockerStartCmd,
        spec.env.get("PATH"),
        spec.volumeInGb > 0 or spec.networkVolumeId is not None,
        spec.volumeMountPath,
    )


def _template_mount_path(template: Template) -> str:
    """The template's ``volumeMountPath`` for a pod that gives none. A template is checked when
    it is saved, but one stored before the rule still loads with what it held: the pod is
    refused here (400) rather than accepted to wait for ever for a mount no provider makes."""
    try:
        return check_mount_path(template.volumeMountPath)
    except ValueError as exc:
        raise Invalid(
            f"volumeMountPath: template {template.id}'s volumeMountPath {exc}; give the pod a "
            "volumeMountPath, or update the template's",
            field="volumeMountPath",
        ) from None


class Pods:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        wakeups: Wakeups,
        runner: PodRunner,
        dirs: VolumeDirs,
        quotas: Quotas | None = None,
    ) -> None:
        """``dirs`` keeps the pods' volumes (the runner makes and removes them; their sizes are
        checked here, against the disk's free space, as a network volume's are)."""
        self._quotas = quotas or Quotas(store, 0)
        self._store = store
        self._clock = clock
        self._wakeups = wakeups
        self._runner = runner
        self._dirs = dirs

    async def create(self, user: User, data: PodCreate) -> Pod:
        await self._quotas.make_room(user, Owned.PODS)
        template = None
        if data.templateId is not None:
            template = await self._store.get_template(user.id, data.templateId)
            if template is None:
                raise Invalid(f"templateId: no template {data.templateId}", field="templateId")
        spec = spec_from_create(data, template)
        if template is not None and data.volumeMountPath is None:
            spec = spec.model_copy(update={"volumeMountPath": _template_mount_path(template)})
        self._check_command(spec)
        self._check_ports(spec)
        await self._check_auth(user, spec.containerRegistryAuthId)
        await check_references(self._store, user, spec.env, "env")
        if spec.volumeInGb and spec.networkVolumeId is None:
            await self._check_room(spec.volumeInGb, None, user)
        if spec.networkVolumeId is not None and (
            await self._store.get_network_volume(user.id, spec.networkVolumeId) is None
        ):
            raise Invalid(
                f"networkVolumeId: no network volume {spec.networkVolumeId}",
                field="networkVolumeId",
            )
        now = self._clock.now()
        pod = Pod(
            id=short_id(),
            userId=user.id,
            spec=spec,
            desiredStatus=DesiredStatus.RUNNING,
            createdAt=now,
            lastStatusChange=now,
        )
        with self._runner.reserving(pod):
            await self._store.create_pod(pod)
        self._wakeups.notify(Wake.PODS)
        return pod

    async def all(self, user: User, filters: PodFilters | None = None) -> list[Pod]:
        """The user's pods, those being deleted (TERMINATED, gone once the runner has ended
        them) left out, as ``get`` leaves them out."""
        pods = await self._store.list_pods(user.id)
        return [
            p
            for p in pods
            if p.desiredStatus is not DesiredStatus.TERMINATED
            and (filters is None or filters.match(p))
        ]

    async def get(self, user: User, pod_id: str) -> Pod:
        """A pod of the user's; anyone else's answers 404, as if it did not exist."""
        pod = await self._store.get_pod(user.id, pod_id)
        if pod is None or pod.desiredStatus is DesiredStatus.TERMINATED:
            raise NotFound("Pod not found")
        return pod

    async def update(self, user: User, pod_id: str, data: PodUpdate) -> tuple[Pod, list[str]]:
        """The pod as updated, and the changed settings that restart it (fresh, with its
        disk wiped; the volume kept), if it runs."""
        pod = await self.get(user, pod_id)
        if "containerRegistryAuthId" in data.model_fields_set:
            await self._check_auth(user, data.containerRegistryAuthId)
        try:
            spec, restart = apply_pod_update(pod.spec, data)
        except ValueError as exc:
            raise Invalid(str(exc), field="volumeInGb") from None
        if _command_of(spec) != _command_of(pod.spec):
            self._check_command(spec)
        if spec.ports != pod.spec.ports:
            self._check_ports(spec)
        await check_references(self._store, user, spec.env, "env")
        if spec.volumeInGb > pod.spec.volumeInGb and spec.networkVolumeId is None:
            await self._check_room(spec.volumeInGb, pod.id, user)
        changed = pod.model_copy(
            update={"spec": spec, "version": pod.version + (1 if restart else 0)}
        )
        saved = await self._save(changed)
        self._wakeups.notify(Wake.PODS)
        return saved, restart if pod.desiredStatus is DesiredStatus.RUNNING else []

    async def start(self, user: User, pod_id: str) -> Pod:
        pod = await self.get(user, pod_id)
        if pod.desiredStatus is DesiredStatus.RUNNING:
            return pod
        with self._runner.reserving(pod):
            return await self._wanted(pod, DesiredStatus.RUNNING)

    async def stop(self, user: User, pod_id: str) -> Pod:
        pod = await self._unlocked(user, pod_id, "stopped")
        if pod.desiredStatus is DesiredStatus.EXITED:
            return pod
        return await self._wanted(pod, DesiredStatus.EXITED)

    async def restart(self, user: User, pod_id: str) -> Pod:
        pod = await self._unlocked(user, pod_id, "restarted")
        if pod.desiredStatus is not DesiredStatus.RUNNING:
            raise Conflict(f"pod {pod_id} is stopped: start it instead")
        saved = await self._save(pod.model_copy(update={"restarts": pod.restarts + 1}))
        self._wakeups.notify(Wake.PODS)
        return saved

    async def reset(self, user: User, pod_id: str) -> Pod:
        """A fresh instance from the image: the container disk is wiped, the volume kept."""
        pod = await self._unlocked(user, pod_id, "reset")
        saved = await self._save(pod.model_copy(update={"version": pod.version + 1}))
        self._wakeups.notify(Wake.PODS)
        return saved

    async def delete(self, user: User, pod_id: str) -> None:
        """Marked TERMINATED at once (it no longer lists); the runner ends its instance and
        removes its volume, then its record."""
        pod = await self._unlocked(user, pod_id, "deleted")
        await self._wanted(pod, DesiredStatus.TERMINATED)

    async def _unlocked(self, user: User, pod_id: str, what: str) -> Pod:
        pod = await self.get(user, pod_id)
        if pod.spec.locked:
            raise Conflict(
                f"pod {pod_id} is locked and cannot be {what}: unlock it first "
                '(update it with {"locked": false})'
            )
        return pod

    async def _wanted(self, pod: Pod, status: DesiredStatus) -> Pod:
        changed = pod.model_copy(
            update={"desiredStatus": status, "lastStatusChange": self._clock.now()}
        )
        saved = await self._save(changed)
        self._wakeups.notify(Wake.PODS)
        return saved

    async def _save(self, pod: Pod) -> Pod:
        saved = await self._store.update_pod_settings(pod)
        if saved is None:
            raise NotFound("Pod not found")
        return saved

    def _check_command(self, spec: PodSpec) -> None:
        """Refused (400, naming the field) when the provider can tell now that the command
        cannot run (none at all for a process, a program not there): started, it would only
        fail and be started again, for ever."""
        problem = self._runner.provider.command_problem(spec)
        if problem is not None:
            # Its first word is the program, in the entrypoint when there is one.
            field = "dockerEntrypoint" if spec.dockerEntrypoint else "dockerStartCmd"
            raise Invalid(f"{field}: {problem}", field=field)

    def _check_ports(self, spec: PodSpec) -> None:
        """Refused (400, ``ports``) when the provider keeps a declared port for others (a
        process pod in a sandbox that fences ports): started, it would only fail, and be
        started again, for ever."""
        problem = self._runner.provider.ports_problem(spec)
        if problem is not None:
            raise Invalid(f"ports: {problem}", field="ports")

    async def _check_room(self, size_gb: int, pod_id: str | None, owner: User) -> None:
        """Refused (400, ``volumeInGb``) when the disk has not that much free, what the pod's
        volume holds already counted as its own."""
        free = await asyncio.to_thread(self._dirs.free_bytes)
        used = await self._dirs.measure(pod_id, owner.id) if pod_id else 0
        refusal = room_refusal(size_gb, free, used, field="volumeInGb")
        if refusal is not None:
            raise Invalid(refusal, field="volumeInGb")

    async def _check_auth(self, user: User, auth_id: str | None) -> None:
        if auth_id is not None and await self._store.get_registry_auth(user.id, auth_id) is None:
            raise Invalid(
                f"containerRegistryAuthId: no container registry auth {auth_id}",
                field="containerRegistryAuthId",
            )
