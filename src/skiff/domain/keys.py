"""API keys and worker tokens: how they look and how they are checked, without storage."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from skiff.domain.permissions import ALL, Permissions

API_KEY_PREFIX = "sk_"
WORKER_TOKEN_PREFIX = "skw_"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored key: never its secret, only its hash (kept by the store) and a hint."""

    id: str
    user_id: str
    hint: str
    label: str
    created_at: float
    revoked_at: float | None
    #: What it may do; keys made before permissions existed, and the operator's, do everything.
    permissions: Permissions = ALL


def new_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """Keys are 256-bit random strings, so a plain SHA-256 is enough to store them safely
    (no dictionary to attack) and cheap enough to check on every request."""
    return hashlib.sha256(key.encode()).hexdigest()


def key_hint(key: str) -> str:
    """The part of a key shown in listings, so a user can tell keys apart."""
    return key[:7] + "…" + key[-4:]


def worker_token(secret: bytes, endpoint_id: str) -> str:
    """A token scoped to one endpoint: it can take and report that endpoint's jobs and nothing
    else. It is derived, not stored, so any replica can check it."""
    digest = hmac.new(secret, endpoint_id.encode(), hashlib.sha256).hexdigest()
    return f"{WORKER_TOKEN_PREFIX}{endpoint_id}_{digest}"


#: The header skiff's load-balancing proxy sends every request with (``lb_key``), and the
#: variable a load-balancing worker finds the same value in.
LB_KEY_HEADER = "x-skiff-lb-key"
LB_KEY_VARIABLE = "SKIFF_LB_KEY"


def lb_key(secret: bytes, endpoint_id: str) -> str:
    """What tells a load-balancing worker that a request came through skiff's proxy: a
    process worker listens on the host's loopback, where another tenant's code can reach it
    too. Derived per endpoint, as ``worker_token`` is, and never the same as it."""
    return hmac.new(secret, b"lb-proxy:" + endpoint_id.encode(), hashlib.sha256).hexdigest()


def check_worker_token(secret: bytes, endpoint_id: str, token: str) -> bool:
    # As bytes: compare_digest refuses str with characters beyond ASCII (a TypeError, so a
    # 500), and a header may carry any byte.
    expected = worker_token(secret, endpoint_id).encode()
    return hmac.compare_digest(expected, token.encode("utf-8", "replace"))
