"""Webhook rules without I/O: the signing secret, which addresses a delivery may reach, and
when a failed delivery is tried again (2 more attempts, 10 s apart)."""

from __future__ import annotations

import base64
import ipaddress
import secrets

SECRET_PREFIX = "whsec_"
MAX_ATTEMPTS = 3
RETRY_DELAY_SECONDS = 10.0


def new_webhook_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def is_public_address(address: str) -> bool:
    """False for loopback, private, link-local, multicast, reserved and unspecified addresses
    (IPv4 and IPv6, IPv4-mapped included): a webhook must not be a way into the local network."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


def next_attempt(attempts_made: int, now: float) -> float | None:
    """When to try again after ``attempts_made`` failed attempts; None when none is left."""
    if attempts_made >= MAX_ATTEMPTS:
        return None
    return now + RETRY_DELAY_SECONDS
