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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import orjson
from starlette.requests import HTTPConnection

#: The session cookie's name (over HTTPS with ``HOST_PREFIX`` before it: ``cookie_scope``).
COOKIE = "skiff_session"
#: The cookie that seeds the sign-in form's CSRF token before there is a session.
LOGIN_COOKIE = "skiff_login"
#: Browsers keep cookies per host name, not per port, and a pod's ``http`` port is served on
#: the console's host name by its tenant's own program. Over plain HTTP that program is sent
#: the console's cookies and may set its own in their place; nothing a cookie says prevents
#: it. Over HTTPS the cookies are ``Secure`` (a plain-HTTP port never sees them) and carry this
#: prefix, which a browser accepts only from a secure origin, for this host alone (no
#: ``Domain``, so no load-balancing subdomain can plant one either) and the path ``/``.
HOST_PREFIX = "__Host-"
#: How long a session lasts; then the user signs in again.
SESSION_SECONDS = 12 * 3600
#: The store secret that signs sessions.
SECRET_NAME = "console-session"


@dataclass(frozen=True, slots=True)
class CookieScope:
    """Where the console's cookies live for one connection: their name, path and whether
    they are ``Secure``."""

    secure: bool
    path: str

    def name(self, base: str) -> str:
        return HOST_PREFIX + base if self.secure else base

    def read(self, cookies: Mapping[str, str], base: str) -> str | None:
        """A cookie's value as this connection may trust it: over HTTPS only the prefixed
        one (a plain one may have been planted over HTTP). A secure cookie is taken over
        plain HTTP too, for a socket a TLS proxy passes on as ``ws``: only a secure origin
        could have set it."""
        prefixed = cookies.get(HOST_PREFIX + base)
        if prefixed is not None or self.secure:
            return prefixed
        return cookies.get(base)


def cookie_scope(connection: HTTPConnection) -> CookieScope:
    """Over HTTPS (also behind a TLS proxy that says so): secure, prefixed, path ``/``; over
    plain HTTP: the console's own path."""
    if connection.url.scheme in ("https", "wss"):
        return CookieScope(secure=True, path="/")
    return CookieScope(secure=False, path=connection.scope.get("root_path", "") or "/")


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
