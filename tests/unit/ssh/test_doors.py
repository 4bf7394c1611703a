"""Who gets in over SSH (skiff/ssh/doors.py) and the server's host key
(skiff/ssh/host_key.py): a key opens a pod when it is among the owner's public keys, whatever
else their settings hold; the host key is made once and then read back unchanged."""

from __future__ import annotations

from pathlib import Path

import asyncssh

from skiff.ssh import host_key
from skiff.ssh.doors import key_matches


def public_line(key: asyncssh.SSHKey, comment: str = "laptop") -> str:
    return key.export_public_key().decode().strip() + f" {comment}"


def test_a_key_matches_when_it_is_one_of_the_lines_of_the_settings() -> None:
    mine = asyncssh.generate_private_key("ssh-ed25519")
    other = asyncssh.generate_private_key("ssh-ed25519")
    rsa = asyncssh.generate_private_key("ssh-rsa", key_size=2048)
    settings = "\n".join(
        ["# work", "", "not a key at all", public_line(rsa), "  " + public_line(mine) + "  "]
    )
    assert key_matches(settings, mine)
    assert key_matches(settings, rsa)
    assert not key_matches(settings, other)
    assert not key_matches("", mine)


def test_the_host_key_is_made_once_private_and_read_back_the_same(tmp_path: Path) -> None:
    first = host_key.load_or_make(tmp_path)
    path = tmp_path / host_key.HOST_KEY_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    again = host_key.load_or_make(tmp_path)
    assert again.public_data == first.public_data
    assert list(path.parent.iterdir()) == [path]  # nothing staged left behind
