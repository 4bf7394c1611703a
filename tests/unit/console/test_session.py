"""The console's session cookie and CSRF tokens: signed, expiring, bound to their nonce."""

from __future__ import annotations

from skiff.console import csrf
from skiff.console.session import SESSION_SECONDS, Sessions

SECRET = b"s" * 32


async def load() -> bytes:
    return SECRET


async def test_a_session_reads_back_what_was_issued() -> None:
    sessions = Sessions(load)
    value, issued = await sessions.issue("digest-1", now=1000.0)
    read = await sessions.read(value, now=1000.0 + SESSION_SECONDS - 1)
    assert read == issued
    assert read is not None and read.key_digest == "digest-1"


async def test_the_cookie_holds_no_key_and_a_fresh_nonce_each_time() -> None:
    sessions = Sessions(load)
    first, one = await sessions.issue("digest-1", now=1000.0)
    second, two = await sessions.issue("digest-1", now=1000.0)
    assert one.nonce != two.nonce and first != second


async def test_an_expired_session_is_none() -> None:
    sessions = Sessions(load)
    value, _ = await sessions.issue("digest-1", now=1000.0)
    assert await sessions.read(value, now=1000.0 + SESSION_SECONDS) is None
    assert await sessions.read(value, now=999.0) is None


async def test_an_altered_or_foreign_cookie_is_none() -> None:
    sessions = Sessions(load)
    value, _ = await sessions.issue("digest-1", now=1000.0)
    payload, signature = value.split(".")
    forged, _ = await Sessions(lambda: _other()).issue("digest-2", now=1000.0)
    for bad in (
        None,
        "",
        "nodot",
        f"{payload}.{signature[:-2]}xx",
        f"{payload[:-2]}xx.{signature}",
        forged,
        f"{value}.extra",
    ):
        assert await sessions.read(bad, now=1000.0) is None


async def _other() -> bytes:
    return b"o" * 32


def test_csrf_tokens_are_bound_to_their_nonce_and_secret() -> None:
    token = csrf.token(SECRET, "nonce-1")
    assert csrf.valid(SECRET, "nonce-1", token)
    assert not csrf.valid(SECRET, "nonce-2", token)
    assert not csrf.valid(b"o" * 32, "nonce-1", token)
    assert not csrf.valid(SECRET, "nonce-1", None)
    assert not csrf.valid(SECRET, None, token)
