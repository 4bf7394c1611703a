"""The server's SSH host key: made once, kept in the data directory, so that a client's
``known_hosts`` entry stays true across restarts."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh

from skiff.datadir import make_private_dirs

#: Under the data directory (readable by the server's user alone, as the directory is).
HOST_KEY_FILE = Path("ssh") / "host_ed25519_key"


def load_or_make(data_dir: Path) -> asyncssh.SSHKey:
    """The host key of this data directory, made (Ed25519) the first time."""
    path = data_dir / HOST_KEY_FILE
    if path.exists():
        return asyncssh.read_private_key(path)
    make_private_dirs(path.parent)
    key = asyncssh.generate_private_key("ssh-ed25519")
    staged = path.with_suffix(".new")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(key.export_private_key())
    # Linked into place, which fails where another replica sharing the data directory was
    # first: then its key is everyone's.
    try:
        os.link(staged, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(staged)
    return asyncssh.read_private_key(path)
