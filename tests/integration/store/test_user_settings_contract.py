"""Contract tests of a user's settings and a registry auth's new credentials in the store, on
SQLite (a real file) and PostgreSQL (a fresh schema; skipped when none is reachable)."""

from __future__ import annotations

from integration.store import test_store_contract as contract
from integration.store.test_store_contract import T0
from skiff.store.base import RegistryAuthRecord, Store

db_path = contract.db_path
store = contract.store


async def test_a_users_public_key_is_kept_and_replaced(store: Store) -> None:
    assert await store.get_pub_key("alice") is None
    await store.set_pub_key("alice", "ssh-ed25519 AAAA one")
    await store.set_pub_key("alice", "ssh-ed25519 AAAA two")
    await store.set_pub_key("bob", "")
    assert await store.get_pub_key("alice") == "ssh-ed25519 AAAA two"
    assert await store.get_pub_key("bob") == ""


async def test_a_registry_auths_credentials_change_for_its_owner_only(store: Store) -> None:
    record = RegistryAuthRecord("a1", "alice", "registry", "me", "secret", T0)
    await store.create_registry_auth(record)
    assert not await store.update_registry_auth_credentials("bob", "a1", "x", "y")
    assert await store.update_registry_auth_credentials("alice", "a1", "me2", "secret2")
    changed = await store.get_registry_auth("alice", "a1")
    assert changed is not None and (changed.username, changed.password) == ("me2", "secret2")
    assert changed.name == "registry"
