"""Contract tests of the values kept encrypted in the database (store/sealing.py) and of users'
secrets, on SQLite (a real file, read back byte for byte) and PostgreSQL (a fresh schema, read
back with ``pg_dump``; skipped when none is reachable)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from cryptography.fernet import Fernet

from integration.store.test_store_contract import EP, T0, make_job, make_user
from pgtest import PG_DSN, pg_admin, schema_name
from skiff.domain.secrets import Secret
from skiff.errors import Conflict
from skiff.secret_keys import GivenKeys, KeyFile
from skiff.store.base import RegistryAuthRecord, Store
from skiff.store.postgres import PostgresStore
from skiff.store.sealing import KeySource, SealingKeyProblem
from skiff.store.sqlite import SQLiteStore

PASSWORD = "registry-password-7f3a"
S3_SECRET = "s3-access-secret-91bd"
SECRET_VALUE = "user-secret-value-c4e2"


@dataclass
class Database:
    """One database, opened as often as a test likes, with whatever keys it gives."""

    open_with: Callable[[KeySource], Awaitable[Store]]
    #: Everything the database holds, as bytes (the SQLite file; a ``pg_dump``).
    dump: Callable[[], Awaitable[bytes]]
    #: Runs raw SQL on the database (``?`` placeholders on SQLite, ``$n`` on PostgreSQL).
    raw: Callable[[str, tuple[Any, ...]], Awaitable[None]]
    dialect: str


@pytest.fixture(params=["sqlite", "postgres"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    opened: list[Store] = []
    if request.param == "sqlite":
        path = tmp_path / "data" / "skiff.db"

        async def open_sqlite(keys: KeySource) -> Store:
            store = SQLiteStore(path, keys)
            await store.open()
            opened.append(store)
            return store

        async def dump_sqlite() -> bytes:
            files = [path, path.with_name(path.name + "-wal")]
            return b"".join(f.read_bytes() for f in files if f.exists())

        async def raw_sqlite(sql: str, args: tuple[Any, ...]) -> None:
            import sqlite3

            conn = sqlite3.connect(path)
            try:
                conn.execute(sql, args)
                conn.commit()
            finally:
                conn.close()

        yield Database(open_sqlite, dump_sqlite, raw_sqlite, "sqlite")
        for store in opened:
            await store.close()
        return
    admin = await pg_admin()
    name = schema_name()

    async def open_pg(keys: KeySource) -> Store:
        store = PostgresStore(PG_DSN, schema=name, keys=keys)
        await store.open()
        opened.append(store)
        return store

    async def dump_pg() -> bytes:
        done = await asyncio.to_thread(
            subprocess.run,
            ["pg_dump", "--dbname", PG_DSN, "--schema", name, "--data-only"],
            capture_output=True,
            check=True,
        )
        return done.stdout

    async def raw_pg(sql: str, args: tuple[Any, ...]) -> None:
        conn = await asyncpg.connect(PG_DSN, server_settings={"search_path": name})
        try:
            await conn.execute(sql, *args)
        finally:
            await conn.close()

    try:
        yield Database(open_pg, dump_pg, raw_pg, "postgres")
    finally:
        for store in opened:
            await store.close()
        await admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        await admin.close()


def keys_of(*keys: bytes) -> GivenKeys:
    return GivenKeys(",".join(k.decode() for k in keys))


async def save_every_sealed_kind(store: Store) -> str:
    """A registry auth, a job with an ``s3Config``, a webhook secret and a user's secret;
    returns the webhook secret."""
    await store.create_user(make_user())
    auth = RegistryAuthRecord("a1", "u-1", "registry", "me", PASSWORD, T0)
    await store.create_registry_auth(auth)
    s3 = f'{{"accessId":"id","accessSecret":"{S3_SECRET}","bucketName":"b"}}'
    await store.insert_job(make_job("j-1", s3_config_json=s3))
    await store.create_user_secret("u-1", Secret("s1", "hf_token", T0, T0), SECRET_VALUE)
    return await store.webhook_secret("u-1")


async def assert_every_sealed_kind_reads_back(store: Store, webhook_secret: str) -> None:
    auth = await store.get_registry_auth("u-1", "a1")
    assert auth is not None and auth.password == PASSWORD
    [listed] = await store.list_registry_auths("u-1")
    assert listed.password == PASSWORD
    job = await store.get_job(EP, "j-1")
    assert job is not None and job.s3_config_json is not None
    assert S3_SECRET in job.s3_config_json
    assert await store.user_secret_values("u-1") == {"hf_token": SECRET_VALUE}
    assert await store.webhook_secret("u-1") == webhook_secret


async def test_the_database_holds_no_secret_in_clear(database: Database) -> None:
    key = Fernet.generate_key()
    store = await database.open_with(keys_of(key))
    webhook_secret = await save_every_sealed_kind(store)
    await assert_every_sealed_kind_reads_back(store, webhook_secret)
    [claimed] = await store.claim_jobs(EP, "w-1", 1, now=T0 + 1, lease_until=T0 + 60)
    assert claimed.s3_config_json is not None and S3_SECRET in claimed.s3_config_json
    await store.close()
    dump = await database.dump()
    assert b"hf_token" in dump  # the dump is readable: names are there, values are not
    for clear in (PASSWORD, S3_SECRET, SECRET_VALUE, webhook_secret):
        assert clear.encode() not in dump, f"{clear} is stored in clear"


async def test_a_database_reopened_with_its_key_reads_its_secrets(database: Database) -> None:
    key = Fernet.generate_key()
    store = await database.open_with(keys_of(key))
    webhook_secret = await save_every_sealed_kind(store)
    await store.close()
    again = await database.open_with(keys_of(key))
    await assert_every_sealed_kind_reads_back(again, webhook_secret)


async def test_a_missing_key_file_is_refused_once_secrets_are_sealed(
    database: Database, tmp_path: Path
) -> None:
    key_file = tmp_path / "keys" / "secret.key"
    store = await database.open_with(KeyFile(key_file))
    assert key_file.stat().st_mode & 0o777 == 0o600
    await save_every_sealed_kind(store)
    await store.close()
    key_file.unlink()
    with pytest.raises(SealingKeyProblem, match=r"secret\.key, which is missing"):
        await database.open_with(KeyFile(key_file))
    assert not key_file.exists()  # no new key was made up


async def test_another_key_is_refused(database: Database) -> None:
    store = await database.open_with(keys_of(Fernet.generate_key()))
    await save_every_sealed_kind(store)
    await store.close()
    with pytest.raises(SealingKeyProblem, match="does not open the secrets"):
        await database.open_with(keys_of(Fernet.generate_key()))


async def test_a_rotation_reads_old_values_and_seals_them_with_the_new_key(
    database: Database,
) -> None:
    old, new = Fernet.generate_key(), Fernet.generate_key()
    store = await database.open_with(keys_of(old))
    webhook_secret = await save_every_sealed_kind(store)
    await store.close()
    rotated = await database.open_with(keys_of(new, old))
    await assert_every_sealed_kind_reads_back(rotated, webhook_secret)
    await rotated.close()
    # Sealed again with the new key at that start: the old one may go.
    new_only = await database.open_with(keys_of(new))
    await assert_every_sealed_kind_reads_back(new_only, webhook_secret)


async def test_values_a_lagging_replica_sealed_with_the_old_key_are_sealed_again(
    database: Database,
) -> None:
    """Rotating across replicas: one restarted with ``new,old`` seals everything with the new
    key while another still runs with ``old,new`` and seals its new values with the old one;
    the next start with both keys (that replica restarting) seals those again, so the old key
    can then go."""
    old, new = Fernet.generate_key(), Fernet.generate_key()
    first = await database.open_with(keys_of(old))
    await first.create_user(make_user())
    await first.close()
    rotated = await database.open_with(keys_of(new, old))
    lagging = await database.open_with(keys_of(old, new))
    await lagging.create_registry_auth(RegistryAuthRecord("a1", "u-1", "r", "me", PASSWORD, T0))
    await lagging.close()
    await rotated.close()
    restarted = await database.open_with(keys_of(new, old))
    await restarted.close()
    new_only = await database.open_with(keys_of(new))
    auth = await new_only.get_registry_auth("u-1", "a1")
    assert auth is not None and auth.password == PASSWORD


async def test_an_earlier_versions_values_in_clear_are_sealed_at_start(
    database: Database,
) -> None:
    key = Fernet.generate_key()
    store = await database.open_with(keys_of(key))
    await store.create_user(make_user())
    await store.create_registry_auth(RegistryAuthRecord("a1", "u-1", "r", "me", "x", T0))
    await store.insert_job(make_job("j-1", s3_config_json='{"bucketName":"b"}'))
    await store.close()
    # As the version before left them: every value in clear, no check value.
    p = (lambda n: f"${n}") if database.dialect == "postgres" else (lambda n: "?")
    s3 = f'{{"accessSecret":"{S3_SECRET}"}}'
    await database.raw(f"UPDATE registry_auths SET password = {p(1)}", (PASSWORD,))
    await database.raw(f"UPDATE jobs SET s3_config = {p(1)}", (s3,))
    await database.raw(f"UPDATE users SET webhook_secret = {p(1)}", ("whsec_earlier",))
    await database.raw("DELETE FROM meta WHERE name = 'sealing_check'", ())

    migrated = await database.open_with(keys_of(key))
    auth = await migrated.get_registry_auth("u-1", "a1")
    assert auth is not None and auth.password == PASSWORD
    job = await migrated.get_job(EP, "j-1")
    assert job is not None and job.s3_config_json == s3
    assert await migrated.webhook_secret("u-1") == "whsec_earlier"
    await migrated.close()
    dump = await database.dump()
    for clear in (PASSWORD, S3_SECRET, "whsec_earlier"):
        assert clear.encode() not in dump


async def test_replicas_starting_together_seal_an_earlier_database_once(
    database: Database,
) -> None:
    key = Fernet.generate_key()
    store = await database.open_with(keys_of(key))
    await store.create_user(make_user())
    await store.create_registry_auth(RegistryAuthRecord("a1", "u-1", "r", "me", "x", T0))
    await store.close()
    p = "$1" if database.dialect == "postgres" else "?"
    await database.raw(f"UPDATE registry_auths SET password = {p}", (PASSWORD,))
    await database.raw("DELETE FROM meta WHERE name = 'sealing_check'", ())
    if database.dialect == "sqlite":
        stores = [await database.open_with(keys_of(key)) for _ in range(2)]
    else:
        stores = list(await asyncio.gather(*(database.open_with(keys_of(key)) for _ in range(3))))
    for s in stores:
        auth = await s.get_registry_auth("u-1", "a1")
        assert auth is not None and auth.password == PASSWORD


# -- users' secrets ------------------------------------------------------------------------


async def test_a_users_secrets_are_listed_by_name_without_values(database: Database) -> None:
    store = await database.open_with(keys_of(Fernet.generate_key()))
    await store.create_user_secret("u-1", Secret("s2", "b_token", T0, T0), "two")
    await store.create_user_secret("u-1", Secret("s1", "a_token", T0, T0), "one")
    await store.create_user_secret("u-2", Secret("s3", "a_token", T0, T0), "other")
    listed = await store.list_user_secrets("u-1")
    assert [s.name for s in listed] == ["a_token", "b_token"]
    assert await store.get_user_secret("u-1", "s1") == Secret("s1", "a_token", T0, T0)
    assert await store.get_user_secret("u-2", "s1") is None
    assert await store.user_secret_values("u-2") == {"a_token": "other"}


async def test_a_secret_name_is_unique_per_owner(database: Database) -> None:
    store = await database.open_with(keys_of(Fernet.generate_key()))
    await store.create_user_secret("u-1", Secret("s1", "token", T0, T0), "one")
    with pytest.raises(Conflict, match="token"):
        await store.create_user_secret("u-1", Secret("s2", "token", T0, T0), "two")
    assert await store.user_secret_values("u-1") == {"token": "one"}


async def test_a_secret_changes_and_goes_for_its_owner_only(database: Database) -> None:
    store = await database.open_with(keys_of(Fernet.generate_key()))
    await store.create_user_secret("u-1", Secret("s1", "token", T0, T0), "one")
    assert await store.update_user_secret("u-2", "s1", "stolen", T0 + 5) is None
    changed = await store.update_user_secret("u-1", "s1", "two", T0 + 5)
    assert changed == Secret("s1", "token", T0, T0 + 5)
    assert await store.user_secret_values("u-1") == {"token": "two"}
    assert not await store.delete_user_secret("u-2", "s1")
    assert await store.delete_user_secret("u-1", "s1")
    assert await store.list_user_secrets("u-1") == []
