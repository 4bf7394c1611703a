"""CSRF tokens for the console's forms and its few script calls.

A token is an HMAC of a per-visitor nonce under the session secret: the nonce of the signed-in
session, or before sign-in the nonce of the short ``skiff_login`` cookie. Another site can
make a browser send the cookies, but cannot read the page that holds the token, so it cannot
send a matching form field (or ``X-CSRF-Token`` header). The SameSite cookies are a second
fence, not the only one.
"""

from __future__ import annotations

import hashlib
import hmac

#: The form field, and the header the console's script sends instead.
FIELD = "csrf"
HEADER = "x-csrf-token"


def token(secret: bytes, nonce: str) -> str:
    return hmac.new(secret, b"csrf:" + nonce.encode(), hashlib.sha256).hexdigest()


def valid(secret: bytes, nonce: str | None, submitted: str | None) -> bool:
    if not nonce or not submitted:
        return False
    return hmac.compare_digest(token(secret, nonce), submitted)
