"""Who a connection is: the owner of the pod it asks for, proved by a public key of their
settings (``update_user_settings``'s ``pubKey``, ``/v1/user``, the console's settings page).

Which pod: on the server's SSH port the user name is the pod's id (``ssh POD_ID@HOST``); on a
pod's own port it is that pod whatever the name (``runpod pod connect`` logs in as ``root``).
Nothing else opens a door: no password, no keyboard-interactive, no agent or port forwarding
(asyncssh refuses what a server does not accept). A pod that is unknown, another replica's,
not running, or whose owner is disabled refuses every key, as a wrong key is refused: a
stranger learns nothing of which pods exist.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import asyncssh

from skiff.domain.users import User
from skiff.services.pod_shells import PodShells

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Admitted:
    """A connection let in: whose, into which pod, with which key."""

    user: User
    pod_id: str
    fingerprint: str


def key_matches(authorized: str, key: asyncssh.SSHKey) -> bool:
    """Whether ``key`` is among the public keys of ``authorized`` (OpenSSH's one-a-line
    format; lines that are no key, such as comments, are passed over)."""
    wanted = key.public_data
    for line in authorized.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            if asyncssh.import_public_key(line).public_data == wanted:
                return True
        except (asyncssh.KeyImportError, ValueError):
            continue
    return False


class PodDoor(asyncssh.SSHServer):
    """One connection's authentication. ``pod_id``: the pod of the port it came to; None on
    the server's port, where the user name names it."""

    def __init__(self, shells: PodShells, pod_id: str | None) -> None:
        self._shells = shells
        self._pod_id = pod_id
        self.admitted: Admitted | None = None
        self.peer = "unknown"

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        peer = conn.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"

    def begin_auth(self, username: str) -> bool:
        return True  # every connection proves who it is

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    async def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        pod_id = self._pod_id or username
        door = await self._shells.door(pod_id)
        if door is None or not key_matches(door.keys, key):
            log.info("ssh: a key for pod %s from %s refused", pod_id[:64], self.peer)
            return False
        self.admitted = Admitted(door.owner, pod_id, key.get_fingerprint())
        return True
