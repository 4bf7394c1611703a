"""Every service of one running server, built once by the composition root (``app.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from skiff.clock import Clock
from skiff.cluster.base import Cluster
from skiff.config import Settings
from skiff.domain.billing import load_prices
from skiff.domain.gpus import Gpu
from skiff.providers.base import SpansMachines, WorkerProvider
from skiff.services import disk_reserve
from skiff.services.accounts import Accounts
from skiff.services.admission import Admission
from skiff.services.auth import Auth
from skiff.services.balancer import Balancer, StoreBoard
from skiff.services.billing import Billing
from skiff.services.cluster_inventory import ClusterInventory
from skiff.services.disk_watch import DiskWatch
from skiff.services.dispatch import Dispatch
from skiff.services.endpoints import Endpoints
from skiff.services.fleet import Fleet
from skiff.services.follow_slots import FollowSlots
from skiff.services.gpu_report import GpuReport
from skiff.services.gpus import GpuPool
from skiff.services.isolation import Isolation
from skiff.services.job_events import JobEvents
from skiff.services.job_room import MIB, JobRoom, JobRoomMetrics
from skiff.services.jobs import Jobs
from skiff.services.large_bodies import LargeBodies
from skiff.services.lb_health import LbHealth
from skiff.services.lb_proxy import LbProxy
from skiff.services.lineup import Lineup
from skiff.services.logs import EndpointLogs, PodLogs, WorkerLogs
from skiff.services.long_polls import LongPolls
from skiff.services.metering import Meter
from skiff.services.metrics import Metrics
from skiff.services.openai_calls import OpenAICalls
from skiff.services.peer_logs import PeerLogs
from skiff.services.placement import Placement
from skiff.services.pod_runner import POD_VOLUMES, PodProviders, PodRunner, public_host
from skiff.services.pod_shells import PodShells
from skiff.services.pods import Pods
from skiff.services.public_models import PublicModels
from skiff.services.quotas import Quotas
from skiff.services.ratelimits import RateLimits
from skiff.services.reaper import Reaper
from skiff.services.registry_auths import RegistryAuths
from skiff.services.result_holds import ResultHolds
from skiff.services.scaler import Scaler
from skiff.services.secrets import Secrets
from skiff.services.ssh_ports import SshPorts
from skiff.services.templates import Templates
from skiff.services.user_settings import UserSettings
from skiff.services.volumes import Volumes
from skiff.services.wakeups import Wakeups
from skiff.services.webhooks import WebhookSender
from skiff.services.worker_exits import WorkerExits
from skiff.services.workers import Workers
from skiff.store.base import Store
from skiff.volume_dirs import VolumeDirs


@dataclass
class Services:
    settings: Settings
    clock: Clock
    store: Store
    wakeups: Wakeups
    job_events: JobEvents
    auth: Auth
    accounts: Accounts
    workers: Workers
    dispatch: Dispatch
    fleet: Fleet
    gpus: GpuPool
    jobs: Jobs
    endpoints: Endpoints
    templates: Templates
    registry_auths: RegistryAuths
    secrets: Secrets
    scaler: Scaler
    reaper: Reaper
    webhooks: WebhookSender
    rate_limits: RateLimits
    admission: Admission
    openai_calls: OpenAICalls
    metrics: Metrics
    cluster: Cluster
    #: Where workers run across a cluster of machines (the Ray provider): its GPUs and
    #: capacity, read again by the leader. None for this host's own.
    cluster_inventory: ClusterInventory | None
    peer_logs: PeerLogs
    logs: EndpointLogs
    placement: Placement
    volumes: Volumes
    pods: Pods
    pod_runner: PodRunner
    gpu_report: GpuReport
    meter: Meter
    billing: Billing
    user_settings: UserSettings
    pod_logs: PodLogs
    pod_shells: PodShells
    balancer: Balancer
    lb_health: LbHealth
    lb_proxy: LbProxy
    public_models: PublicModels
    #: Holds process workers' homes to ``containerDiskInGb``; None where workers are not
    #: processes on this host, or the check is off.
    disk_watch: DiskWatch | None
    #: Workers' results and stream chunks over 1 MB, parsed in a helper process.
    large_bodies: LargeBodies
    long_polls: LongPolls

    @classmethod
    def build(
        cls,
        settings: Settings,
        store: Store,
        clock: Clock,
        cluster: Cluster,
        *,
        provider: WorkerProvider,
        exits: WorkerExits,
        gpus: list[Gpu],
        worker_limit: int,
        worker_logs: WorkerLogs,
        pod_provider: PodProviders,
    ) -> Services:
        """Each service once, after what it needs. What the deployment and the machine decide
        comes from the composition root: ``cluster`` (this replica alone, or one of several on
        the database), the worker ``provider`` with the ``exits`` it reports to, this machine's
        ``gpus`` and ``worker_limit``, and the ``worker_logs`` the provider writes into."""
        wakeups = Wakeups(publish=cluster.publish, max_wait=cluster.max_wait)
        events = JobEvents(wakeups)
        auth = Auth(store, clock, settings.key_cache_seconds)
        meter = Meter(store, clock, wakeups)
        workers = Workers(
            store,
            clock,
            cluster.replica_id,
            meter.ended,
            # A follower's copies go by themselves: only the leader forgets silent workers.
            copy_seconds=settings.worker_silence_seconds,
        )

        async def oldest_queued_at(endpoint_id: str) -> float | None:
            return (await store.job_counts(endpoint_id)).oldest_queued_at

        metrics = Metrics(store, clock, workers, oldest_queued_at=oldest_queued_at)
        reserve = disk_reserve.for_settings(settings, clock)
        if reserve is not None:
            metrics.registry.register(disk_reserve.ReserveMetrics(reserve))
        job_room = JobRoom(store, clock, settings.job_mb_per_user * MIB)
        metrics.registry.register(JobRoomMetrics(job_room))
        dispatch = Dispatch(
            store,
            clock,
            wakeups,
            workers,
            events,
            metrics,
            settings.lease_seconds,
            settings.max_attempts,
            ResultHolds(settings.result_hold_seconds),
            Lineup(settings.lineup_seconds),
            stream_max_bytes=settings.stream_max_mb * 1024 * 1024,
            room=job_room,
        )
        gpu_pool = GpuPool(gpus)
        quotas = Quotas(store, settings.max_per_user)
        volumes = Volumes(
            store, clock, VolumeDirs(settings.volumes_path()), meter.ended, quotas=quotas
        )
        isolation = Isolation(store, enabled=settings.sandbox)
        fleet = Fleet(
            settings,
            store,
            clock,
            workers,
            dispatch,
            auth,
            gpu_pool,
            provider,
            exits,
            worker_logs,
            worker_limit=worker_limit,
            volumes=volumes,
            isolation=isolation,
        )
        dispatch.end_worker = fleet.end_at_once
        dispatch.can_end = fleet.can_end_at_once
        placement = Placement(store, gpu_pool, fleet)
        cluster_inventory = (
            ClusterInventory(
                provider,
                gpu_pool,
                fleet,
                wakeups,
                provider.worker_url(settings.base_url()),
                fixed_limit=settings.max_workers is not None,
            )
            if isinstance(provider, SpansMachines)
            else None
        )
        board = None if cluster.alone else StoreBoard(store, clock, cluster.replica_id)
        balancer = Balancer(workers, wakeups, settings.lb_wait_seconds, clock, board=board)
        # After the fleet's: by the time the balancer hears of an exit, the record is gone.
        exits.subscribe(balancer.on_exit)
        webhooks = WebhookSender(
            store,
            clock,
            allow_private=settings.webhook_allow_private,
            timeout=settings.webhook_timeout_seconds,
        )
        events.on_final(metrics.job_finished)
        events.on_final(webhooks.job_finished)

        jobs = Jobs(
            store,
            clock,
            wakeups,
            events,
            placement.why,
            webhooks.guard,
            reserve=reserve,
            room=job_room,
        )
        public_models = PublicModels(store, clock)
        endpoints = Endpoints(store, clock, wakeups, workers, fleet, public_models, quotas)
        rate_limits = RateLimits(
            settings.rate_limits,
            settings.rate_requests_per_worker,
            storage=settings.rate_limit_storage,
        )
        peer_logs = PeerLogs(cluster)
        # Kept as the workers' are, one pace per user across both.
        pod_log_files = worker_logs.beside("pod-logs")

        async def pod_exited(pod_id: str, code: int) -> None:
            await pod_runner.on_exit(pod_id, code)

        # Beside the network volumes, on the disk (shared between replicas) that holds them.
        pod_dirs = VolumeDirs(settings.volumes_path() / POD_VOLUMES)
        pod_runner = PodRunner(
            store,
            clock,
            wakeups,
            gpu_pool,
            pod_provider(pod_exited, pod_log_files.sink),
            pod_log_files,
            pod_dirs,
            settings.data_dir / "pods",
            volumes,
            cluster.replica_id,
            stop_grace=settings.worker_stop_grace_seconds,
            public_host=public_host(settings.base_url()),
            usage_ended=meter.ended,
            isolation=isolation,
            ssh_ports=SshPorts(settings.ssh_pod_port_range()),
        )
        # One user's followed logs on this replica, of endpoints and pods together.
        follow_slots = FollowSlots()
        pod_logs = PodLogs(pod_log_files, store, wakeups, follow_slots)
        return cls(
            settings=settings,
            clock=clock,
            store=store,
            wakeups=wakeups,
            job_events=events,
            auth=auth,
            accounts=Accounts(store, clock, auth, wakeups, quotas),
            workers=workers,
            dispatch=dispatch,
            fleet=fleet,
            gpus=gpu_pool,
            jobs=jobs,
            endpoints=endpoints,
            templates=Templates(store, clock, wakeups, quotas),
            registry_auths=RegistryAuths(store, clock, quotas),
            secrets=Secrets(store, clock, wakeups, quotas),
            scaler=Scaler(
                store,
                clock,
                wakeups,
                workers,
                fleet,
                balancer,
                settings.scaler_interval_seconds,
                start_timeout=settings.worker_start_timeout_seconds,
            ),
            reaper=Reaper(
                store,
                clock,
                wakeups,
                events,
                workers,
                dispatch,
                fleet,
                interval=1.0,
                worker_silence=settings.worker_silence_seconds,
                stop_grace=settings.stop_grace_seconds,
            ),
            rate_limits=rate_limits,
            admission=Admission(auth, endpoints, workers, rate_limits),
            openai_calls=OpenAICalls(jobs),
            metrics=metrics,
            cluster=cluster,
            peer_logs=peer_logs,
            logs=EndpointLogs(worker_logs, peer_logs, store, wakeups, follow_slots),
            placement=placement,
            webhooks=webhooks,
            volumes=volumes,
            pods=Pods(store, clock, wakeups, pod_runner, pod_dirs, quotas),
            pod_runner=pod_runner,
            gpu_report=GpuReport(store, gpu_pool),
            cluster_inventory=cluster_inventory,
            meter=meter,
            billing=Billing(store, clock, load_prices(settings.prices)),
            user_settings=UserSettings(store),
            pod_logs=pod_logs,
            pod_shells=PodShells(
                store, clock, pod_runner, pod_logs, wakeups, settings.ssh_idle_seconds
            ),
            balancer=balancer,
            lb_proxy=LbProxy(balancer),
            public_models=public_models,
            lb_health=LbHealth(
                workers, fleet, balancer, wakeups, settings.lb_ping_interval_seconds
            ),
            disk_watch=DiskWatch(
                store, workers, fleet, pod_runner, volumes, wakeups, settings.disk_check_seconds
            )
            # Ray nodes mount no volume and keep no home here: nothing of theirs to measure.
            if settings.provider in ("local", "docker") and settings.disk_check_seconds
            else None,
            large_bodies=LargeBodies(settings.large_body_memory_mb * 1024 * 1024),
            long_polls=LongPolls(),
        )
