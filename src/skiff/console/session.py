"""The console's sign-in session: a signed cookie, no server-side state.

The cookie carries the SHA-256 digest of the API key the user signed in with (never the key),
a random nonce (the seed of the CSRF token) and when it was issued, signed with HMAC-SHA256
under a server secret kept in the store. So any replica on the same database reads it, a
restart keeps it, and revoking the key ends every session made with it on the next request.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

#: The session cookie's name; its path is the console's, so the APIs never see it.
COOKIE = "skiff_session"
#: The cookie that seeds the sign-in form's CSRF token before there is a session.
LOGIN_COOKIE = "skiff_login"
#: How long a session lasts; then the user signs in again.
SESSION_SECONDS = 12 * 3600
#: The store secret that signs sessions.
SECRET_NAME = "console-session"


@dataclass(frozen=True, slots=True)
class Session:
    key_digest: str
    nonce: str
    issued_at: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_nonce() -> str:
    return secrets.token_urlsafe(18)


class Sessions:
    """Issues and reads session cookies; the signing secret is read from the store once."""

    def __init__(self, load_secret: Callable[[], Awaitable[bytes]]) -> None:
        self._load_secret = load_secret
        self._secret: bytes | None = None

    async def secret(self) -> bytes:
        if self._secret is None:
            self._secret = await self._load_secret()
        return self._secret

    async def issue(self, key_digest: str, now: float) -> tuple[str, Session]:
        session = Session(key_digest=key_digest, nonce=new_nonce(), issued_at=now)
        payload = _b64(orjson.dumps({"d": key_digest, "n": session.nonce, "t": now}))
        return f"{payload}.{self._sign(await self.secret(), payload)}", session

    async def read(self, value: str | None, now: float) -> Session | None:
        """The session a cookie holds, or None when it is missing, altered or expired."""
        if not value or value.count(".") != 1:
            return None
        payload, signature = value.split(".")
        if not hmac.compare_digest(self._sign(await self.secret(), payload), signature):
            return None
        try:
            doc = orjson.loads(_unb64(payload))
            session = Session(key_digest=str(doc["d"]), nonce=str(doc["n"]), issued_at=doc["t"])
        except (binascii.Error, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None
        if not isinstance(session.issued_at, int | float):
            return None
        if not session.issued_at <= now < session.issued_at + SESSION_SECONDS:
            return None
        return session

    @staticmethod
    def _sign(secret: bytes, payload: str) -> str:
        return _b64(hmac.new(secret, b"session:" + payload.encode(), hashlib.sha256).digest())
