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


#: NAT64's well-known prefix (RFC 6052): an address in it reaches the IPv4 address in its
#: last 32 bits, on a network that translates.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def is_public_address(address: str) -> bool:
    """Only an address of the internet at large (``is_global``): not loopback, private,
    link-local, multicast, reserved, unspecified, nor the shared address space of carrier NAT
    and overlay networks (100.64.0.0/10, where some clouds keep their metadata service), nor
    IPv6's site-local; an IPv6 address that carries an IPv4 one (mapped, 6to4, Teredo, NAT64)
    is judged by that. A webhook must not be a way into the local network."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        carried = carried_ipv4(ip)
        if carried is not None:
            return is_public_address(str(carried))
        if ip.is_site_local:
            return False
    return ip.is_global and not (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


def carried_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries and reaches (IPv4-mapped, 6to4, a Teredo client's,
    NAT64's), if any."""
    teredo_client = ip.teredo[1] if ip.teredo else None
    nat64 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64 else None
    return ip.ipv4_mapped or ip.sixtofour or teredo_client or nat64


def next_attempt(attempts_made: int, now: float) -> float | None:
    """When to try again after ``attempts_made`` failed attempts; None when none is left."""
    if attempts_made >= MAX_ATTEMPTS:
        return None
    return now + RETRY_DELAY_SECONDS
