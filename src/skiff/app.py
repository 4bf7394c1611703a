"""The composition root: settings -> store, services, provider, background loops, ASGI app.

/                 a page (or, asked for JSON, an index) linking the console and API docs
/healthz          liveness (no auth)
/metrics          Prometheus metrics (no auth)
/v1/...           management REST          (api/management.py)
/v2/...           job interface + workers  (api/v2.py declares every route)
/console/...      web console              (console/)
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import math
import socket
import sys
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from skiff.api import graphql as graphql_api
from skiff.api import lb as lb_api
from skiff.api import management
from skiff.api import root as root_api
from skiff.api import v2 as v2_api
from skiff.api.hot import WithHotRoutes
from skiff.api.responses import json_response
from skiff.clock import Clock, SystemClock
from skiff.cluster.base import Cluster
from skiff.cluster.local import LocalCluster
from skiff.cluster.postgres import PostgresCluster
from skiff.config import Settings
from skiff.console import mount as console_mount
from skiff.databases import Backend, backend_of
from skiff.datadir import make_private_dir
from skiff.domain.log_pace import PacesByUser
from skiff.providers.base import LogSinks, PodExitCallback, PodProvider, WorkerProvider
from skiff.providers.bubblewrap import Sandbox
from skiff.providers.capacity import host_worker_limit
from skiff.providers.cgroups import Cgroups
from skiff.providers.docker import HOST_GATEWAY, DockerProvider, gateway_url, server_identity
from skiff.providers.docker_pods import DockerPodProvider
from skiff.providers.gpus import inventory
from skiff.providers.local import LocalProvider
from skiff.providers.local_pods import LocalPodProvider
from skiff.providers.ray import RayProvider
from skiff.providers.ray_cluster import RayConnection
from skiff.providers.ray_pods import RayPodProvider
from skiff.services.auth import IssuedKey
from skiff.services.host_addresses import interface_addresses
from skiff.services.hub import Services
from skiff.services.leadership import Leadership
from skiff.services.logs import WorkerLogs
from skiff.services.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from skiff.services.pod_runner import PodProviders
from skiff.services.worker_exits import WorkerExits
from skiff.ssh.server import SshServer
from skiff.store import open_configured
from skiff.store.base import Store

log = logging.getLogger(__name__)


def own_addresses() -> list[str]:
    """This host's interfaces' addresses, as its replica publishes them."""
    return sorted(str(ip) for ip in interface_addresses())


def open_cluster(settings: Settings) -> Cluster:
    """Several replicas can share a PostgreSQL database; SQLite means this replica alone."""
    url = settings.database_url
    if url is not None and backend_of(url) is Backend.POSTGRES:
        return PostgresCluster(
            url,
            settings.database_schema,
            settings.peer_url(),
            max_wait=settings.wait_poll_seconds,
            # Published, so that no other replica's webhook reaches this host either.
            addresses=own_addresses(),
        )
    return LocalCluster(settings.peer_url())


def open_ray(settings: Settings) -> RayConnection | None:
    """The Ray cluster workers and pods are placed on (``SKIFF_PROVIDER=ray``), not yet
    connected; None for any other provider."""
    if settings.provider != "ray":
        return None
    if not settings.ray_address:
        raise ValueError(
            "SKIFF_PROVIDER=ray needs SKIFF_RAY_ADDRESS: the Ray cluster to place workers on "
            "(ray://head-host:10001, or the head's host:port on a Ray node)"
        )
    return RayConnection(settings.ray_address, settings.ray_namespace)


def containers_reach_server(settings: Settings) -> None:
    """``SKIFF_PROVIDER=docker``: refuse a server its worker containers cannot reach. A
    container calls the server at the host gateway (``host.docker.internal``, the bridge's
    address on this host) unless ``SKIFF_PUBLIC_URL`` names another address; a server that
    listens on the loopback only is not there, and every worker would wait out its start-up
    deadline (600 s) calling a closed port, without a word. ``ValueError`` saying what to
    set."""
    if settings.provider != "docker" or not is_loopback(settings.host):
        return
    reached = urlsplit(gateway_url(settings.base_url())).hostname or ""
    if reached != HOST_GATEWAY and not is_loopback(reached):
        return  # SKIFF_PUBLIC_URL names an address containers reach some other way
    raise ValueError(
        f"SKIFF_PROVIDER=docker: worker containers cannot reach the server: it listens on "
        f"{settings.host} (SKIFF_HOST, --host), this host's loopback only, and they call it at "
        f"the Docker host gateway ({HOST_GATEWAY}) unless SKIFF_PUBLIC_URL names another "
        f"address; set "
        f"SKIFF_HOST to the docker0 bridge's address (e.g. 172.17.0.1: this host and its "
        f"containers reach it, the network does not) or to 0.0.0.0, or SKIFF_PUBLIC_URL to an "
        f"address the containers reach"
    )


def is_loopback(host: str) -> bool:
    """A listening address that only this host's own programs reach (a container does not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: where it points is the operator's to know


def open_provider(
    settings: Settings,
    exits: WorkerExits,
    worker_logs: WorkerLogs,
    owner: str,
    ray: RayConnection | None = None,
) -> WorkerProvider:
    """``SKIFF_PROVIDER``: processes on this host, containers of the templates' images, or
    processes on the nodes of a Ray cluster (``ray``)."""
    if ray is not None:
        return RayProvider(
            ray,
            exits.report,
            logs=worker_logs.sink,
            placement_seconds=settings.ray_placement_seconds,
        )
    if settings.provider == "docker":
        containers_reach_server(settings)
        return DockerProvider(
            exits.report,
            logs=worker_logs.sink,
            owner=owner,
            server=server_identity(socket.gethostname(), settings.data_dir),
            pids_limit=settings.container_pids_limit,
        )
    return LocalProvider(
        exits.report,
        logs=worker_logs.sink,
        sandbox=open_sandbox(settings),
        fork_servers=settings.fork_servers,
        cgroups=open_cgroups(settings, "workers"),
        pids_limit=settings.process_pids_limit or None,
    )


def open_cgroups(settings: Settings, purpose: str) -> Cgroups | None:
    """Where local ``purpose`` (workers, pods) get a cgroup each (providers/cgroups.py); None
    when the operator turned that off or this host lets the server make none (said once)."""
    if not settings.process_limits or sys.platform != "linux":
        return None
    name = f"{server_identity(socket.gethostname(), settings.data_dir)}-{purpose}"
    opened = Cgroups.open(name)
    if isinstance(opened, str):
        log.warning(
            "local %s run without caps on their processes, memory and CPU: %s "
            "(SKIFF_PROCESS_LIMITS=off says this is meant)",
            purpose,
            opened,
        )
        return None
    return opened


def open_sandbox(settings: Settings) -> Sandbox | None:
    """What local workers and pods are kept from (providers/bubblewrap.py); None when the
    operator turned the sandbox off."""
    if not settings.sandbox:
        return None
    # A SQLite file named outside the data directory is hidden too (PostgreSQL's own files
    # are its server's, out of reach already).
    return Sandbox.for_server(
        settings.data_dir,
        volumes_dir=settings.volumes_path(),
        database_file=settings.sqlite_path(),
        fence_ports=settings.sandbox_fence_ports,
    )


def open_pod_provider(settings: Settings, ray: RayConnection | None = None) -> PodProviders:
    """Pods run where workers do: processes on this host, containers of their images, or
    processes on the nodes of a Ray cluster (``ray``)."""
    if ray is not None:
        cluster = ray

        def on_nodes(on_exit: PodExitCallback, logs: LogSinks) -> PodProvider:
            return RayPodProvider(
                cluster, on_exit, logs=logs, placement_seconds=settings.ray_placement_seconds
            )

        return on_nodes
    if settings.provider == "docker":
        server = server_identity(socket.gethostname(), settings.data_dir)

        def containers(on_exit: PodExitCallback, logs: LogSinks) -> PodProvider:
            return DockerPodProvider(
                on_exit, logs=logs, server=server, pids_limit=settings.container_pids_limit
            )

        return containers

    sandbox = open_sandbox(settings)

    def processes(on_exit: PodExitCallback, logs: LogSinks) -> PodProvider:
        return LocalPodProvider(
            on_exit,
            logs=logs,
            sandbox=sandbox,
            cgroups=open_cgroups(settings, "pods"),
            pids_limit=settings.process_pids_limit or None,
        )

    return processes


def build_services(settings: Settings, store: Store, clock: Clock, cluster: Cluster) -> Services:
    """Every service, with what this machine provides: its worker processes (which report
    their exits to the fleet through ``WorkerExits`` and write their output where the logs
    service keeps it), its GPUs and the most workers it runs at once. Nothing here touches the
    event loop, so it is built before the server starts."""
    exits = WorkerExits()
    worker_logs = WorkerLogs(
        settings.data_dir,
        settings.log_max_bytes,
        settings.log_backups,
        bytes_per_second=settings.log_bytes_per_second,
        burst_bytes=settings.log_burst_bytes,
        user_paces=PacesByUser(settings.log_user_bytes_per_second, settings.log_burst_bytes)
        if settings.log_user_bytes_per_second
        else None,
    )
    ray = open_ray(settings)
    return Services.build(
        settings,
        store,
        clock,
        cluster,
        provider=open_provider(settings, exits, worker_logs, cluster.replica_id, ray),
        exits=exits,
        worker_logs=worker_logs,
        # A Ray cluster's GPUs are its nodes', read once connected (services/cluster_inventory.py).
        gpus=[] if settings.provider == "ray" else inventory(settings.gpus),
        worker_limit=settings.max_workers or host_worker_limit(),
        pod_provider=open_pod_provider(settings, ray),
    )


#: How often the leader looks for files that no record names (at its start, then this often):
#: a directory's listing and a read of every endpoint and volume, so not every sweep.
ORPHANS_EVERY_SECONDS = 600.0


def create_app(
    settings: Settings,
    clock: Clock | None = None,
    on_first_key: Callable[[IssuedKey], None] | None = None,
) -> WithHotRoutes:
    """Build the whole server. ``on_first_key`` is told the administrator key made at the first
    start (the CLI prints it once)."""
    clock = clock or SystemClock()
    store = open_configured(settings)
    cluster = open_cluster(settings)
    services = build_services(settings, store, clock, cluster)
    ready = False
    orphans_swept_at = -math.inf

    async def take_up_lead() -> None:
        # Usages a dead leader left open end where it last saw them, before its workers are
        # swept and forgotten (which would end them now, billing the time no server ran).
        await services.meter.resume()
        if services.cluster_inventory is not None:
            # A cluster's workers outlive the leader that placed them: taken over, on the GPUs
            # the cluster has now, rather than swept.
            await services.cluster_inventory.refresh()
            await services.fleet.adopt()
        await sweep()

    async def sweep() -> None:
        # Containers outlive the server that started them; they are found by their labels.
        await services.fleet.sweep_dead(
            cluster.alive,
            same_host=isinstance(cluster, LocalCluster) or settings.provider in ("docker", "ray"),
        )
        await services.fleet.forget_stale_own(leading=True)
        nonlocal orphans_swept_at
        if clock.now() - orphans_swept_at >= ORPHANS_EVERY_SECONDS:
            # What a crash left of a delete or a create cut in the middle: files with no record.
            orphans_swept_at = clock.now()
            await services.fleet.remove_files_of_deleted()
            await services.volumes.remove_orphans()

    async def lose_lead() -> None:
        services.meter.pause()
        await services.fleet.abandon()
        await services.pod_runner.abandon()

    async def follow() -> None:
        await services.fleet.forget_stale_own(leading=False)

    loops = {
        "scaler": services.scaler.run,
        "reaper": services.reaper.run,
        "webhooks": services.webhooks.run,
        "pods": services.pod_runner.run,
        "meter": services.meter.run,
        "lb-health": services.lb_health.run,
    }
    leadership = Leadership(
        cluster,
        loops,
        on_gain=take_up_lead,
        on_loss=lose_lead,
        on_sweep=sweep,
        interval=settings.leader_check_seconds,
        on_follow=follow,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        nonlocal ready
        make_private_dir(settings.data_dir)
        services.wakeups.bind(asyncio.get_running_loop())
        await store.open()
        issued = await services.auth.bootstrap_admin(settings.api_key)
        if issued is not None and on_first_key is not None:
            on_first_key(issued)
        # Wake-ups notified here reach the other replicas from now on (``Wakeups`` was given
        # the cluster's publish, which sends nothing until the cluster has started).
        await cluster.start(services.wakeups.deliver_all, leadership.lost)
        if isinstance(services.fleet.provider, RayProvider):
            # Before the first campaign, which takes over the workers an earlier leader placed.
            services.fleet.provider.connection.connect()
        if isinstance(services.fleet.provider, DockerProvider):
            # An earlier run's containers outlive it (a process would have died with it):
            # ended before this run answers, so none of them takes a job from it.
            await asyncio.to_thread(services.fleet.provider.end_leftovers)
        ssh: SshServer | None = None
        if settings.ssh_port is not None:
            # Before the first campaign: every pod port is skiff's before a pod is given one.
            ssh = SshServer(
                services.pod_shells,
                services.pod_runner.ssh_ports,
                host=settings.host,
                port=settings.ssh_port,
                data_dir=settings.data_dir,
            )
            await ssh.start()
        # With other replicas on the database no webhook may reach them either: known before
        # this one sends any, or accepts a job's webhook.
        peers = (
            None
            if cluster.alone
            else services.webhooks.peer_addresses(
                cluster.hosts, lambda: cluster.readdress(own_addresses())
            )
        )
        if peers is not None:
            await peers.learn()
        # The first campaign runs before the server answers, so a lone replica serves with its
        # loops already running (and an earlier run's workers already swept).
        await leadership.step()
        leading = asyncio.create_task(leadership.run(), name="leadership")
        # Every replica shares its load-balancing counts, the leader's scaler reads them.
        board = asyncio.create_task(services.balancer.run_board(), name="lb-board")
        # A cluster's GPUs, read by every replica: the leader places workers on them, every
        # replica shows them and says why a worker waits.
        reading = asyncio.create_task(
            services.cluster_inventory.run()
            if services.cluster_inventory is not None
            else asyncio.sleep(0),
            name="cluster-inventory",
        )
        sweeping = asyncio.create_task(services.pod_shells.run(), name="pod-sessions")
        peering = asyncio.create_task(
            asyncio.sleep(0) if peers is None else peers.follow(), name="peer-addresses"
        )
        # Every replica: the homes it measures are those of the workers it runs, on its disk.
        measuring = asyncio.create_task(
            services.disk_watch.run() if services.disk_watch is not None else asyncio.sleep(0),
            name="disk-watch",
        )
        # What start-up made (modules, the app and its routes, models) lives as long as the
        # process: out of the collector's sight, its full collections no longer rescan all of
        # it, whose pauses stalled every request under load (docs/performance.md).
        gc.collect()
        gc.freeze()
        ready = True
        try:
            yield
        finally:
            ready = False
            await leadership.stop()
            leading.cancel()
            board.cancel()
            reading.cancel()
            sweeping.cancel()
            measuring.cancel()
            peering.cancel()
            await asyncio.gather(
                leading, board, reading, sweeping, measuring, peering, return_exceptions=True
            )
            if ssh is not None:
                await ssh.close()
            await services.pod_shells.end_all()
            await services.webhooks.aclose()
            await services.rate_limits.aclose()
            await services.peer_logs.aclose()
            await services.fleet.shutdown()
            await services.lb_health.aclose()
            await services.lb_proxy.aclose()
            await services.balancer.aclose()
            await services.pod_runner.shutdown()
            services.large_bodies.close()
            if isinstance(services.fleet.provider, RayProvider):
                # Last: the pods, left running, are followed until here.
                services.fleet.provider.connection.close()
            await cluster.close()
            await store.close()

    async def healthz(_request: Request) -> Response:
        if not ready:
            return json_response({"status": "starting"}, 503)
        # Which replica answered, and whether it runs the leader loops.
        return json_response(
            {"status": "ok", "replica": cluster.replica_id, "leader": leadership.running_loops}
        )

    async def metrics(_request: Request) -> Response:
        """Prometheus metrics in the text exposition format.

        Unauthenticated, like /healthz, so a scraper needs no API key. It names every
        endpoint id with its job and worker counts, so operators should keep it reachable from
        their own network (or monitoring host) only.
        """
        if not ready:
            # The store is not open yet (or closed already): nothing to read.
            return json_response({"status": "starting"}, 503)
        return Response(await services.metrics.render(), media_type=METRICS_CONTENT_TYPE)

    async def not_found(request: Request, _exc: Exception) -> Response:
        # Paths no route matches (odd bytes included) still answer in the interface's shape.
        key = "message" if request.url.path.startswith("/v1") else "error"
        return json_response({key: f"no such path: {request.url.path}"}, 404)

    v2 = v2_api.build(services)
    lb = lb_api.build(services)
    app = WithHotRoutes(
        exception_handlers={404: not_found},
        routes=[
            Route("/", root_api.root, methods=["GET", "HEAD"]),
            Route("/healthz", healthz),
            Route("/metrics", metrics),
            Mount("/v1", app=management.build(services)),
            Route("/graphql", graphql_api.build(services), methods=["POST"]),
            Mount(v2_api.PREFIX, app=v2.app),
            Mount(lb_api.PREFIX, app=lb.app),
            console_mount(services),
        ],
        lifespan=lifespan,
    )
    app.state.services = services
    # The routes every job crosses skip the framework's routing and middleware (api/v2.py).
    app.hot = v2.hot
    # ... and so do load-balancing endpoints' requests, on the fast protocol (api/lb.py).
    v2.hot.lb = lb.proxy
    if settings.lb_domain:
        app.lb_domain = v2.hot.lb_domain = settings.lb_domain
    return app
