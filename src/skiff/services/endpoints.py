"""Endpoints, per owner: create, read, update (a rolling release of workers), delete."""

from __future__ import annotations

from cachetools import TTLCache
from pydantic import ValidationError

from skiff.clock import Clock
from skiff.domain.endpoints import (
    ComputeType,
    Endpoint,
    EndpointCreate,
    EndpointType,
    EndpointUpdate,
    ScalerType,
    apply_endpoint_update,
    rolls_workers,
    spec_from_create,
)
from skiff.domain.flash import FLASH_NOT_PUBLIC, flash_worker_of
from skiff.domain.quotas import Owned
from skiff.domain.users import User
from skiff.domain.workers import WorkerReport
from skiff.errors import Forbidden, Invalid, NotFound
from skiff.ids import short_id
from skiff.services.fleet import Fleet
from skiff.services.public_models import PublicModels
from skiff.services.quotas import Quotas
from skiff.services.secrets import check_references
from skiff.services.wakeups import Wake, Wakeups
from skiff.services.workers import Workers
from skiff.store.base import Store

#: How long the job routes reuse an endpoint they read (``Endpoints.for_jobs``).
RECENT_SECONDS = 1.0
#: Copies kept at most; past that the oldest go first (they are cheap to read again).
RECENT_MAX = 10_000


class Endpoints:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        wakeups: Wakeups,
        workers: Workers,
        fleet: Fleet,
        models: PublicModels,
        quotas: Quotas | None = None,
    ) -> None:
        """``models`` resolves a public model's id where a job route names one."""
        self._models = models
        self._quotas = quotas or Quotas(store, 0)
        self._store = store
        self._clock = clock
        self._wakeups = wakeups
        self._workers = workers
        self._fleet = fleet
        # endpoint id -> endpoint: the job routes' copy (see ``for_jobs``), on the injected
        # clock so tests move its age by hand.
        self._recent: TTLCache[str, Endpoint, float] = TTLCache(
            maxsize=RECENT_MAX, ttl=RECENT_SECONDS, timer=clock.now
        )

    async def _check_template(self, user: User, template_id: str) -> None:
        if await self._store.get_template(user.id, template_id) is None:
            raise Invalid(f"templateId: no template {template_id}", field="templateId")

    async def _check_volume(self, user: User, volume_id: str | None) -> None:
        """A volume to attach must be the user's, and this server able to mount it."""
        if volume_id is None:
            return
        if await self._store.get_network_volume(user.id, volume_id) is None:
            raise Invalid(
                f"networkVolumeId: no network volume {volume_id}", field="networkVolumeId"
            )
        problem = await self._fleet.provider.volume_mount_problem()
        if problem is not None:
            raise Invalid(
                f"networkVolumeId: this server cannot mount network volumes into its workers: "
                f"{problem}",
                field="networkVolumeId",
            )

    @staticmethod
    def _check_instance_ids(compute_type: ComputeType, given: list[str] | None) -> None:
        if given and compute_type is not ComputeType.CPU:
            raise Invalid(
                "instanceIds: instance ids size CPU endpoints; a GPU endpoint takes gpuTypeIds "
                "and gpuCount",
                field="instanceIds",
            )

    @staticmethod
    def _check_scaler(endpoint_type: EndpointType, scaler_type: ScalerType | None) -> None:
        if endpoint_type is EndpointType.LB and scaler_type is ScalerType.QUEUE_DELAY:
            raise Invalid(
                "scalerType: a load-balancing endpoint has no queue; it scales by REQUEST_COUNT "
                "(requests in flight per worker, scalerValue)",
                field="scalerType",
            )

    async def create(self, user: User, data: EndpointCreate) -> Endpoint:
        await self._quotas.make_room(user, Owned.ENDPOINTS)
        self._check_instance_ids(data.computeType, data.instanceIds)
        self._check_scaler(data.type, data.scalerType)
        await self._check_template(user, data.templateId)
        await self._check_volume(user, data.networkVolumeId)
        endpoint_id = short_id()
        endpoint = Endpoint(
            id=endpoint_id,
            userId=user.id,
            version=1,
            createdAt=self._clock.now(),
            spec=spec_from_create(data, default_name=f"endpoint-{endpoint_id}"),
        )
        await check_references(self._store, user, endpoint.spec.env, "env")
        await self._store.create_endpoint(endpoint)
        self._wakeups.notify(Wake.SCALER)
        return endpoint

    async def all(self, user: User) -> list[Endpoint]:
        return await self._store.list_endpoints(user.id)

    async def get(self, user: User, endpoint_id: str) -> Endpoint:
        """An endpoint the user owns; anyone else's answers 404, as if it did not exist."""
        endpoint = await self._store.get_endpoint(endpoint_id)
        if endpoint is None or endpoint.userId != user.id:
            raise NotFound(f"endpoint {endpoint_id} not found")
        return endpoint

    async def for_jobs(self, user: User, endpoint_id: str) -> Endpoint:
        """``get`` for the job routes, from a copy at most ``RECENT_SECONDS`` old: every job
        request names its endpoint, and reading and parsing it each time was a large share of a
        ``/run`` (docs/performance.md). A change made through this replica is seen at once; one
        made through another replica within ``RECENT_SECONDS``.

        A public model's id stands for its endpoint, for every user: a caller other than its
        owner gets a copy marked with their id (``Endpoint.caller``), so that their jobs are
        theirs alone."""
        endpoint = await self._recent_or_none(endpoint_id)
        if endpoint is not None and endpoint.userId == user.id:
            return endpoint
        model = await self._models.resolve(endpoint_id)
        published = await self._recent_or_none(model.endpoint_id) if model else None
        if published is None:
            raise NotFound(f"endpoint {endpoint_id} not found")
        if published.userId == user.id:
            return published
        # Checked at each call, not only at publishing: the endpoint's template, or its image,
        # may have changed since.
        template = await self._store.get_template(published.userId, published.spec.templateId)
        if template is not None and flash_worker_of(template) is not None:
            raise Forbidden(f"model {endpoint_id}: {FLASH_NOT_PUBLIC}")
        return published.model_copy(update={"caller": user.id})

    async def recent_copy(self, endpoint_id: str) -> Endpoint:
        """The endpoint as stored at most ``RECENT_SECONDS`` ago, whoever asks (the worker
        routes, whose token already names the endpoint, and ``for_jobs``)."""
        found = await self._recent_or_none(endpoint_id)
        if found is None:
            raise NotFound(f"endpoint {endpoint_id} not found")
        return found

    async def _recent_or_none(self, endpoint_id: str) -> Endpoint | None:
        try:  # not .get(): on a TTLCache that checks the key's age twice, and this is per request
            return self._recent[endpoint_id]
        except KeyError:
            pass
        found = await self._store.get_endpoint(endpoint_id)
        if found is None:
            self._recent.pop(endpoint_id, None)
            return None
        self._recent[endpoint_id] = found
        return found

    async def update(self, user: User, endpoint_id: str, data: EndpointUpdate) -> Endpoint:
        current = await self.get(user, endpoint_id)
        self._check_instance_ids(current.spec.computeType, data.instanceIds)
        self._check_scaler(current.spec.type, data.scalerType)
        if data.templateId is not None:
            await self._check_template(user, data.templateId)
        # Checked when it changes only: settings sent back unchanged are not refused for it.
        if data.networkVolumeId != current.spec.networkVolumeId:
            await self._check_volume(user, data.networkVolumeId)
        try:
            spec = apply_endpoint_update(current.spec, data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "workersMin"
            message = str(first["msg"]).removeprefix("Value error, ")
            raise Invalid(f"{field}: {message}", field=field) from None
        await check_references(self._store, user, spec.env, "env")
        updated = await self._store.update_endpoint(
            endpoint_id, spec, bump_version=rolls_workers(current.spec, spec)
        )
        self._recent.pop(endpoint_id, None)
        if updated is None:
            raise NotFound(f"endpoint {endpoint_id} not found")
        self._wakeups.notify(Wake.SCALER)
        return updated

    async def delete(self, user: User, endpoint_id: str) -> None:
        """Stops its workers, then removes its configuration, jobs and logs."""
        await self.get(user, endpoint_id)
        workers = await self._workers.of_endpoint(endpoint_id)
        # The row goes first so the scaler starts nothing more for it (its workers' records go
        # with it: a replica running one of them stops it when it next reconciles).
        await self._store.delete_endpoint(endpoint_id, self._clock.now())
        self._recent.pop(endpoint_id, None)
        await self._fleet.remove_endpoint_workers(endpoint_id, workers)
        await self._fleet.remove_files(endpoint_id)
        # Wake anything waiting on this endpoint so it notices it is gone, and the leader.
        self._wakeups.notify(Wake.endpoint(endpoint_id))
        self._wakeups.notify(Wake.SCALER)

    async def workers_of(self, endpoint_id: str) -> list[WorkerReport]:
        """The endpoint's workers, each with the jobs it holds."""
        return [
            WorkerReport(worker=w, jobs=sorted(await self._workers.jobs_of(w.id)))
            for w in await self._workers.of_endpoint(endpoint_id)
        ]
