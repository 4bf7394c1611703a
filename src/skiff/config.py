"""Settings, read once at the edge (env prefix ``SKIFF_``) and passed down as an object."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from skiff.databases import sqlite_file_of
from skiff.domain.containers import DEFAULT_PIDS_LIMIT, MAX_PIDS_LIMIT, MIN_PIDS_LIMIT
from skiff.domain.log_pace import MIN_LOG_BYTES_PER_SECOND
from skiff.domain.quotas import DEFAULT_MAX_PER_USER
from skiff.domain.results import PARSE_MEMORY_LIMIT
from skiff.secret_keys import key_source, parse_keys
from skiff.store.sealing import KeySource

#: Limits that 0 turns off and that cannot work below a floor: the floor, what 0 means, and why.
_FLOORS: dict[str, tuple[int, str, str]] = {
    name: (
        MIN_PIDS_LIMIT,
        "(no limit set by skiff)",
        "the kernel counts every thread, and a worker's runtime and its own need a few dozen",
    )
    for name in ("container_pids_limit", "process_pids_limit")
} | {
    name: (
        MIN_LOG_BYTES_PER_SECOND,
        "(no limit)",
        "the output a worker leaves in its pipe when it ends is read at this pace, within 2 s",
    )
    for name in ("log_bytes_per_second", "log_user_bytes_per_second")
}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SKIFF_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    #: Relative: to the directory the server starts in, made absolute when read (see
    #: ``_absolute``).
    data_dir: Path = Field(default=Path(".skiff"), validate_default=True)
    #: Where network volumes live, one directory per volume (volume_dirs.py); unset:
    #: ``volumes`` in the data directory. Made absolute as ``data_dir`` is.
    volumes_dir: Path | None = None
    #: ``sqlite:///path`` (default: skiff.db in the data directory) or ``postgresql://...``.
    database_url: str | None = None
    #: PostgreSQL only: keep skiff's tables in this schema (made if missing).
    database_schema: str | None = None
    #: Registered as the administrator's key at start when given.
    api_key: str | None = None
    #: The key (or keys, comma-separated: the first encrypts, all decrypt) of the secrets
    #: encrypted in the database (secret_keys.py); unset: the key file in the data directory.
    secret_key: str | None = None
    #: Base URL workers use to reach this server; derived from host and port when unset.
    public_url: str | None = None
    #: How long a job-take or job-stop long-poll waits for work before answering 204.
    #: The runpod SDK abandons a take after 90 s, so this must stay well under that.
    #: ``SKIFF_TAKE_HOLD_SECONDS``, its earlier name, is still read.
    take_wait_seconds: float = Field(
        default=20.0,
        gt=0,
        lt=80,
        validation_alias=AliasChoices(
            "take_wait_seconds", "SKIFF_TAKE_WAIT_SECONDS", "SKIFF_TAKE_HOLD_SECONDS"
        ),
    )
    #: Longest a worker's job-done answer is kept back until its next job reaches it, which
    #: wakes the SDK's job loop at once instead of on its 100 ms tick
    #: (services/result_holds.py). 0 answers every job-done at once.
    result_hold_seconds: float = Field(default=60.0, ge=0)
    #: Predicted work handed at once to a worker that takes one job at a time (the SDK's
    #: default), the job it takes and the ones lined up behind it (services/lineup.py). The
    #: SDK asks again only on its next one-second tick, so this is what that second is spread
    #: over. 0 hands one job per take.
    lineup_seconds: float = Field(default=20.0, ge=0)
    #: Heartbeat period handed to workers (RUNPOD_PING_INTERVAL), in milliseconds.
    ping_interval_ms: int = Field(default=5000, ge=1000)
    #: A held job's lease; pings renew it. A worker silent for this long loses its jobs.
    lease_seconds: float = Field(default=30.0, gt=0)
    #: How many times a job is handed to a worker before a lost worker fails it.
    max_attempts: int = Field(default=3, ge=1)
    #: Period of the reconcile loop that starts and stops workers.
    scaler_interval_seconds: float = Field(default=1.0, gt=0)
    #: SIGTERM -> SIGKILL grace when a worker is stopped.
    worker_stop_grace_seconds: float = Field(default=5.0, ge=0)
    #: An external worker not heard from (take, ping, result) for this long is forgotten and its
    #: jobs go back to the queue.
    worker_silence_seconds: float = Field(default=60.0, gt=0)
    #: Let webhooks reach loopback, private and link-local addresses and this host's own
    #: interfaces' (refused by default).
    webhook_allow_private: bool = False
    #: How long one webhook delivery attempt may take.
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    #: A worker told to stop a job (cancel, timeout, ttl) that still holds it after this long
    #: is ended and replaced.
    stop_grace_seconds: float = Field(default=10.0, ge=0)
    #: A local worker that has not called in (its first take or ping) this long after its
    #: process started is ended, counted as a failed start (back-off, ``lastWorkerFailure``)
    #: and replaced. Generous by default: loading a model can take minutes.
    worker_start_timeout_seconds: float = Field(default=600.0, gt=0)
    #: Load-balancing endpoints: how long a request waits for a ready worker (one starting
    #: from zero included) before it is answered 503 with ``Retry-After``.
    lb_wait_seconds: float = Field(default=60.0, gt=0, le=3600)
    #: How often the leader pings each load-balancing worker's ``GET /ping``.
    lb_ping_interval_seconds: float = Field(default=0.5, gt=0, le=60)
    #: Load-balancing endpoints: the most requests one endpoint may have in flight on this
    #: server (waiting for a worker, at one, or streaming its answer back); one more is answered
    #: 503 with ``Retry-After``. Each holds the caller's connection and a socket to the worker
    #: for up to the endpoint's ``executionTimeoutMs``: 256 keeps one endpoint whose worker
    #: stops answering to about 512 open files, so it cannot take those of the rest of the
    #: server (a common open-file limit is 1,024), while staying well above the requests one
    #: worker process serves at once. 0: no cap.
    lb_max_in_flight: int = Field(default=256, ge=0)
    #: A domain under which each load-balancing endpoint also answers by host name, as on the
    #: hosted platform: ``{endpoint_id}.{lb_domain}/any/path``. Unset: ``/lb/{id}/...`` only.
    lb_domain: str | None = None
    #: The most worker processes this server runs at once, all endpoints together; wanted
    #: workers beyond it wait as ``throttled``. Unset: what the host can hold
    #: (``providers.capacity.host_worker_limit``).
    max_workers: int | None = Field(default=None, ge=1)
    #: A declared GPU fleet, ``"NVIDIA GeForce RTX 4090:2,NVIDIA H100 80GB HBM3:1"`` (type:count);
    #: when unset the inventory comes from NVML (none on hosts without NVIDIA GPUs).
    gpus: str | None = None
    #: The price table (TOML, ``domain/billing.py``); unset: every amount is 0, time still
    #: counted.
    prices: Path | None = None
    #: How long an API key lookup is cached; a revoked key stops working within this time.
    key_cache_seconds: float = Field(default=5.0, ge=0)
    #: Per-user, per-endpoint, per-operation request and concurrency limits on the job interface.
    #: ``SKIFF_RATE_LIMITS=off`` (or false / 0) turns them all off.
    rate_limits: bool = True
    #: Dynamic rate limits: an operation's request limit per 10 s is
    #: max(its base limit, running workers x this).
    rate_requests_per_worker: int = Field(default=50, ge=0)
    #: Where the rate-limit budgets live: ``memory://`` (this process; several replicas each
    #: keep their own) or a ``redis://host:port`` shared by every replica.
    rate_limit_storage: str = "memory://"
    #: How other replicas reach this one (they proxy worker-log reads to the replica that ran
    #: the worker); derived like ``public_url`` when unset.
    replica_url: str | None = None
    #: With several replicas, every wait (long-polls, /runsync, streams) re-checks the database
    #: at least this often, in case a wake-up from another replica was missed.
    wait_poll_seconds: float = Field(default=2.0, gt=0, le=60)
    #: How often a replica that is not the leader tries to take the leader lock.
    leader_check_seconds: float = Field(default=1.0, gt=0, le=60)
    #: A worker's log file is rotated when it would pass this many bytes.
    log_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    #: Rotated log files kept per worker (WORKER.log.1 … .N); older ones are dropped.
    log_backups: int = Field(default=2, ge=0)
    #: How fast each worker's (and pod's) output is copied into its log, in bytes a second,
    #: after ``log_burst_bytes`` at once; a worker printing faster is held up in its writes
    #: (nothing is dropped). The server copies every log on its own CPU. A worker at the
    #: runpod SDK's default level writes about 2 KB a job: 1 MiB/s is some 500 jobs a
    #: second. 0: no limit.
    log_bytes_per_second: int = Field(default=1024 * 1024, ge=0)
    #: The output a worker may write at once before ``log_bytes_per_second`` holds it up.
    log_burst_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024)
    #: How fast the output of all of one user's workers and pods on this server together is
    #: copied, after ``log_burst_bytes`` at once: many workers do not multiply what one
    #: user's prints may cost the server. 0: no limit.
    log_user_bytes_per_second: int = Field(default=4 * 1024 * 1024, ge=0)
    #: The logs of a user's ended workers, on all of their endpoints, kept on this host,
    #: newest first, up to this many bytes together (the newest ended worker's is always
    #: kept); older ones are removed.
    log_ended_max_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    #: And at most this many ended workers' logs of one user (the newest always): each end
    #: reads the user's logs kept, which a crash loop of tiny logs would otherwise make
    #: hundreds of thousands of files.
    log_ended_max_workers: int = Field(default=1000, ge=0)
    #: How often this replica measures the homes of its process workers against their
    #: template's ``containerDiskInGb``, and the volumes its workers and pods mount (processes
    #: or containers) against their size (services/disk_watch.py); 0 turns the check off.
    disk_check_seconds: float = Field(default=30.0, ge=0, le=86400)
    #: With the embedded SQLite store: MiB kept free on the database's disk for the work already
    #: accepted; below it new jobs are refused with 507 (services/disk_reserve.py). 0: none kept.
    disk_reserve_mb: int = Field(default=256, ge=0)
    #: MiB one user's jobs may hold in the database (inputs and webhooks of the jobs they
    #: submitted, results and streams their endpoints' workers wrote, pending webhook
    #: deliveries); past it their new jobs are refused with 507, and what workers write past
    #: twice it fails its job (services/job_room.py), so that no tenant fills the disk all
    #: share. 0: no bound.
    job_mb_per_user: int = Field(default=2048, ge=0)
    #: The most endpoints, templates, network volumes, pods, API keys, secrets and container
    #: registry auths one user may hold, of each (domain/quotas.py); administrators are not
    #: bounded. 0: no bound.
    max_per_user: int = Field(default=DEFAULT_MAX_PER_USER, ge=0)
    #: MiB of memory (address space) the helper process that parses workers' results and
    #: stream chunks over 1 MB may take (services/large_bodies.py); a body it cannot read
    #: within it fails its job.
    large_body_memory_mb: int = Field(default=PARSE_MEMORY_LIMIT // (1024 * 1024), ge=256)
    #: The most a job's stream may hold, in MiB of its stored JSON: a chunk that would take it
    #: past this fails the job (its earlier chunks are kept). Every tenant's streams share the
    #: database's disk, and a stream has no other end than its job's.
    stream_max_mb: int = Field(default=256, ge=1, le=2047)
    #: A connection must send a whole request head (request line and headers) within this
    #: long of opening, or of starting its next request; else it is closed.
    header_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    #: A request body must keep arriving: this long without a byte of it closes the connection.
    body_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    #: Open connections this server keeps at most; 0 derives it from the open-file limit
    #: (raised to its hard limit at start), leaving room for the database, logs and workers.
    max_connections: int = Field(default=0, ge=0)
    #: Serve the hot job and worker routes from skiff's own HTTP protocol (api/lean_http.py),
    #: which also keeps the three connection rules above. Off (``SKIFF_FAST_HTTP=0``): uvicorn's
    #: plain httptools protocol, the same answers through the ASGI app, without those rules;
    #: the way to run on a uvicorn other than the tested one, which ``serve`` otherwise refuses.
    fast_http: bool = True
    #: Where workers run: ``local`` (processes on this host running the template's command),
    #: ``docker`` (containers of the template's image, through the Docker Engine API at
    #: ``DOCKER_HOST``; providers/docker.py) or ``ray`` (processes running the template's
    #: command on the nodes of the Ray cluster at ``ray_address``; providers/ray.py).
    provider: Literal["local", "docker", "ray"] = "local"
    #: Run every local worker and pod in a sandbox (providers/bubblewrap.py): its own user, PID
    #: and mount namespaces, the data directory and other tenants' files out of its sight.
    #: ``off``: every worker runs as the server's own user and sees what it sees, for a server
    #: whose users all trust each other.
    sandbox: bool = True
    #: In the sandbox, a worker or pod may bind only its own TCP ports (and one the kernel
    #: picks: providers/port_fence.py), so that no tenant takes another's. ``off``: any port,
    #: for a server whose users all trust each other and run programs on fixed ports.
    sandbox_fence_ports: bool = True
    #: Start a local worker that runs ``python script.py`` as a fork of a pre-started
    #: interpreter with the runpod SDK imported (providers/fork_server.py), in its endpoint's
    #: sandbox for a sandboxed CPU worker: tens of milliseconds instead of the SDK's import.
    #: ``off``: every worker starts afresh.
    fork_servers: bool = True
    #: ``SKIFF_PROVIDER=docker``: the image that runs a Flash endpoint's worker in place of the
    #: hosted ``runpod/flash`` images (services/flash_workers.py; built by
    #: ``images/flash-worker/build``).
    flash_image: str = Field(default="skiff/flash-worker:0.1.0", min_length=1)
    #: The Ray cluster (``SKIFF_PROVIDER=ray``): ``ray://head:10001`` (Ray Client), or the head's
    #: ``host:port`` (or ``auto``) where this host is a Ray node itself.
    ray_address: str | None = None
    #: The Ray namespace of this installation's actors: two installations sharing a cluster
    #: each take over only their own workers.
    ray_namespace: str = Field(default="skiff", min_length=1, max_length=100)
    #: How long a worker may wait to be placed on a Ray node before its start counts as failed.
    ray_placement_seconds: float = Field(default=60.0, gt=0, le=3600)
    #: ``SKIFF_PROVIDER=docker``: the most processes and threads one worker or pod container
    #: may hold (Docker's ``PidsLimit``), so that one tenant's fork bomb cannot exhaust the
    #: host's. 0: skiff sets none, and the daemon's own default (``default-pids-limit``,
    #: unlimited unless set) applies.
    container_pids_limit: int = Field(default=DEFAULT_PIDS_LIMIT, ge=0, le=MAX_PIDS_LIMIT)
    #: Each local worker and pod run as a process in a cgroup of its own, where the server may
    #: make them (providers/cgroups.py): its processes capped at ``process_pids_limit``, a CPU
    #: endpoint's or CPU pod's memory and vCPUs as its container would have them, and all it
    #: started ended with it. ``off``: no cgroups, for a server whose users all trust each other.
    process_limits: bool = True
    #: The most processes and threads one local worker or pod may hold (its cgroup's
    #: ``pids.max``). 0: no cap.
    process_pids_limit: int = Field(default=DEFAULT_PIDS_LIMIT, ge=0, le=MAX_PIDS_LIMIT)

    #: SSH into pods (``skiff/ssh``; docs/pods.md): the port skiff serves SSH on itself, where
    #: the user name is the pod's id (``ssh POD_ID@HOST -p PORT``), on ``host``. Unset: no SSH
    #: at all. 0: a free port, said in the log (tests). Open it, and ``ssh_pod_ports``, in the
    #: firewall only to those who should reach pods.
    ssh_port: int | None = Field(default=None, ge=0, le=65535)
    #: Each running pod's own SSH port (any user name: ``runpod pod connect`` logs in as root),
    #: which its ``runtime.ports`` reports as private port 22: ``FIRST-LAST``; ``off``: none, the
    #: SSH port only. Unset: the 100 ports after ``ssh_port``.
    ssh_pod_ports: str | None = Field(default=None, pattern=r"^(off|\d{1,5}-\d{1,5})$")
    #: A session in a pod (SSH, the console's terminal) with no byte either way for this long
    #: is ended; 0: never.
    ssh_idle_seconds: float = Field(default=3600.0, ge=0)

    @field_validator("data_dir", "volumes_dir")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        """Every path skiff hands on (a pod's volume to bwrap or Docker, a worker's home) comes
        from these two: made absolute here, once, against the directory the server starts in.
        A relative one handed on means something else to whatever reads it: bwrap, whose own
        directory differs, cannot find it, and Docker takes it for the name of a volume."""
        return None if value is None else Path(os.path.abspath(value))

    @field_validator("secret_key")
    @classmethod
    def _secret_keys_readable(cls, value: str | None) -> str | None:
        if not value:  # set but empty: unset
            return None
        parse_keys(value)
        return value

    def key_source(self) -> KeySource:
        """Where the database's secret key comes from."""
        return key_source(self.secret_key, self.data_dir)

    @field_validator(*_FLOORS)
    @classmethod
    def _off_or_workable(cls, value: int, info: ValidationInfo) -> int:
        assert info.field_name is not None
        least, off, why = _FLOORS[info.field_name]
        if 0 < value < least:
            raise ValueError(f"must be 0 {off} or at least {least}: {why}")
        return value

    def ssh_pod_port_range(self) -> range | None:
        """``ssh_pod_ports`` as ports; None: pods get no port of their own."""
        if self.ssh_port is None or self.ssh_pod_ports == "off":
            return None
        if self.ssh_pod_ports is None:
            if self.ssh_port == 0:
                return None
            return range(self.ssh_port + 1, min(self.ssh_port + 101, 65536))
        first, last = (int(p) for p in self.ssh_pod_ports.split("-"))
        return range(first, last + 1)

    @field_validator("ssh_pod_ports")
    @classmethod
    def _ports_in_order(cls, value: str | None) -> str | None:
        if value is None or value == "off":
            return value
        first, last = (int(p) for p in value.split("-"))
        if not 0 < first <= last <= 65535:
            raise ValueError("FIRST-LAST with 0 < FIRST <= LAST <= 65535")
        return value

    def sqlite_path(self) -> Path:
        named = sqlite_file_of(self.database_url)
        return named if named is not None else self.data_dir / "skiff.db"

    def volumes_path(self) -> Path:
        return self.volumes_dir if self.volumes_dir is not None else self.data_dir / "volumes"

    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        return self.own_url()

    def peer_url(self) -> str:
        """How other replicas reach this one."""
        return (self.replica_url or self.own_url()).rstrip("/")

    def own_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"
