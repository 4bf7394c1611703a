"""Every store operation, written once over a small connection interface.

``SqlStore`` implements the ``Store`` protocol with named queries (``store/queries``) run on a
``Connection``: ``execute``, ``execute_many``, ``fetch``, ``fetchrow``, ``read`` and
``read_one``. An adapter (``sqlite.py``, ``postgres.py``) only connects, migrates, maps its
errors and says how an operation runs:

- ``_reader()``: the connection reads run on outside any transaction;
- ``_write(op)``: ``op`` in one transaction (SQLite: in its writer thread, in a savepoint of
  the group commit; PostgreSQL: on a pooled connection, under ``BEGIN``/``COMMIT``);
- ``_write_one(op)``: ``op`` issues one statement (PostgreSQL runs it on the pool with no
  transaction around it, which would cost two round trips; SQLite runs it in its writer).

Where the databases differ in SQL, the difference lives in the dialect's query files
(``queries/sqlite``, ``queries/postgres``); where they differ in what an operation must do,
in a flag or a hook of the adapter (``_claims_in_one_statement``, ``_let_go``).
SQLite's connection never suspends: its operations run whole, synchronously, on the thread
that drives them, so an async operation costs it no thread hop and no event loop turn.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from skiff.domain.billing import Usage, call_usage
from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import Job, JobCounts, JobStatus
from skiff.domain.keys import ApiKey
from skiff.domain.pods import Pod, PodPlacement
from skiff.domain.public_models import PublicModel
from skiff.domain.quotas import Owned
from skiff.domain.results import StreamFull, stream_size
from skiff.domain.secrets import Secret
from skiff.domain.streams import StreamChunk
from skiff.domain.templates import Template
from skiff.domain.users import User
from skiff.domain.volumes import NetworkVolume, VolumeUsers
from skiff.domain.webhooks import new_webhook_secret
from skiff.domain.workers import Worker
from skiff.errors import Conflict
from skiff.store.base import RegistryAuthRecord, WebhookDelivery
from skiff.store.named_queries import Dialect, Query, compile_query
from skiff.store.rows import (
    LB_DEMAND_KEPT_SECONDS,
    RowReader,
    api_key_from_row,
    api_key_params,
    claim_order,
    endpoint_from_row,
    endpoint_params,
    finishes_in_progress,
    job_counts_from,
    job_from_row,
    job_params,
    network_volume_from_row,
    network_volume_params,
    pod_from_row,
    pod_params,
    pod_settings_params,
    public_model_from_row,
    public_model_params,
    registry_auth_from_row,
    registry_auth_params,
    secret_from_row,
    stream_chunk_from_row,
    template_params,
    usage_from_row,
    usage_params,
    user_from_row,
    user_params,
    webhook_delivery_from_row,
    webhook_delivery_params,
    worker_field_values,
    worker_from_row,
    worker_params,
    worker_update_sql,
)
from skiff.store.sealing import CHECK_NAME, KeySource, Sealer, SealingKeyProblem

T = TypeVar("T")


#: The named query (``queries/quotas.sql``) that counts what a user holds of each kind.
_COUNT_OWNED = {
    Owned.ENDPOINTS: "count_endpoints_of_user",
    Owned.TEMPLATES: "count_templates_of_user",
    Owned.NETWORK_VOLUMES: "count_network_volumes_of_user",
    Owned.PODS: "count_pods_of_user",
    Owned.API_KEYS: "count_api_keys_of_user",
    Owned.SECRETS: "count_secrets_of_user",
    Owned.REGISTRY_AUTHS: "count_registry_auths_of_user",
}


class Connection(Protocol):
    """Named queries (by name, or a compiled ``Query``) on one connection of a database. Rows
    are read by column name (``row["id"]``)."""

    async def execute(self, query: str | Query, /, **values: object) -> int:
        """Run a query for its effect; the number of rows it touched."""
        ...

    async def execute_many(self, query: str, values: list[Mapping[str, object]]) -> None: ...

    async def fetch(self, query: str | Query, /, **values: object) -> list[Any]: ...

    async def fetchrow(self, query: str | Query, /, **values: object) -> Any:
        """The first row, or None."""
        ...

    async def read(self, query: str | Query, make: RowReader[T], /, **values: object) -> list[T]:
        """The rows as domain objects (each column found by name once per query where the
        driver gives plain tuples)."""
        ...

    async def read_one(
        self, query: str | Query, make: RowReader[T], /, **values: object
    ) -> T | None: ...

    def ids(self, ids: list[str] | None) -> object:
        """A list of ids as the dialect's queries bind it (``:job_ids``)."""
        ...


#: An operation: a coroutine over one connection.
Op = Callable[[Connection], Coroutine[Any, Any, T]]


@functools.cache
def _worker_update(dialect: Dialect, fields: tuple[str, ...]) -> Query | None:
    """``update_worker``'s statement for these fields, compiled once per set of fields."""
    if not fields:
        return None
    return compile_query("update_worker", worker_update_sql(fields), dialect)


class SqlStore:
    """The ``Store`` operations; an adapter subclasses it with its connections."""

    #: The adapter's SQL dialect (for the statements composed at run time).
    dialect: Dialect

    #: The driver's error for a broken unique constraint, answered as a ``Conflict``.
    unique_violation: type[Exception]
    #: The driver's error for a transaction that lost to a concurrent one (``snapshot``);
    #: none by default (SQLite's one writer runs one transaction at a time).
    serialization_failure: type[Exception] | tuple[type[Exception], ...] = ()
    #: Whether ``claim_jobs`` and ``line_up_jobs`` refuse a worker that may not claim, and
    #: mark a worker that got jobs running, in their own statement.
    _claims_in_one_statement: bool

    #: Where the keys of the sealed values come from (store/sealing.py); the adapter's
    #: constructor sets it, ``open`` reads it.
    _keys: KeySource
    _sealer: Sealer | None = None

    async def open(self) -> list[str]:
        """Connect, migrate, then check and apply the keys of the sealed values; the names of
        the migrations applied. A key refused leaves the store closed."""
        applied = await self._connect()
        try:
            await self._use_keys()
        except BaseException:
            await self.close()
            raise
        return applied

    async def close(self) -> None:
        raise NotImplementedError

    # -- adapter hooks -----------------------------------------------------------------
    async def _connect(self) -> list[str]:
        """Connect and bring the schema up to date; the migrations this applied."""
        raise NotImplementedError

    def _reader(self) -> Connection:
        raise NotImplementedError

    async def _write(self, op: Op[T], *, snapshot: bool = False) -> T:
        """``op`` in one transaction; with ``snapshot``, every statement sees one snapshot."""
        raise NotImplementedError

    async def _write_one(self, op: Op[T]) -> T:
        raise NotImplementedError

    async def _let_go(
        self, c: Connection, worker_id: str, job_ids: list[str] | None, now: float
    ) -> None:
        """The worker let go of these jobs (all, with None): their stop signals go, and a
        running worker holding no job any more is idle."""
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------------------
    async def _run(self, name: str, /, **values: object) -> int:
        """One named statement, for its effect; the number of rows it touched."""
        return await self._write_one(lambda c: c.execute(name, **values))

    async def _create(self, name: str, conflict: str, /, **values: object) -> None:
        """An insert (or update) a unique constraint may refuse, as ``Conflict(conflict)``."""
        try:
            await self._run(name, **values)
        except self.unique_violation:
            raise Conflict(conflict) from None

    async def _rows(self, name: str, /, **values: object) -> list[Any]:
        return await self._reader().fetch(name, **values)

    async def _row(self, name: str, /, **values: object) -> Any | None:
        return await self._reader().fetchrow(name, **values)

    async def _ids_of(self, name: str, /, **values: object) -> list[str]:
        return [r["id"] for r in await self._rows(name, **values)]

    # -- sealed values (store/sealing.py) -----------------------------------------------
    async def _use_keys(self) -> None:
        """At open, after the migrations: the keys checked against the database's check
        value; values an earlier version left in clear sealed, and, while several keys are
        given (a rotation), every value sealed again with the first, each in one transaction:
        at every such start, so that values another replica still sealed with the old key
        meanwhile are sealed again by the last replica to restart."""
        row = await self._row("get_secret", name=CHECK_NAME)
        check = None if row is None else bytes(row["value"])
        sealer = Sealer(self._keys.keys(sealed_before=check is not None))
        if check is not None and not sealer.opens(check):
            raise SealingKeyProblem(
                "the secret key given does not open the secrets in the database (encrypted with"
                " another key): give the key they were encrypted with (SKIFF_SECRET_KEY, or the"
                " key file from your backup)"
            )
        if check is None or sealer.rotating:

            async def op(c: Connection) -> None:
                if check is None:
                    added = await c.execute("add_secret", name=CHECK_NAME, value=sealer.check())
                    if not added:  # another replica sealed them first
                        return
                    transform: Callable[[str], str] = sealer.seal
                else:
                    await c.execute("replace_secret", name=CHECK_NAME, value=sealer.check())
                    transform = sealer.reseal

                def again(rows: list[Any]) -> list[Mapping[str, object]]:
                    return [{"id": r["id"], "value": transform(r["value"])} for r in rows]

                passwords = await c.fetch("sealed_registry_passwords")
                await c.execute_many("reseal_registry_password", again(passwords))
                s3_configs = await c.fetch("sealed_s3_configs")
                await c.execute_many("reseal_s3_config", again(s3_configs))
                webhook_secrets = await c.fetch("sealed_webhook_secrets")
                await c.execute_many("reseal_webhook_secret", again(webhook_secrets))
                secrets = await c.fetch("sealed_secrets")
                await c.execute_many("reseal_secret", again(secrets))

            await self._write(op)
        self._sealer = sealer

    @property
    def _sealed(self) -> Sealer:
        assert self._sealer is not None, "store is not open"
        return self._sealer

    def _open_s3_configs(self, jobs: list[Job]) -> list[Job]:
        """Jobs with their ``s3Config`` in clear: a claimed job's, for the worker that takes it,
        and ``get_job``'s. The other reads (lists, state changes) leave it sealed, as stored:
        nothing shows it, and the hot path is spared the decryption."""
        for job in jobs:
            if job.s3_config_json is not None:
                job.s3_config_json = self._sealed.open(job.s3_config_json)
        return jobs

    async def count_owned(self, kind: Owned, user_id: str) -> int:
        row = await self._row(_COUNT_OWNED[kind], user_id=user_id)
        return int(row["n"]) if row is not None else 0

    # -- secrets -----------------------------------------------------------------------
    async def secret(self, name: str) -> bytes:
        # Added unless there, then read: of two replicas creating it at once, both read the
        # one that was stored.
        async def op(c: Connection) -> bytes:
            await c.execute("add_secret", name=name, value=secrets.token_bytes(32))
            return bytes((await c.fetchrow("get_secret", name=name))["value"])

        return await self._write(op)

    # -- users and keys ----------------------------------------------------------------
    async def create_user(self, user: User) -> User:
        conflict = f"a user named {user.name!r} already exists"
        await self._create("create_user", conflict, **user_params(user))
        return user

    async def get_user_by_name(self, name: str) -> User | None:
        row = await self._row("get_user_by_name", name=name)
        return user_from_row(row) if row else None

    async def add_api_key(self, key: ApiKey, key_hash: str) -> ApiKey:
        conflict = "this API key is already registered"
        await self._create("add_api_key", conflict, **api_key_params(key, key_hash))
        return key

    async def find_api_key(self, key_hash: str) -> tuple[ApiKey, User] | None:
        row = await self._row("find_api_key", key_hash=key_hash)
        return api_key_from_row(row) if row else None

    async def list_api_keys(self) -> list[tuple[ApiKey, User]]:
        return [api_key_from_row(r) for r in await self._rows("list_api_keys")]

    async def revoke_api_key(self, key_id: str, now: float) -> bool:
        return await self._run("revoke_api_key", now=now, id=key_id) > 0

    async def list_user_api_keys(self, user_id: str) -> list[ApiKey]:
        rows = await self._rows("list_user_api_keys", user_id=user_id)
        return [api_key_from_row(r)[0] for r in rows]

    async def revoke_user_api_key(self, user_id: str, key_id: str, now: float) -> bool:
        found = await self._run("revoke_user_api_key", now=now, id=key_id, user_id=user_id)
        return found > 0

    async def get_user(self, user_id: str) -> User | None:
        row = await self._row("get_user", id=user_id)
        return user_from_row(row) if row else None

    async def list_users(self) -> list[User]:
        return [user_from_row(r) for r in await self._rows("list_users")]

    async def set_user_disabled(self, user_id: str, disabled_at: float | None) -> bool:
        return await self._run("set_user_disabled", id=user_id, disabled_at=disabled_at) > 0

    async def disabled_user_ids(self) -> set[str]:
        return {r["id"] for r in await self._rows("disabled_user_ids")}

    # -- registry auths ----------------------------------------------------------------
    async def create_registry_auth(self, auth: RegistryAuthRecord) -> RegistryAuthRecord:
        conflict = f"a container registry auth named {auth.name!r} already exists"
        sealed = replace(auth, password=self._sealed.seal(auth.password))
        await self._create("create_registry_auth", conflict, **registry_auth_params(sealed))
        return auth

    def _registry_auth(self, row: Any) -> RegistryAuthRecord:
        auth = registry_auth_from_row(row)
        return replace(auth, password=self._sealed.open(auth.password))

    async def list_registry_auths(self, user_id: str) -> list[RegistryAuthRecord]:
        rows = await self._rows("list_registry_auths", user_id=user_id)
        return [self._registry_auth(r) for r in rows]

    async def get_registry_auth(self, user_id: str, auth_id: str) -> RegistryAuthRecord | None:
        row = await self._row("get_registry_auth", user_id=user_id, id=auth_id)
        return self._registry_auth(row) if row else None

    async def delete_registry_auth(self, user_id: str, auth_id: str) -> bool:
        return await self._run("delete_registry_auth", user_id=user_id, id=auth_id) > 0

    async def update_registry_auth_credentials(
        self, user_id: str, auth_id: str, username: str, password: str
    ) -> bool:
        changed = await self._run(
            "update_registry_auth_credentials",
            user_id=user_id,
            id=auth_id,
            username=username,
            password=self._sealed.seal(password),
        )
        return changed > 0

    async def get_pub_key(self, user_id: str) -> str | None:
        row = await self._row("get_user_pub_key", user_id=user_id)
        return str(row["pub_key"]) if row else None

    async def set_pub_key(self, user_id: str, pub_key: str) -> None:
        await self._run("set_user_pub_key", user_id=user_id, pub_key=pub_key)

    # -- users' secrets ----------------------------------------------------------------
    async def create_user_secret(self, user_id: str, secret: Secret, value: str) -> Secret:
        conflict = f"a secret named {secret.name!r} already exists"
        await self._create(
            "create_user_secret",
            conflict,
            id=secret.id,
            user_id=user_id,
            name=secret.name,
            value=self._sealed.seal(value),
            created_at=secret.created_at,
        )
        return secret

    async def list_user_secrets(self, user_id: str) -> list[Secret]:
        return [secret_from_row(r) for r in await self._rows("list_user_secrets", user_id=user_id)]

    async def get_user_secret(self, user_id: str, secret_id: str) -> Secret | None:
        row = await self._row("get_user_secret", user_id=user_id, id=secret_id)
        return secret_from_row(row) if row else None

    async def update_user_secret(
        self, user_id: str, secret_id: str, value: str, now: float
    ) -> Secret | None:
        sealed = self._sealed.seal(value)
        params = {"user_id": user_id, "id": secret_id, "value": sealed, "now": now}
        row = await self._write_one(lambda c: c.fetchrow("update_user_secret", **params))
        return secret_from_row(row) if row else None

    async def delete_user_secret(self, user_id: str, secret_id: str) -> bool:
        return await self._run("delete_user_secret", user_id=user_id, id=secret_id) > 0

    async def user_secret_values(self, user_id: str) -> dict[str, str]:
        rows = await self._rows("user_secret_values", user_id=user_id)
        return {r["name"]: self._sealed.open(r["value"]) for r in rows}

    # -- templates ---------------------------------------------------------------------
    async def create_template(self, user_id: str, template: Template, now: float) -> Template:
        conflict = f"a template named {template.name!r} already exists"
        params = template_params(user_id, template)
        await self._create("create_template", conflict, **params, created_at=now)
        return template

    async def list_templates(self, user_id: str) -> list[Template]:
        rows = await self._rows("list_templates", user_id=user_id)
        return [Template.model_validate_json(r["spec"]) for r in rows]

    async def get_template(self, user_id: str, template_id: str) -> Template | None:
        row = await self._row("get_template", user_id=user_id, id=template_id)
        return Template.model_validate_json(row["spec"]) if row else None

    async def update_template(self, user_id: str, template: Template) -> Template:
        conflict = f"a template named {template.name!r} already exists"
        await self._create("update_template", conflict, **template_params(user_id, template))
        return template

    async def delete_template(self, user_id: str, template_id: str) -> bool:
        return await self._run("delete_template", user_id=user_id, id=template_id) > 0

    # -- network volumes ---------------------------------------------------------------
    async def create_network_volume(self, user_id: str, volume: NetworkVolume) -> NetworkVolume:
        await self._run("create_network_volume", **network_volume_params(user_id, volume))
        return volume

    async def list_network_volumes(self, user_id: str) -> list[NetworkVolume]:
        rows = await self._rows("list_network_volumes", user_id=user_id)
        return [network_volume_from_row(r) for r in rows]

    async def all_network_volumes(self) -> list[tuple[str, NetworkVolume]]:
        rows = await self._rows("list_all_network_volumes")
        return [(r["user_id"], network_volume_from_row(r)) for r in rows]

    async def get_network_volume(self, user_id: str, volume_id: str) -> NetworkVolume | None:
        row = await self._row("get_network_volume", user_id=user_id, id=volume_id)
        return network_volume_from_row(row) if row else None

    async def update_network_volume(
        self, user_id: str, volume_id: str, name: str, size: int
    ) -> NetworkVolume | None:
        async def op(c: Connection) -> NetworkVolume | None:
            row = await c.fetchrow(
                "update_network_volume", name=name, size_gb=size, user_id=user_id, id=volume_id
            )
            if row is None:  # a shrink (left as it is), or no such volume
                row = await c.fetchrow("get_network_volume", user_id=user_id, id=volume_id)
            return network_volume_from_row(row) if row else None

        return await self._write(op)

    async def delete_network_volume(self, user_id: str, volume_id: str) -> VolumeUsers | None:
        # One transaction: with SQLite's one writer, nothing can name the volume between the
        # check and the delete.
        async def op(c: Connection) -> VolumeUsers | None:
            named = {"user_id": user_id, "volume_id": volume_id}
            endpoints = await c.fetch("endpoints_using_network_volume", **named)
            pods = await c.fetch("pods_using_network_volume", **named)
            users = VolumeUsers(
                endpoints=tuple(r["id"] for r in endpoints), pods=tuple(r["id"] for r in pods)
            )
            if users:
                return users
            deleted = await c.execute("delete_network_volume", user_id=user_id, id=volume_id)
            return VolumeUsers() if deleted else None

        return await self._write(op)

    async def endpoints_using_network_volume(self, user_id: str, volume_id: str) -> list[str]:
        named = {"user_id": user_id, "volume_id": volume_id}
        return await self._ids_of("endpoints_using_network_volume", **named)

    # -- usage -------------------------------------------------------------------------
    async def open_usage(self, usage: Usage, subject: str, last_seen: float) -> bool:
        return await self._run("open_usage", **usage_params(usage, subject, last_seen)) > 0

    async def open_usages(self) -> list[tuple[str, Usage, float]]:
        rows = await self._rows("open_usages")
        return [(r["subject"], usage_from_row(r), r["last_seen"]) for r in rows]

    async def end_usage(self, subject: str, ended_at: float, gap: float) -> bool:
        return await self._run("end_usage", subject=subject, ended_at=ended_at, gap=gap) > 0

    async def touch_usages(self, now: float) -> None:
        await self._run("touch_usages", now=now)

    async def end_unseen_usages(self, before: float) -> int:
        return await self._run("end_unseen_usages", before=before)

    async def usages_of(self, user_id: str, since: float, until: float) -> list[Usage]:
        rows = await self._rows("usages_of_user", user_id=user_id, since=since, until=until)
        return [usage_from_row(r) for r in rows]

    # -- pods --------------------------------------------------------------------------
    async def create_pod(self, pod: Pod) -> Pod:
        await self._run("create_pod", **pod_params(pod))
        return pod

    async def list_pods(self, user_id: str | None) -> list[Pod]:
        if user_id is None:
            rows = await self._rows("list_all_pods")
        else:
            rows = await self._rows("list_pods_of_user", user_id=user_id)
        return [pod_from_row(r) for r in rows]

    async def get_pod(self, user_id: str, pod_id: str) -> Pod | None:
        row = await self._row("get_pod", user_id=user_id, id=pod_id)
        return pod_from_row(row) if row else None

    async def find_pod(self, pod_id: str) -> Pod | None:
        row = await self._row("find_pod", id=pod_id)
        return pod_from_row(row) if row else None

    async def update_pod_settings(self, pod: Pod) -> Pod | None:
        params = pod_settings_params(pod)
        row = await self._write_one(lambda c: c.fetchrow("update_pod_settings", **params))
        return pod_from_row(row) if row else None

    async def stop_running_pod(self, pod_id: str, now: float) -> Pod | None:
        params = {"id": pod_id, "now": now}
        row = await self._write_one(lambda c: c.fetchrow("stop_running_pod", **params))
        return pod_from_row(row) if row else None

    async def set_pod_placement(
        self, pod_id: str, placement: PodPlacement, last_started_at: float | None
    ) -> Pod | None:
        params = {
            "id": pod_id,
            "placement": placement.model_dump_json(),
            "last_started_at": last_started_at,
        }
        row = await self._write_one(lambda c: c.fetchrow("set_pod_placement", **params))
        return pod_from_row(row) if row else None

    async def delete_pod(self, user_id: str, pod_id: str) -> bool:
        return await self._run("delete_pod", user_id=user_id, id=pod_id) > 0

    # -- endpoints ---------------------------------------------------------------------
    async def create_endpoint(self, endpoint: Endpoint) -> Endpoint:
        await self._run("create_endpoint", **endpoint_params(endpoint))
        return endpoint

    async def list_endpoints(self, user_id: str | None) -> list[Endpoint]:
        if user_id is None:
            rows = await self._rows("list_endpoints")
        else:
            rows = await self._rows("list_endpoints_of_user", user_id=user_id)
        return [endpoint_from_row(r) for r in rows]

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        row = await self._row("get_endpoint", id=endpoint_id)
        return endpoint_from_row(row) if row else None

    async def update_endpoint(
        self, endpoint_id: str, spec: EndpointSpec, bump_version: bool
    ) -> Endpoint | None:
        params = {
            "spec": spec.model_dump_json(),
            "template_id": spec.templateId,
            "bump": int(bump_version),
            "id": endpoint_id,
        }
        row = await self._write_one(lambda c: c.fetchrow("update_endpoint", **params))
        return endpoint_from_row(row) if row else None

    async def bump_endpoint_versions(self, template_id: str) -> list[str]:
        rows = await self._write_one(
            lambda c: c.fetch("bump_endpoint_versions", template_id=template_id)
        )
        return [r["id"] for r in rows]

    async def delete_endpoint(self, endpoint_id: str, now: float) -> bool:
        async def op(c: Connection) -> bool:
            # Callers' runs cut off by the delete, billed while their worker and model rows
            # still say at what rate.
            for job in await c.read(
                "running_calls_of_endpoint", job_from_row, endpoint_id=endpoint_id
            ):
                await self._bill_call(c, job, now)
            await c.execute("delete_stream_chunks_of_endpoint", endpoint_id=endpoint_id)
            await c.execute("delete_jobs_of_endpoint", endpoint_id=endpoint_id)
            await c.execute("drop_lineups_of_endpoint", endpoint_id=endpoint_id)
            await c.execute("delete_workers_of_endpoint", endpoint_id=endpoint_id)
            await c.execute("unpublish_endpoint", endpoint_id=endpoint_id)
            return await c.execute("delete_endpoint", endpoint_id=endpoint_id) > 0

        return await self._write(op)

    async def endpoints_using_template(self, template_id: str) -> list[str]:
        return await self._ids_of("endpoints_using_template", template_id=template_id)

    # -- jobs --------------------------------------------------------------------------
    async def insert_job(self, job: Job, owner_id: str | None = None) -> None:
        params = job_params(job)
        params["owner_id"] = owner_id
        if job.s3_config_json is not None:
            params["s3_config"] = self._sealed.seal(job.s3_config_json)
        await self._run("insert_job", **params)

    async def get_job(self, endpoint_id: str, job_id: str) -> Job | None:
        job = await self._reader().read_one(
            "get_job", job_from_row, id=job_id, endpoint_id=endpoint_id
        )
        return None if job is None else self._open_s3_configs([job])[0]

    async def list_jobs(self, endpoint_id: str, limit: int, before_seq: int | None) -> list[Job]:
        c = self._reader()
        if before_seq is None:
            return await c.read("list_jobs", job_from_row, endpoint_id=endpoint_id, limit=limit)
        return await c.read(
            "list_jobs_before",
            job_from_row,
            endpoint_id=endpoint_id,
            before_seq=before_seq,
            limit=limit,
        )

    async def set_job_ttl(self, endpoint_id: str, job_id: str, ttl_ms: int) -> Job | None:
        params = {"ttl_ms": ttl_ms, "id": job_id, "endpoint_id": endpoint_id}
        return await self._write_one(lambda c: c.read_one("set_job_ttl", job_from_row, **params))

    async def _claim(
        self,
        c: Connection,
        query: str,
        endpoint_id: str,
        worker_id: str,
        limit: int,
        now: float,
        lease_until: float,
    ) -> list[Job]:
        """Queued jobs for a worker that may claim (``claim_jobs``, ``line_up_jobs``), in
        claim order: an UPDATE ... RETURNING gives its rows in no order."""
        if not self._claims_in_one_statement and await c.fetchrow(
            "worker_refuses_claims", worker_id=worker_id
        ):
            return []
        jobs = await c.read(
            query,
            job_from_row,
            worker_id=worker_id,
            now=now,
            lease_until=lease_until,
            endpoint_id=endpoint_id,
            limit=limit,
        )
        jobs.sort(key=claim_order)
        return self._open_s3_configs(jobs)

    async def claim_jobs(
        self, endpoint_id: str, worker_id: str, limit: int, now: float, lease_until: float
    ) -> list[Job]:
        async def op(c: Connection) -> list[Job]:
            args = (endpoint_id, worker_id, limit, now, lease_until)
            jobs = await self._claim(c, "claim_jobs", *args)
            if jobs and not self._claims_in_one_statement:
                await c.execute("mark_worker_running", worker_id=worker_id)
            return jobs

        # One statement where the claim is one (PostgreSQL): no transaction around it.
        if self._claims_in_one_statement:
            return await self._write_one(op)
        # Elsewhere (SQLite) most takes arrive at an empty queue, and a read on the reader's
        # connection costs a fraction of a transaction through the writer. A job queued after
        # the read wakes its caller, which listens before it claims (services/dispatch.py).
        if await self._row("claimable_job", endpoint_id=endpoint_id, now=now) is None:
            return []
        return await self._write(op)

    async def line_up_jobs(
        self, endpoint_id: str, worker_id: str, limit: int, now: float, lease_until: float
    ) -> list[Job]:
        async def op(c: Connection) -> list[Job]:
            args = (endpoint_id, worker_id, limit, now, lease_until)
            jobs = await self._claim(c, "line_up_jobs", *args)
            top = (await c.fetchrow("lineup_top", worker_id=worker_id))["top"]
            await c.execute_many(
                "add_to_lineup",
                [
                    {"worker_id": worker_id, "pos": top + 1 + i, "job_id": job.id}
                    for i, job in enumerate(jobs)
                ],
            )
            return jobs

        return await self._write(op)

    async def record_progress(self, job_id: str, worker_id: str, output_json: str | None) -> bool:
        touched = await self._run(
            "record_progress", output=output_json, id=job_id, worker_id=worker_id
        )
        return touched > 0

    async def finish_job(
        self,
        job_id: str,
        worker_id: str | None,
        status: JobStatus,
        output_json: str | None,
        error: str | None,
        now: float,
    ) -> Job | None:
        if not finishes_in_progress(status):
            return None
        values = {
            "status": status.value,
            "output": output_json,
            "error": error,
            "now": now,
            "id": job_id,
            "worker_id": worker_id,
        }

        async def op(c: Connection) -> Job | None:
            job = await c.read_one("finish_job", job_from_row, **values)
            if job is None and worker_id is not None:
                if await c.fetchrow("is_lined_up", worker_id=worker_id, job_id=job_id) is None:
                    return None
                await self._advance_lineup(c, worker_id, now, through=job_id)
                job = await c.read_one("finish_job", job_from_row, **values)
            if job is None:
                return None
            await self._after_final(c, [job])
            if worker_id is not None:
                # Before the let-go: a worker that starts its next job is not idle.
                job.line_broken = await self._advance_lineup(c, worker_id, now)
                await self._let_go(c, worker_id, [job_id], now)
            return job

        return await self._write(op)

    async def cancel_job(self, endpoint_id: str, job_id: str, now: float) -> Job | None:
        async def op(c: Connection) -> Job | None:
            before = await c.fetchrow("job_before_cancel", id=job_id, endpoint_id=endpoint_id)
            if before is None:
                return None
            job = await c.read_one("cancel_job", job_from_row, now=now, id=job_id)
            if job is None:
                return await c.read_one("get_job_by_id", job_from_row, id=job_id)
            if before["status"] == JobStatus.IN_PROGRESS.value:
                await self._signal_stop(c, [(before["worker_id"], job_id)], "cancelled", now)
                job.stop_pending = True
            await self._after_final(c, [job])
            return job

        return await self._write(op)

    async def retry_job(self, endpoint_id: str, job_id: str) -> Job | None:
        async def op(c: Connection) -> Job | None:
            job = await c.read_one("retry_job", job_from_row, id=job_id, endpoint_id=endpoint_id)
            if job is not None:
                await c.execute("delete_stream_chunks", job_id=job_id)
                return job
            return await c.read_one("get_job", job_from_row, id=job_id, endpoint_id=endpoint_id)

        return await self._write(op)

    async def purge_queue(self, endpoint_id: str) -> int:
        return await self._run("purge_queue", endpoint_id=endpoint_id)

    async def time_out_jobs(self, now: float) -> list[Job]:
        async def op(c: Connection) -> list[Job]:
            jobs = await c.read("time_out_jobs", job_from_row, now=now)
            await self._signal_stop(c, [(j.worker_id, j.id) for j in jobs], "timed out", now)
            await self._after_final(c, jobs)
            return jobs

        return await self._write(op)

    async def expire_jobs(self, now: float, limit: int) -> list[Job]:
        async def op(c: Connection) -> list[Job]:
            jobs = await c.read("expire_jobs", job_from_row, now=now, limit=limit)
            running = [j for j in jobs if j.status is JobStatus.IN_PROGRESS]
            await self._signal_stop(c, [(j.worker_id, j.id) for j in running], "ttl expired", now)
            for job in running:
                # Removed while it ran, never final: what it ran is billed all the same.
                if job.caller_id is not None:
                    await self._bill_call(c, job, now)
            if jobs:
                ids = c.ids([j.id for j in jobs])
                await c.execute("delete_stream_chunks_of_jobs", job_ids=ids)
            return jobs

        return await self._write(op)

    async def job_counts(self, endpoint_id: str) -> JobCounts:
        counts = job_counts_from(await self._rows("job_counts", endpoint_id=endpoint_id))
        if not counts.in_queue_normal:
            return counts
        oldest = await self._row("oldest_queued_at", endpoint_id=endpoint_id)
        return replace(counts, oldest_queued_at=oldest["submitted_at"] if oldest else None)

    async def job_bytes_of(self, user_id: str) -> int:
        row = await self._row("job_bytes_of_user", user_id=user_id)
        return int(row["bytes"]) if row else 0

    async def fold_job_counts(self) -> int:
        # One snapshot for the sum and the delete: under PostgreSQL's READ COMMITTED each
        # statement sees what committed before it, so a delta (id <= top, taken before a commit
        # still in flight) committed between the two would be deleted without being counted. A
        # delta outside the snapshot is left for the next fold.
        async def op(c: Connection) -> int:
            folded = 0
            top = (await c.fetchrow("last_job_count_delta"))["top"]
            if top is not None:
                await c.execute("fold_job_counts", top=top)
                folded += await c.execute("delete_folded_job_count_deltas", top=top)
                await c.execute("delete_empty_job_counts")
            top = (await c.fetchrow("last_job_byte_delta"))["top"]
            if top is not None:
                await c.execute("fold_job_bytes", top=top)
                folded += await c.execute("delete_folded_job_byte_deltas", top=top)
                await c.execute("delete_empty_job_bytes")
            return folded

        try:
            return await self._write(op, snapshot=True)
        except self.serialization_failure:
            # Another replica folded the same deltas at the same moment (a change of leader):
            # its fold counted them, this one rolled back whole.
            return 0

    async def append_stream_chunks(
        self,
        job_id: str,
        worker_id: str,
        chunks: list[tuple[str, str | None]],
        max_size: int | None = None,
    ) -> bool:
        size = stream_size(chunks)

        async def op(c: Connection) -> bool:
            held = await c.fetchrow("job_taken_by", job_id=job_id, worker_id=worker_id)
            if not held:
                return False
            # Counted in the job's row under its lock (PostgreSQL's FOR UPDATE, SQLite's one
            # writer), so chunks posted at once cannot pass the cap together.
            if max_size is not None and held["stream_size"] + size > max_size:
                raise StreamFull(job_id)
            await c.execute("add_stream_size", job_id=job_id, size=size)
            last: int = (await c.fetchrow("last_stream_seq", job_id=job_id))["seq"]
            await c.execute_many(
                "add_stream_chunk",
                [
                    {"job_id": job_id, "seq": last + i, "output": out, "metrics": met}
                    for i, (out, met) in enumerate(chunks, start=1)
                ],
            )
            return True

        return await self._write(op)

    async def read_new_stream_chunks(self, job_id: str) -> list[StreamChunk]:
        async def op(c: Connection) -> list[StreamChunk]:
            job = await c.fetchrow("job_stream_cursor", job_id=job_id)
            if job is None:
                return []
            cursor = job["stream_cursor"]
            rows = await c.fetch("stream_chunks_after", job_id=job_id, cursor=cursor)
            if rows:
                await c.execute("set_stream_cursor", cursor=rows[-1]["seq"], job_id=job_id)
            return [stream_chunk_from_row(r) for r in rows]

        return await self._write(op)

    async def job_held_by(self, job_id: str, worker_id: str, lined_up: bool = False) -> bool:
        named = {"job_id": job_id, "worker_id": worker_id}
        if await self._row("job_taken_by", **named) is not None:
            return True
        return lined_up and await self._row("is_lined_up", **named) is not None

    async def stream_chunks_after(self, job_id: str, after: int) -> list[StreamChunk]:
        rows = await self._rows("stream_chunks_after", job_id=job_id, cursor=after)
        return [stream_chunk_from_row(r) for r in rows]

    async def take_stop_signals(self, worker_id: str, now: float) -> list[str]:
        named = {"worker_id": worker_id}
        rows = await self._write_one(lambda c: c.fetch("take_stop_signals", **named))
        ids = sorted(r["job_id"] for r in rows)
        if ids:
            # Told to stop the job it ran, the worker starts its next lined-up one at once.
            async def op(c: Connection) -> None:
                if await c.fetchrow("worker_runs_a_job", **named) is None:
                    await self._advance_lineup(c, worker_id, now, told=frozenset(ids))

            await self._write(op)
        return ids

    async def lineup_broken(self, worker_id: str) -> bool:
        return await self._row("lineup_broken", worker_id=worker_id) is not None

    async def let_go_of_jobs(self, worker_id: str, job_ids: list[str] | None, now: float) -> None:
        async def op(c: Connection) -> None:
            await self._let_go(c, worker_id, job_ids, now)

        await self._write(op)

    async def overdue_stop_workers(self, signalled_before: float) -> list[str]:
        rows = await self._rows("overdue_stop_workers", signalled_before=signalled_before)
        return [r["worker_id"] for r in rows]

    async def renew_leases(self, worker_id: str, job_ids: list[str], lease_until: float) -> None:
        if not job_ids:
            return

        async def op(c: Connection) -> None:
            renewed = await c.execute(
                "renew_leases",
                lease_until=lease_until,
                job_ids=c.ids(job_ids),
                worker_id=worker_id,
            )
            if not renewed:
                # One read of the worker's line-up (a few rows), not one per id it named.
                lined_up = await c.fetch("lineup_of_worker", worker_id=worker_id)
                renewed = int(not {r["job_id"] for r in lined_up}.isdisjoint(job_ids))
            if renewed:
                await c.execute("renew_lineup_leases", lease_until=lease_until, worker_id=worker_id)

        await self._write(op)

    async def release_jobs(
        self,
        worker_id: str | None,
        now: float,
        max_attempts: int,
        reason: str,
        alive_until: float | None = None,
        *,
        counted: bool = True,
    ) -> list[Job]:
        if worker_id is None and not counted:
            raise ValueError("only a worker's jobs are released uncounted")

        async def op(c: Connection) -> list[Job]:
            # Callers' jobs as they run, before the release: the attempt of each requeued is
            # billed up to now, or to when its worker was last seen where that is earlier.
            if worker_id is None:
                calls = await c.read("running_calls_of_lapsed_leases", job_from_row, now=now)
            else:
                calls = await c.read("running_calls_of_worker", job_from_row, worker_id=worker_id)
            unlined = await self._unline(c, worker_id, now)
            if worker_id is None:
                failed = await c.read(
                    "fail_jobs_of_lapsed_leases",
                    job_from_row,
                    reason=reason,
                    now=now,
                    max_attempts=max_attempts,
                )
                requeued = await c.read("requeue_jobs_of_lapsed_leases", job_from_row, now=now)
            else:
                failed = (
                    await c.read(
                        "fail_jobs_of_worker",
                        job_from_row,
                        reason=reason,
                        now=now,
                        worker_id=worker_id,
                        max_attempts=max_attempts,
                    )
                    if counted
                    else []
                )
                requeued = await c.read(
                    "requeue_jobs_of_worker",
                    job_from_row,
                    worker_id=worker_id,
                    refund=0 if counted else 1,
                )
            if requeued:
                ids = c.ids([j.id for j in requeued])
                await c.execute("delete_stream_chunks_of_jobs", job_ids=ids)
                again = {j.id for j in requeued}
                ended = now if alive_until is None else min(now, alive_until)
                for job in calls:
                    if job.id in again:
                        await self._bill_call(c, job, ended)
            await self._after_final(c, failed)
            return failed + requeued + unlined

        return await self._write(op)

    async def _after_final(self, c: Connection, jobs: list[Job]) -> None:
        """In the transaction that made jobs final: bill each public model's caller its job's
        last run and store their webhook deliveries, so a crash right after can lose neither
        (the sender attempts the deliveries later)."""
        for job in jobs:
            if job.finished_at is None:
                continue
            if job.caller_id is not None:
                await self._bill_call(c, job, job.finished_at)
            if job.webhook is None:
                continue
            # Signed with the secret of whoever submitted the job: a public model's caller gets
            # its own, never the model owner's (which would let any caller have messages of its
            # choosing signed for the owner's receivers).
            signer = job.caller_id
            if signer is None:
                owner = await c.fetchrow("endpoint_owner", endpoint_id=job.endpoint_id)
                if owner is None:
                    continue
                signer = owner["user_id"]
            params = webhook_delivery_params(job, signer, job.finished_at)
            await c.execute("add_webhook_delivery", **params)

    @staticmethod
    async def _bill_call(c: Connection, job: Job, ended_at: float) -> None:
        """In the transaction that ended a run of a public model's caller's job (made it final,
        requeued it, removed it): the run billed to the caller (``domain.billing.call_usage``),
        so that no crash separates the two. A run recorded again (the same id) is kept once."""
        if job.started_at is None:
            return
        rate = await c.fetchrow("call_rate", endpoint_id=job.endpoint_id, worker_id=job.worker_id)
        if rate is None:
            return  # its endpoint is gone: nothing to bill the run at
        usage = call_usage(
            job,
            EndpointSpec.model_validate_json(rate["spec"]),
            rate["model_id"] or job.endpoint_id,
            rate["gpu"],
            rate["gpu_ids"],
            ended_at,
        )
        if usage is not None:
            await c.execute("record_call_usage", **usage_params(usage, f"call:{job.id}", ended_at))

    @staticmethod
    async def _signal_stop(
        c: Connection, jobs: list[tuple[str | None, str]], reason: str, now: float
    ) -> None:
        """Queue job-stop signals for (worker id, job id) pairs; the row may be gone by then."""
        await c.execute_many(
            "add_stop_signal",
            [
                {"worker_id": worker, "job_id": job_id, "reason": reason, "now": now}
                for worker, job_id in jobs
                if worker is not None
            ],
        )

    async def _advance_lineup(
        self,
        c: Connection,
        worker_id: str,
        now: float,
        through: str | None = None,
        told: frozenset[str] = frozenset(),
    ) -> bool:
        """The worker's running job ended: start the next job lined up on it. When that job is
        no longer wanted (cancelled, purged, expired), the worker, which has it queued, will
        start it on its own: nothing is started, its row stays, and True is returned: the line
        is broken, and the worker must be ended before it is answered (services/lineup.py). It
        gets a stop signal too, for a worker that cannot be ended; one whose stop signal the
        worker was just given (``told``) is passed over: the worker is past it. With
        ``through``, a result for that lined-up job arrived: every job up to it started unseen,
        and it is started too (to be finished); if it is no longer wanted, the worker has moved
        on past it, so the job after it starts."""
        # The last row the worker is past.
        passed: int | None = None
        rows = await c.fetch("lineup_of_worker", worker_id=worker_id)
        if not rows:
            return False  # no line-up: nothing to start, nothing to drop
        for row in rows:
            job_id = row["job_id"]
            started = await c.fetchrow(
                "start_lined_up_job", id=job_id, worker_id=worker_id, now=now
            )
            if job_id == through:
                through = None
                if started is None:
                    # The worker ran it already: no stop signal; the next one is what it runs.
                    passed = row["pos"]
                    continue
            elif started is None:
                await self._signal_stop(c, [(worker_id, job_id)], "no longer wanted", now)
                if through is None and job_id not in told:
                    if passed is not None:
                        await c.execute("drop_lineup_through", worker_id=worker_id, pos=passed)
                    return True
                passed = row["pos"]
                continue
            elif through is not None:
                passed = row["pos"]
                continue
            await c.execute("drop_lineup_through", worker_id=worker_id, pos=row["pos"])
            return False
        await c.execute("drop_lineup", worker_id=worker_id)
        return False

    @staticmethod
    async def _unline(c: Connection, worker_id: str | None, now: float) -> list[Job]:
        """Lined-up jobs of a lost worker (or whose lease lapsed) go back to the queue
        untouched."""
        if worker_id is None:
            jobs = await c.read("unline_jobs_of_lapsed_leases", job_from_row, now=now)
            if jobs:
                await c.execute("drop_lineups_of_unlined")
            return jobs
        await c.execute("drop_lineup", worker_id=worker_id)
        return await c.read("unline_jobs_of_worker", job_from_row, worker_id=worker_id)

    # -- webhooks ----------------------------------------------------------------------
    async def webhook_secret(self, user_id: str, rotate: bool = False) -> str:
        async def op(c: Connection) -> str:
            row = await c.fetchrow("webhook_secret_of_user", user_id=user_id)
            if row is None:
                raise KeyError(user_id)
            if row["webhook_secret"] and not rotate:
                return self._sealed.open(row["webhook_secret"])
            secret = new_webhook_secret()
            sealed = self._sealed.seal(secret)
            await c.execute("set_webhook_secret", secret=sealed, user_id=user_id)
            return secret

        return await self._write(op)

    async def due_webhook_deliveries(self, now: float, limit: int) -> list[WebhookDelivery]:
        rows = await self._rows("due_webhook_deliveries", now=now, limit=limit)
        return [self._webhook_delivery(r) for r in rows]

    def _webhook_delivery(self, row: Any) -> WebhookDelivery:
        delivery = webhook_delivery_from_row(row)
        if not delivery.secret:
            return delivery
        return replace(delivery, secret=self._sealed.open(delivery.secret))

    async def prune_webhook_deliveries(self, before: float, limit: int) -> int:
        return await self._run("prune_ended_webhook_deliveries", before=before, limit=limit)

    async def record_webhook_attempt(
        self,
        delivery_id: str,
        status: str,
        error: str | None,
        now: float,
        next_attempt_at: float | None,
    ) -> None:
        await self._run(
            "record_webhook_attempt",
            status=status,
            error=error,
            next_attempt_at=next_attempt_at,
            now=now,
            id=delivery_id,
        )

    # -- workers -----------------------------------------------------------------------
    async def save_worker(self, worker: Worker) -> None:
        await self._run("save_worker", **worker_params(worker))

    async def add_worker(self, worker: Worker) -> Worker:
        params = worker_params(worker)

        async def op(c: Connection) -> Worker:
            await c.execute("add_worker", **params)
            added = await c.read_one("get_worker", worker_from_row, id=worker.id)
            assert added is not None
            return added

        return await self._write(op)

    async def update_worker(self, worker_id: str, fields: Mapping[str, object]) -> Worker | None:
        query = _worker_update(self.dialect, tuple(fields))
        if query is None:
            return await self.get_worker(worker_id)
        values = {**worker_field_values(fields), "id": worker_id}
        return await self._write_one(lambda c: c.read_one(query, worker_from_row, **values))

    async def touch_worker(self, worker_id: str, endpoint_id: str, now: float) -> Worker | None:
        return await self._write_one(
            lambda c: c.read_one(
                "touch_worker", worker_from_row, now=now, id=worker_id, endpoint_id=endpoint_id
            )
        )

    async def set_lb_demand(
        self, replica_id: str, endpoint_id: str, in_flight: int, waiting: int, now: float
    ) -> None:
        async def op(c: Connection) -> None:
            named = {"replica_id": replica_id, "endpoint_id": endpoint_id}
            if in_flight or waiting:
                await c.execute(
                    "set_lb_demand", **named, in_flight=in_flight, waiting=waiting, now=now
                )
            else:
                await c.execute("clear_lb_demand", **named)
            await c.execute("drop_stale_lb_demand", before=now - LB_DEMAND_KEPT_SECONDS)

        await self._write(op)

    async def lb_demand_of_others(
        self, replica_id: str, since: float
    ) -> dict[str, tuple[int, int]]:
        rows = await self._rows("lb_demand_of_others", replica_id=replica_id, since=since)
        return {r["endpoint_id"]: (int(r["in_flight"]), int(r["waiting"])) for r in rows}

    async def publish_model(self, model: PublicModel) -> bool:
        return await self._run("publish_model", **public_model_params(model)) > 0

    async def public_models(self) -> list[PublicModel]:
        return await self._reader().read("list_public_models", public_model_from_row)

    async def public_model(self, model_id: str) -> PublicModel | None:
        return await self._reader().read_one(
            "get_public_model", public_model_from_row, model_id=model_id
        )

    async def unpublish_model(self, model_id: str) -> bool:
        return await self._run("unpublish_model", model_id=model_id) > 0

    async def worker_ready(self, worker_id: str, now: float) -> Worker | None:
        return await self._write_one(
            lambda c: c.read_one("worker_ready", worker_from_row, now=now, id=worker_id)
        )

    async def worker_serving(self, worker_id: str, busy: bool, now: float) -> Worker | None:
        state, idle_since = ("running", None) if busy else ("idle", now)
        values = {"state": state, "idle_since": idle_since, "id": worker_id}
        return await self._write_one(
            lambda c: c.read_one("worker_serving", worker_from_row, **values)
        )

    async def get_worker(self, worker_id: str) -> Worker | None:
        return await self._reader().read_one("get_worker", worker_from_row, id=worker_id)

    async def list_workers(self, endpoint_id: str | None) -> list[Worker]:
        c = self._reader()
        if endpoint_id is None:
            return await c.read("list_workers", worker_from_row)
        return await c.read("list_workers_of_endpoint", worker_from_row, endpoint_id=endpoint_id)

    async def delete_worker(self, worker_id: str) -> None:
        async def op(c: Connection) -> None:
            await c.execute("delete_worker", worker_id=worker_id)
            await c.execute("delete_stop_signals_of_worker", worker_id=worker_id)
            await c.execute("drop_lineup", worker_id=worker_id)

        await self._write(op)

    async def jobs_of_worker(self, worker_id: str) -> list[str]:
        return await self._ids_of("jobs_of_worker", worker_id=worker_id)

    async def set_worker_failure(self, endpoint_id: str, failure_json: str | None) -> None:
        await self._run("set_worker_failure", failure=failure_json, endpoint_id=endpoint_id)

    async def worker_failure(self, endpoint_id: str) -> str | None:
        row = await self._row("worker_failure", endpoint_id=endpoint_id)
        return row["worker_failure"] if row else None
