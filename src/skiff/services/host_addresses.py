"""This host's own addresses: what a webhook may not reach however public the address is.

A webhook's delivery comes from the server itself, so one aimed at an address of this host's
own interfaces reaches every service that listens on all of them (a worker's or a pod's ports,
a database bound to ``0.0.0.0``) from inside, where no firewall in front of the host applies.
A host whose interfaces carry only private addresses is covered by the private-address rule
already (``domain/webhooks.py``); this is for one with a public address of its own (a bare-metal
or dedicated server). An address the host is reached by through a NAT is not on any of its
interfaces and is not known here unless it is in a replica's URL (``docs/jobs.md``, "Webhooks").

Replicas on one database reach each other as they reach themselves: a delivery from one aimed
at another's address reaches that host's services from inside just the same. So each replica
publishes its interfaces' addresses with its row, and each also refuses the others' published
addresses and their URLs' (``PeerAddresses``: the cluster's list of live replicas, their URLs'
names looked up, before the replica serves and every ``REFRESH_SECONDS`` after, each round
publishing this host's addresses anew when they changed; an address once learnt stays for the
process's life).

The interfaces are read with psutil (``getifaddrs``) at most every ``REFRESH_SECONDS`` (on the
monotonic clock, injected): an address the host gains is refused from the next reading, and
one that fails is tried again at the next check, the last reading standing meanwhile."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import psutil
from attrs import define, field

from skiff.domain.webhooks import carried_ipv4

log = logging.getLogger(__name__)

#: How long one reading of the interfaces' addresses is used.
REFRESH_SECONDS = 30.0

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: Every live replica's URL and published addresses, by id (``Cluster.hosts``).
PeerHosts = Callable[[], Awaitable[dict[str, tuple[str, list[str]]]]]
#: Every address a host name stands for, given the port (``webhooks.NameLookups.resolve``).
Lookup = Callable[[str, int], Awaitable[list[str]]]
#: How long a replica's name may take to look up.
LOOKUP_SECONDS = 5.0


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
    #: The other replicas' addresses (``PeerAddresses``).
    _peers: frozenset[IpAddress] = field(init=False, factory=frozenset)

    def know_peers(self, addresses: frozenset[IpAddress]) -> None:
        self._peers = addresses

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
        return ip in self._known or ip in self._peers


async def _addresses_of(url: str, lookup: Lookup) -> frozenset[IpAddress]:
    """The addresses of a replica's URL: its host's, given as an address or looked up by name
    (``OSError`` or ``TimeoutError`` when the lookup fails)."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return frozenset()
    literal = _parsed(host)
    if literal is not None:
        return frozenset({literal})
    port = parts.port or (443 if parts.scheme == "https" else 80)
    async with asyncio.timeout(LOOKUP_SECONDS):
        found = await lookup(host, port)
    return frozenset(ip for ip in map(_parsed, found) if ip is not None)


async def refresh_peers(
    host: HostAddresses,
    hosts: dict[str, tuple[str, list[str]]],
    lookup: Lookup,
    known: dict[str, frozenset[IpAddress]],
) -> dict[str, frozenset[IpAddress]]:
    """Tell ``host`` the addresses of the replicas in ``hosts`` (id -> URL and published
    addresses) besides those it knew (``known``: every address learnt so far, by replica), and
    return them all for the next round. A replica that left the list (restarting, its
    connection to the database lost) keeps its addresses: its host still runs what a delivery
    must not reach. A URL that cannot be read or looked up keeps what its replica had."""
    fresh = dict(known)
    for replica, (url, published) in hosts.items():
        addresses = set(known.get(replica, ()))
        addresses.update(ip for ip in map(_parsed, published) if ip is not None)
        try:
            addresses.update(await _addresses_of(url, lookup))
        except Exception as exc:  # a lookup failed, or a URL no parser reads: the others go on
            log.warning("reading the replica at %s failed: %s", url, exc or type(exc).__name__)
        fresh[replica] = frozenset(addresses)
    host.know_peers(frozenset().union(*fresh.values()))
    return fresh


@define(eq=False, repr=False, slots=False)
class PeerAddresses:
    """What ``host`` is told of the other replicas (``refresh_peers``): a round now
    (``learn``, bounded, before the replica serves) and one every ``every`` seconds after
    (``follow``, until cancelled). Each round first tells the others this host's addresses
    anew (``publish``: ``Cluster.readdress``), so that one the host gained after its replica
    started reaches their lists too."""

    _host: HostAddresses
    _peers: PeerHosts
    _lookup: Lookup
    _every: float = REFRESH_SECONDS
    #: Bounds a round: this host's addresses published, the list read, every name looked up.
    _round_seconds: float = 3 * LOOKUP_SECONDS
    _publish: Callable[[], Awaitable[None]] | None = None
    _known: dict[str, frozenset[IpAddress]] = field(init=False, factory=dict)

    async def learn(self) -> None:
        try:
            async with asyncio.timeout(self._round_seconds):
                await self._publish_own()
                hosts = await self._peers()
                self._known = await refresh_peers(self._host, hosts, self._lookup, self._known)
        except Exception as exc:  # the database away, a round too slow: the next reads again
            log.warning("reading the replicas' addresses failed: %s", exc or type(exc).__name__)

    async def _publish_own(self) -> None:
        if self._publish is None:
            return
        try:
            await self._publish()
        except Exception as exc:  # the database away: the others are still read, if they can be
            log.warning("publishing this host's addresses failed: %s", exc or type(exc).__name__)

    async def follow(self) -> None:
        while True:
            await asyncio.sleep(self._every)
            await self.learn()
