"""Where the key of the database's sealed values comes from (store/sealing.py): outside the
database, so that a copy of the database alone (a backup, a ``pg_dump``, a stolen disk) holds
no secret in clear.

``SKIFF_SECRET_KEY`` when set: one Fernet key, or several separated by commas (the first
encrypts, all decrypt: a rotation), the same on every replica sharing the database. Otherwise
the key file, ``secret.key`` in the data directory, 0600, made at the first start of a database
that holds no sealed value yet. A database that does, started without its key, is refused
(``SealingKeyProblem``): a key made up then would leave every stored secret unreadable.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.fernet import Fernet

from skiff.datadir import FILE_MODE, make_private_dirs, tighten
from skiff.store.sealing import KeySource, SealingKeyProblem, valid_key

#: The key file's name in the data directory.
KEY_FILE_NAME = "secret.key"

#: What a key looks like, for the messages that refuse one.
KEY_RULE = (
    "one or more Fernet keys (44 characters of URL-safe base64 each), separated by commas; "
    'make one with: python -c "from cryptography.fernet import Fernet; '
    'print(Fernet.generate_key().decode())"'
)


def parse_keys(text: str) -> list[bytes]:
    """The keys of ``SKIFF_SECRET_KEY`` (or of a key file), first the one that encrypts;
    ``ValueError`` for text that holds none, or anything besides keys."""
    keys = [k.strip().encode() for k in text.replace("\n", ",").split(",") if k.strip()]
    if not keys or not all(valid_key(k) for k in keys):
        raise ValueError(f"must be {KEY_RULE}")
    return keys


class GivenKeys:
    """The keys of ``SKIFF_SECRET_KEY``."""

    def __init__(self, text: str) -> None:
        self._keys = parse_keys(text)

    def keys(self, sealed_before: bool) -> list[bytes]:
        return self._keys


class KeyFile:
    """The key kept in a file (several keys, one a line, for a rotation), made when missing
    and nothing is sealed yet."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def keys(self, sealed_before: bool) -> list[bytes]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            if sealed_before:
                raise SealingKeyProblem(
                    f"the database holds secrets encrypted with the key in {self.path}, which is"
                    " missing: put back the key file from your backup (or give the key as"
                    " SKIFF_SECRET_KEY); without it the stored secrets cannot be read"
                ) from None
            return [self._make()]
        tighten(self.path, FILE_MODE)
        try:
            return parse_keys(text)
        except ValueError as exc:
            raise SealingKeyProblem(f"the key file {self.path} {exc}") from None

    def _make(self) -> bytes:
        make_private_dirs(self.path.parent)
        key = Fernet.generate_key()
        # 0600 from the start, and never over a file that appeared meanwhile (O_EXCL).
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(key + b"\n")
            f.flush()
            os.fsync(f.fileno())
        return key


def key_source(secret_key: str | None, data_dir: Path) -> KeySource:
    """``SKIFF_SECRET_KEY`` when set, else the key file in the data directory."""
    if secret_key:
        return GivenKeys(secret_key)
    return KeyFile(data_dir / KEY_FILE_NAME)
