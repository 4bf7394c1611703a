"""Identifiers: random, URL-safe, shaped like the reference's so clients feel at home."""

from __future__ import annotations

import os
import secrets
import time
import uuid

_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
_MS_BITS = 48
_RANDOM_BITS = 80
_VERSION_7 = 0x7 << 76
_VERSION_MASK = 0xF << 76
_VARIANT_RFC = 0x2 << 62
_VARIANT_MASK = 0x3 << 62


def short_id(length: int = 14) -> str:
    """Endpoint, template, registry-auth and worker ids: lowercase alphanumerics."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def made_by_short_id(text: str, length: int = 14) -> bool:
    """Whether ``text`` has the shape ``short_id(length)`` gives: a folder named so can be one
    of a record's, one named otherwise (the pods' volumes, ``pods``) is not."""
    return len(text) == length and all(c in _ALPHABET for c in text)


def time_ordered_uuid(now_ms: int | None = None) -> uuid.UUID:
    """A version-7 UUID (RFC 9562): 48 bits of Unix milliseconds, then 74 random bits.

    Job ids are the key of the biggest index; random ones (version 4) land on random pages of
    it, so with a million jobs stored every insert dirtied a different page. Ids in time order
    are appended at its end. They look like any other UUID and stay unguessable (74 random
    bits); only the moment of submission can be read from them, which ``/status`` shows anyway.
    The wall clock (not the injectable one) is right here: it only orders, it decides nothing.
    """
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    value = (ms & ((1 << _MS_BITS) - 1)) << _RANDOM_BITS
    value |= int.from_bytes(os.urandom(_RANDOM_BITS // 8), "big")
    value = (value & ~_VERSION_MASK) | _VERSION_7
    value = (value & ~_VARIANT_MASK) | _VARIANT_RFC
    return uuid.UUID(int=value)


def job_id(sync: bool) -> str:
    base = f"{time_ordered_uuid()}-u1"
    return f"sync-{base}" if sync else base
