"""Who a connection is: the owner of the pod it asks for, proved by a public key of their
settings (``update_user_settings``'s ``pubKey``, ``/v1/user``, the console's settings page).

Which pod: on the server's SSH port the user name is the pod's id (``ssh POD_ID@HOST``); on a
pod port it is the pod that port is handed to now, whatever the name (``runpod pod connect``
logs in as ``root``). Nothing else opens a door: no password, no keyboard-interactive, no agent
or port forwarding (asyncssh refuses what a server does not accept). A pod that is unknown,
another replica's, not running, or whose owner is disabled refuses every key, as a wrong key
is refused.

The keys are read as OpenSSH's ``authorized_keys`` lines: ``from="…"`` limits where a key is
taken from and ``no-pty`` / ``restrict`` refuse it a terminal; a key with a ``command="…"`` is
refused (skiff does not run forced commands, and must not let such a key in unrestricted).

A connection may try ``MAX_AUTH_TRIES`` keys, as OpenSSH's ``MaxAuthTries``, and at most
``MAX_PENDING_LOGINS`` connections wait to prove who they are at once: each try reads the pod.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import asyncssh
from attrs import define, field
from cachetools import LRUCache

from skiff.domain.users import User
from skiff.services.pod_shells import PodShells
from skiff.services.ssh_ports import SshPorts

log = logging.getLogger(__name__)

#: Keys one connection may try before it is let go.
MAX_AUTH_TRIES = 6
#: Connections that have not yet proved who they are, across the server: more are let go.
MAX_PENDING_LOGINS = 64


@dataclass(frozen=True, slots=True)
class Admitted:
    """A connection let in: whose, into which pod, with which key and its options."""

    user: User
    pod_id: str
    key: asyncssh.SSHKey
    options: Mapping[str, object]

    @property
    def fingerprint(self) -> str:
        return str(self.key.get_fingerprint())

    @property
    def may_have_terminal(self) -> bool:
        return allows_terminal(self.options)


def allows_terminal(options: Mapping[str, object]) -> bool:
    """Whether a key with these ``authorized_keys`` options may have a terminal."""
    if "no-pty" in options:
        return False
    return "restrict" not in options or "pty" in options


#: ``key_options``' answers by (a digest of the keys' text, the key, the client): every open
#: session is checked again at each sweep, and a user's keys may hold ``from=`` lists that are
#: costly to match; the same question gets the same answer.
_OPTIONS: LRUCache[tuple[bytes, bytes, str], Mapping[str, object] | None] = LRUCache(1024)


def key_options(authorized: str, key: asyncssh.SSHKey, client: str) -> Mapping[str, object] | None:
    """The options of ``key``'s line among ``authorized`` (one key a line, OpenSSH's format;
    lines that are no key are passed over) when it opens from ``client`` (an address); None
    when it does not (not there, a ``from=`` that excludes the address, a forced command)."""
    asked = (hashlib.sha256(authorized.encode()).digest(), key.public_data, client)
    try:
        return _OPTIONS[asked]
    except KeyError:
        pass
    options = _options_of(authorized, key, client)
    _OPTIONS[asked] = options
    return options


def _options_of(authorized: str, key: asyncssh.SSHKey, client: str) -> Mapping[str, object] | None:
    for line in authorized.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            options = asyncssh.import_authorized_keys(line).validate(key, client, client)
        except (asyncssh.KeyImportError, ValueError):
            continue
        if options is None:
            continue
        return None if "command" in options else options
    return None


class Logins:
    """How many connections wait to prove who they are, server-wide."""

    def __init__(self, most: int = MAX_PENDING_LOGINS) -> None:
        self.most = most
        self.pending = 0


@define(eq=False, repr=False, slots=False)
class PodDoor(asyncssh.SSHServer):
    """One connection's authentication. ``ports``: on a pod port, the ports handed to pods
    (the pod is the one ``port`` is handed to); None on the server's port, where the user name
    names it."""

    _shells: PodShells
    _ports: SshPorts | None
    _port: int
    _logins: Logins
    _conn: asyncssh.SSHServerConnection | None = field(init=False, default=None)
    _tries: int = field(init=False, default=0)
    _waiting: bool = field(init=False, default=False)
    #: The last key found to open the pod: asyncssh asks before checking its signature,
    #: then completes only with the key it asked about last.
    _candidate: Admitted | None = field(init=False, default=None)
    admitted: Admitted | None = field(init=False, default=None)
    peer: str = field(init=False, default="unknown")
    peer_address: str = field(init=False, default="")

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        peer = conn.get_extra_info("peername")
        if peer:
            self.peer_address = str(peer[0])
            self.peer = f"{peer[0]}:{peer[1]}"
        if self._logins.pending >= self._logins.most:
            log.warning("ssh: %d logins under way: %s let go", self._logins.pending, self.peer)
            conn.close()
            return
        self._logins.pending += 1
        self._waiting = True

    def connection_lost(self, exc: Exception | None) -> None:
        self._done_waiting()

    def auth_completed(self) -> None:
        self._done_waiting()
        self.admitted = self._candidate

    def _done_waiting(self) -> None:
        if self._waiting:
            self._waiting = False
            self._logins.pending -= 1

    def begin_auth(self, username: str) -> bool:
        return True  # every connection proves who it is

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def _pod_of(self, username: str) -> str | None:
        if self._ports is None:
            return username
        return self._ports.held().get(self._port)

    async def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        self._tries += 1
        if self._tries > MAX_AUTH_TRIES:
            if self._conn is not None:
                self._conn.close()
            return False
        pod_id = self._pod_of(username)
        door = await self._shells.door(pod_id) if pod_id else None
        options = key_options(door.keys, key, self.peer_address) if door is not None else None
        if door is None or options is None:
            log.info("ssh: a key for pod %s from %s refused", (pod_id or "-")[:64], self.peer)
            return False
        self._candidate = Admitted(door.owner, door.pod.id, key, options)
        return True


async def still_holds(shells: PodShells, admitted: Admitted, client: str, terminal: bool) -> bool:
    """Whether an open session's key still lets its user in (asked at each sweep): the key is
    still in their settings, opens from ``client`` and, for a session on a ``terminal``, still
    allows one; the user is not disabled. The pod's state is not asked: a pod that stops ends
    its sessions itself, and says so."""
    return _opens(await shells.keys_of(admitted.user.id), admitted, client, terminal)


async def still_admitted(shells: PodShells, admitted: Admitted, client: str) -> bool:
    """Whether the connection's key would open its pod now (checked again for each session:
    a key taken out of the settings, a disabled user, a stopped pod end what a connection may
    open next)."""
    door = await shells.door(admitted.pod_id)
    return (
        door is not None
        and door.owner.id == admitted.user.id
        and _opens(door.keys, admitted, client, terminal=False)
    )


def _opens(keys: str | None, admitted: Admitted, client: str, terminal: bool) -> bool:
    """Whether ``keys`` (None: the user may not get in at all) still hold the admitted key,
    from ``client``, allowing a terminal where one is asked for."""
    options = None if keys is None else key_options(keys, admitted.key, client)
    return options is not None and (not terminal or allows_terminal(options))
