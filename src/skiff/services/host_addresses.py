"""This host's own addresses: what a webhook may not reach however public the address is.

A webhook's delivery comes from the server itself, so one aimed at an address of this host's
own interfaces reaches every service that listens on all of them (a worker's or a pod's ports,
a database bound to ``0.0.0.0``) from inside, where no firewall in front of the host applies.
A host whose interfaces carry only private addresses is covered by the private-address rule
already (``domain/webhooks.py``); this is for one with a public address of its own (a bare-metal
or dedicated server). An address the host is reached by through a NAT is not on any of its
interfaces and is not known here (``docs/deployment.md``, "Webhooks").

The interfaces are read with psutil (``getifaddrs``) at most every ``REFRESH_SECONDS`` (on the
monotonic clock, injected): an address the host gains is refused from the next reading, and
one that fails is tried again at the next check, the last reading standing meanwhile."""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable

import psutil
from attrs import define, field

from skiff.domain.webhooks import carried_ipv4

log = logging.getLogger(__name__)

#: How long one reading of the interfaces' addresses is used.
REFRESH_SECONDS = 30.0

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def interface_addresses() -> frozenset[IpAddress]:
    """Every IPv4 and IPv6 address on this host's interfaces, up or down."""
    found: set[IpAddress] = set()
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            parsed = _parsed(address.address)
            if parsed is not None:
                found.add(parsed)
    return frozenset(found)


def _parsed(address: str) -> IpAddress | None:
    """An address as ``ipaddress`` reads it (an IPv6 zone dropped; one that carries an IPv4
    address, as the public-address rule reads it, read as that: ``carried_ipv4``); None for a
    link-layer address or anything else that is no IP."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        return carried_ipv4(ip) or ip
    return ip


@define(eq=False, repr=False, slots=False)
class HostAddresses:
    """Whether an address is one of this host's (``holds``). ``read``: the interfaces' addresses
    (tests give a host its addresses); ``monotonic``: the clock of the refreshes (a manual one
    in tests)."""

    _monotonic: Callable[[], float] = time.monotonic
    _read: Callable[[], frozenset[IpAddress]] = interface_addresses
    _refresh_seconds: float = REFRESH_SECONDS
    _known: frozenset[IpAddress] = field(init=False, factory=frozenset)
    #: When the last reading that succeeded was made; None: none has yet.
    _read_at: float | None = field(init=False, default=None)

    def holds(self, address: str) -> bool:
        ip = _parsed(address)
        if ip is None:
            return False
        now = self._monotonic()
        if self._read_at is None or now - self._read_at >= self._refresh_seconds:
            try:
                self._known = self._read()
            except OSError as exc:
                # The last reading stands, and the next check reads again.
                log.warning("reading this host's addresses failed: %s", exc)
            else:
                self._read_at = now
        return ip in self._known
