"""Reading who calls from the ``Authorization`` header; ``services.auth`` decides whether the
key or token it names is good."""

from __future__ import annotations

from skiff.errors import Unauthorized


def _strip_scheme(header: str) -> str:
    """``Bearer <key>`` (any case) or the bare key, as the job interface accepts both."""
    scheme, _, rest = header.strip().partition(" ")
    return rest.strip() if rest and scheme.lower() == "bearer" else header.strip()


def api_key(header: str | None, *, bare_ok: bool = False) -> str:
    """The API key of an ``Authorization`` header: ``Bearer <key>``, as the platform's API and
    the runpod SDK send it. ``bare_ok`` also takes the key alone, which the job interface
    (``/v2``) accepts because the hosted platform's examples send it so."""
    if not header:
        raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    scheme, _, rest = header.strip().partition(" ")
    if not bare_ok and (scheme.lower() != "bearer" or not rest.strip()):
        raise Unauthorized(
            "send the API key as 'Authorization: Bearer <key>' "
            "(the key alone is accepted on /v2 only)"
        )
    return _strip_scheme(header)


def worker_token(header: str | None) -> str:
    """A worker's token: the header as the runpod SDK sends it (the token alone), or after
    ``Bearer``."""
    if not header:
        raise Unauthorized("missing worker token")
    return _strip_scheme(header)
