"""Values kept encrypted in the database ("sealed"), with a key kept outside it.

Secrets, registry passwords, jobs' ``s3Config`` and webhook signing secrets are written as
Fernet tokens (the ``cryptography`` package: AES-128-CBC with an HMAC-SHA256, authenticated)
and read back in clear by the store only. Several keys may be given: the first seals, all open
(``MultiFernet``), so a key is rotated by putting the new one first; at every start with
several keys the store seals every value again with the first, after which the old key may go.

The store records that its values are sealed with a check value (``meta`` row
``sealing_check``): a server given no key, or the wrong one, for a database that holds sealed
values refuses to start (``SealingKeyProblem``) instead of serving garbled secrets. Where the
key comes from is the caller's (``KeySource``; ``skiff/secret_keys.py`` reads the setting or
the key file).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

#: The ``meta`` row that says the values are sealed, and with which key (a sealed constant).
CHECK_NAME = "sealing_check"
_CHECK_TEXT = "skiff sealed values"


class SealingKeyProblem(Exception):
    """No key, or the wrong one, for the sealed values of a database: told in one line."""


class KeySource(Protocol):
    """Where a store's keys come from."""

    def keys(self, sealed_before: bool) -> list[bytes]:
        """The keys, the sealing one first. ``sealed_before``: the database holds sealed
        values already, so a key that is not there must not be made up (raise
        ``SealingKeyProblem``)."""
        ...


class OneTimeKey:
    """A key made for one store object and kept nowhere: for tests and throwaway stores."""

    def __init__(self) -> None:
        self._key = Fernet.generate_key()

    def keys(self, sealed_before: bool) -> list[bytes]:
        return [self._key]


def valid_key(key: bytes) -> bool:
    """Whether ``key`` is a Fernet key (32 bytes, URL-safe base64)."""
    try:
        Fernet(key)
    except ValueError:
        return False
    return True


class Sealer:
    """Seals and opens text values with the keys, the first sealing."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise SealingKeyProblem("no key to encrypt the database's secrets with")
        self._all = MultiFernet([Fernet(k) for k in keys])
        #: Several keys: a rotation is under way.
        self.rotating = len(keys) > 1

    def seal(self, text: str) -> str:
        return self._all.encrypt(text.encode()).decode("ascii")

    def open(self, token: str) -> str:
        return self._all.decrypt(token.encode("ascii")).decode()

    def reseal(self, token: str) -> str:
        """The value sealed again with the first key (a rotation)."""
        return self._all.rotate(token.encode("ascii")).decode("ascii")

    def check(self) -> bytes:
        """A new check value for ``meta``."""
        return self.seal(_CHECK_TEXT).encode("ascii")

    def opens(self, check: bytes) -> bool:
        """Whether these keys open the values that ``check`` stands for."""
        try:
            return self.open(bytes(check).decode("ascii")) == _CHECK_TEXT
        except (InvalidToken, UnicodeDecodeError):
            return False
