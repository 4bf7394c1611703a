"""Who gets in over SSH (skiff/ssh/doors.py) and the server's host key
(skiff/ssh/host_key.py): a key opens a pod when it is among the owner's public keys, whatever
else their settings hold, from where its ``from=`` allows, never with a forced command; a
``no-pty`` or ``restrict`` key gets no terminal; the host key is made once and then read back
unchanged."""

from __future__ import annotations

from pathlib import Path

import asyncssh

from skiff.domain.users import User
from skiff.ssh import host_key
from skiff.ssh.doors import Admitted, key_options


def public_line(key: asyncssh.SSHKey, comment: str = "laptop") -> str:
    return key.export_public_key().decode().strip() + f" {comment}"


def public(key: asyncssh.SSHKey) -> asyncssh.SSHKey:
    """The public half, as a client presents it."""
    return asyncssh.import_public_key(key.export_public_key())


def test_a_key_opens_when_it_is_one_of_the_lines_of_the_settings() -> None:
    mine = asyncssh.generate_private_key("ssh-ed25519")
    other = asyncssh.generate_private_key("ssh-ed25519")
    rsa = asyncssh.generate_private_key("ssh-rsa", key_size=2048)
    settings = "\n".join(
        ["# work", "", "not a key at all", public_line(rsa), "  " + public_line(mine) + "  "]
    )
    assert key_options(settings, public(mine), "203.0.113.7") == {}
    assert key_options(settings, public(rsa), "203.0.113.7") == {}
    assert key_options(settings, public(other), "203.0.113.7") is None
    assert key_options("", public(mine), "203.0.113.7") is None


def test_from_limits_where_a_key_opens_and_a_forced_command_never_opens() -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    limited = f'from="10.0.0.0/8" {public_line(key)}'
    assert key_options(limited, public(key), "10.1.2.3") is not None
    assert key_options(limited, public(key), "203.0.113.7") is None
    forced = f'command="echo hi" {public_line(key)}'
    assert key_options(forced, public(key), "10.1.2.3") is None


def test_a_no_pty_or_restricted_key_gets_no_terminal() -> None:
    key = public(asyncssh.generate_private_key("ssh-ed25519"))
    user = User("u", "u", False, 0.0)

    def admitted(options: dict[str, object]) -> Admitted:
        return Admitted(user, "pod", key, options)

    assert admitted({}).may_have_terminal
    assert not admitted({"no-pty": True}).may_have_terminal
    assert not admitted({"restrict": True}).may_have_terminal
    assert admitted({"restrict": True, "pty": True}).may_have_terminal
    assert admitted({}).fingerprint.startswith("SHA256:")


def test_the_host_key_is_made_once_private_and_read_back_the_same(tmp_path: Path) -> None:
    first = host_key.load_or_make(tmp_path)
    path = tmp_path / host_key.HOST_KEY_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    again = host_key.load_or_make(tmp_path)
    assert again.public_data == first.public_data
    assert list(path.parent.iterdir()) == [path]  # nothing staged left behind


class OneDoor:
    """Stands in for the pod sessions service: one pod, whose owner trusts ``keys``."""

    def __init__(self, keys: str) -> None:
        from skiff.domain.pods import Pod

        self.pod = Pod.model_construct(id="pod-1", userId="u")
        self.keys = keys
        self.asked = 0

    async def door(self, pod_id: str) -> object:
        from skiff.services.pod_shells import Door

        self.asked += 1
        if pod_id != "pod-1":
            return None
        return Door(self.pod, User("u", "u", False, 0.0), self.keys)


async def test_a_connection_may_try_six_keys_and_no_more() -> None:
    from skiff.ssh.doors import MAX_AUTH_TRIES, Logins, PodDoor

    right = asyncssh.generate_private_key("ssh-ed25519")
    shells = OneDoor(public_line(right))
    door = PodDoor(shells, None, 2222, Logins())  # type: ignore[arg-type]
    for _ in range(MAX_AUTH_TRIES - 1):
        wrong = public(asyncssh.generate_private_key("ssh-ed25519"))
        assert not await door.validate_public_key("pod-1", wrong)
    assert await door.validate_public_key("pod-1", public(right))  # the sixth
    assert not await door.validate_public_key("pod-1", public(right))  # a seventh: no
    assert shells.asked == MAX_AUTH_TRIES  # the pod is not even looked up
    door.auth_completed()
    assert door.admitted is not None and door.admitted.pod_id == "pod-1"


async def test_logins_past_the_limit_are_let_go_at_once() -> None:
    from skiff.ssh.doors import Logins, PodDoor

    class Connection:
        closed = False

        def get_extra_info(self, name: str) -> object:
            return ("198.51.100.9", 40000)

        def close(self) -> None:
            self.closed = True

    logins = Logins(most=2)
    shells = OneDoor("")
    doors = [PodDoor(shells, None, 2222, logins) for _ in range(3)]  # type: ignore[arg-type]
    connections = [Connection() for _ in doors]
    for door, connection in zip(doors, connections, strict=True):
        door.connection_made(connection)  # type: ignore[arg-type]
    assert [c.closed for c in connections] == [False, False, True]
    doors[0].auth_completed()
    doors[1].connection_lost(None)
    assert logins.pending == 0
