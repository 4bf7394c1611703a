"""Identifiers: random, URL-safe, shaped like the reference's so clients feel at home."""

from __future__ import annotations

import secrets
import uuid

_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def short_id(length: int = 14) -> str:
    """Endpoint, template, registry-auth and worker ids: lowercase alphanumerics."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def job_id(sync: bool) -> str:
    base = f"{uuid.uuid4()}-u1"
    return f"sync-{base}" if sync else base
