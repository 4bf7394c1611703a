"""This host's own addresses (``HostAddresses``), which no webhook may reach: read from the real
interfaces, read again once a reading is ``REFRESH_SECONDS`` old (on a manual clock), and
refused as a webhook's host, given by address or by a name that resolves to one. This machine
has no public address on an interface, so the host's public address is given to the checks
(``read``), a stand-in for a bare-metal server's. The other replicas' addresses are learnt from
their URLs, names looked up by a stand-in lookup (the real one, against a real name server, in
``integration/services/test_webhook_lookups.py``)."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from skiff.clock import ManualClock
from skiff.errors import Invalid
from skiff.services.host_addresses import (
    REFRESH_SECONDS,
    HostAddresses,
    IpAddress,
    PeerAddresses,
    interface_addresses,
    refresh_peers,
)
from skiff.services.webhooks import check_webhook_url

#: A public address, as the host's own in these tests.
OURS = "93.184.216.34"
OTHER = "93.184.216.35"
#: Bounds how long a broken test hangs; never what a test asserts.
HANG_SECONDS = 30.0


def host_with(*addresses: str) -> HostAddresses:
    held = frozenset(ipaddress.ip_address(a) for a in addresses)
    return HostAddresses(ManualClock().now, lambda: held)


def test_the_interfaces_are_read_loopback_among_them() -> None:
    addresses = interface_addresses()
    assert ipaddress.ip_address("127.0.0.1") in addresses
    assert all(isinstance(a, ipaddress.IPv4Address | ipaddress.IPv6Address) for a in addresses)


def test_a_reading_is_used_until_it_is_old_and_an_address_gained_counts_from_the_next() -> None:
    clock = ManualClock()
    readings: list[frozenset[IpAddress]] = [
        frozenset({ipaddress.ip_address(OURS)}),
        frozenset({ipaddress.ip_address(OURS), ipaddress.ip_address(OTHER)}),
    ]
    reads: list[int] = []

    def read() -> frozenset[IpAddress]:
        reads.append(1)
        return readings[min(len(reads), len(readings)) - 1]

    host = HostAddresses(clock.now, read)
    assert host.holds(OURS) and not host.holds(OTHER)
    clock.advance(REFRESH_SECONDS - 1)
    assert not host.holds(OTHER)
    assert len(reads) == 1

    clock.advance(1)
    assert host.holds(OTHER)
    assert len(reads) == 2


def test_a_failed_first_reading_is_tried_again_at_the_next_check() -> None:
    clock = ManualClock()
    calls: list[int] = []

    def read() -> frozenset[IpAddress]:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("not yet")
        return frozenset({ipaddress.ip_address(OURS)})

    host = HostAddresses(clock.now, read)
    assert not host.holds(OURS)  # nothing read yet
    assert host.holds(OURS)  # at once, not a refresh period later
    assert len(calls) == 2


def test_a_failed_reading_leaves_the_last_one_in_force() -> None:
    clock = ManualClock()
    first = frozenset({ipaddress.ip_address(OURS)})
    calls: list[int] = []

    def read() -> frozenset[IpAddress]:
        calls.append(1)
        if len(calls) > 1:
            raise OSError("no interfaces today")
        return first

    host = HostAddresses(clock.now, read)
    assert host.holds(OURS)
    clock.advance(REFRESH_SECONDS)
    assert host.holds(OURS)
    assert len(calls) == 2


@pytest.mark.parametrize(
    "carrier",
    [f"::ffff:{OURS}", "2002:5db8:d822::1", "64:ff9b::5db8:d822"],
    ids=["ipv4-mapped", "6to4", "nat64"],
)
def test_an_ipv6_address_carrying_one_of_ours_is_ours(carrier: str) -> None:
    assert host_with(OURS).holds(carrier)  # 93.184.216.34 is 5db8:d822


def test_a_link_layer_address_is_none_of_ours() -> None:
    assert not host_with(OURS).holds("52:54:00:12:34:56")


@pytest.mark.parametrize(
    "url",
    [
        f"http://{OURS}:6379/",
        f"https://[::ffff:{OURS}]/hook",
        "http://[2002:5db8:d822::1]/",
        "http://[64:ff9b::5db8:d822]/",
    ],
)
async def test_an_address_of_this_host_is_refused_though_it_is_public(url: str) -> None:
    async def nothing(host: str, port: int) -> list[str]:
        raise AssertionError("a literal address is not looked up")

    with pytest.raises(Invalid) as info:
        await check_webhook_url(url, False, nothing, host_with(OURS))
    assert "is an address of this server" in info.value.message
    assert "SKIFF_WEBHOOK_ALLOW_PRIVATE=true" in info.value.message
    assert info.value.field == "webhook"


async def test_a_name_that_resolves_to_this_host_is_refused() -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return [OTHER, OURS]

    with pytest.raises(Invalid) as info:
        await check_webhook_url("https://hooks.example.com/x", False, resolve, host_with(OURS))
    assert f"hooks.example.com resolves to {OURS}, an address of this server" in (
        info.value.message
    )


async def test_another_public_address_and_the_operators_setting_still_pass() -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return [OTHER]

    await check_webhook_url(f"http://{OTHER}/hook", False, resolve, host_with(OURS))
    await check_webhook_url("https://hooks.example.com/x", False, resolve, host_with(OURS))
    # The operator's own choice: no check at all.
    await check_webhook_url(f"http://{OURS}/hook", True, resolve, host_with(OURS))


# -- the other replicas' addresses (``refresh_peers``, ``PeerAddresses``) --------------------

PEER_NAME = "replica-b.example"
PEER_V6 = "2606:2800:220:1:248:1893:25c8:1946"


class Names:
    """A lookup of replicas' names: each answers with its addresses, or fails as asked."""

    def __init__(self, records: dict[str, list[str]]) -> None:
        self.records = records
        self.failing: set[str] = set()
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        if host in self.failing:
            raise OSError("no answer")
        return self.records[host]


async def test_the_other_replicas_addresses_are_refused_published_or_in_their_urls() -> None:
    host = host_with(OURS)
    names = Names({PEER_NAME: [OTHER]})
    hosts = {
        "r-1": (f"http://{OURS}:8000", []),
        "r-2": (f"https://{PEER_NAME}", []),
        # Its URL private, its host's public addresses published.
        "r-3": ("http://10.0.0.7:8000", ["10.0.0.7", PEER_V6, "93.184.216.36"]),
    }
    assert not host.holds(OTHER)
    await refresh_peers(host, hosts, names, {})
    assert host.holds(OTHER) and host.holds(PEER_V6) and host.holds("93.184.216.36")
    assert names.asked == [(PEER_NAME, 443)]  # addresses are not looked up
    with pytest.raises(Invalid, match="an address of this server"):
        await check_webhook_url(f"http://{OTHER}/hook", False, names, host)


async def test_a_failed_lookup_or_a_replica_gone_from_the_list_keeps_its_addresses() -> None:
    """A replica restarting, or cut off from the database, leaves the list; its host still
    runs what a delivery must not reach."""
    host = host_with(OURS)
    names = Names({PEER_NAME: [OTHER]})
    hosts = {"r-1": (f"http://{OURS}:8000", []), "r-2": (f"http://{PEER_NAME}:8000", [])}
    known = await refresh_peers(host, hosts, names, {})
    names.failing.add(PEER_NAME)
    known = await refresh_peers(host, hosts, names, known)
    assert host.holds(OTHER)
    await refresh_peers(host, {"r-1": (f"http://{OURS}:8000", [])}, names, known)
    assert host.holds(OTHER)


async def test_a_url_no_parser_reads_leaves_its_published_addresses_and_the_others() -> None:
    host = host_with(OURS)
    names = Names({PEER_NAME: [OTHER]})
    hosts = {
        "r-1": ("http://replica-c.example:8o00", [PEER_V6]),
        "r-2": (f"http://{PEER_NAME}:8000", []),
    }
    await refresh_peers(host, hosts, names, {})
    assert host.holds(OTHER) and host.holds(PEER_V6)


async def test_the_replicas_are_learnt_at_once_and_again_after_a_failed_reading() -> None:
    host = host_with(OURS)
    names = Names({PEER_NAME: [OTHER], "replica-c.example": [PEER_V6]})
    readings = 0
    again = asyncio.Event()

    async def peers() -> dict[str, tuple[str, list[str]]]:
        nonlocal readings
        readings += 1
        if readings == 2:
            raise ConnectionError("the database went away")
        if readings == 3:
            again.set()
            return {"r-3": ("http://replica-c.example:8000", [])}
        return {"r-2": (f"http://{PEER_NAME}:8000", [])}

    addresses = PeerAddresses(host, peers, names, every=0)
    await addresses.learn()
    assert host.holds(OTHER) and not host.holds(PEER_V6)
    following = asyncio.create_task(addresses.follow())
    try:
        await asyncio.wait_for(again.wait(), HANG_SECONDS)
        await asyncio.sleep(0)
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
    assert host.holds(PEER_V6) and host.holds(OTHER)


async def test_a_round_that_hangs_is_given_up_and_the_replica_serves() -> None:
    host = host_with(OURS)

    async def peers() -> dict[str, tuple[str, list[str]]]:
        await asyncio.Event().wait()  # the database never answers
        return {}

    await asyncio.wait_for(
        PeerAddresses(host, peers, Names({}), round_seconds=0.01).learn(), HANG_SECONDS
    )
    assert not host.holds(OTHER)


async def test_each_round_publishes_this_hosts_addresses_before_reading_the_others() -> None:
    host = host_with(OURS)
    steps: list[str] = []

    async def publish() -> None:
        steps.append("published")

    async def peers() -> dict[str, tuple[str, list[str]]]:
        steps.append("read")
        return {"r-2": ("http://replica-b.example:8000", [OTHER])}

    addresses = PeerAddresses(host, peers, Names({}), publish=publish)
    await addresses.learn()
    await addresses.learn()
    assert steps == ["published", "read", "published", "read"]
    assert host.holds(OTHER)


async def test_a_publish_that_fails_still_lets_the_round_read_the_others() -> None:
    host = host_with(OURS)

    async def failing() -> None:
        raise ConnectionError("the database went away")

    async def peers() -> dict[str, tuple[str, list[str]]]:
        return {"r-2": ("http://replica-b.example:8000", [OTHER])}

    await PeerAddresses(host, peers, Names({}), publish=failing).learn()
    assert host.holds(OTHER)


async def test_a_publish_that_hangs_ends_the_round_within_its_bound() -> None:
    host = host_with(OURS)

    async def hanging() -> None:
        await asyncio.Event().wait()  # the database never answers

    async def peers() -> dict[str, tuple[str, list[str]]]:
        return {"r-2": ("http://replica-b.example:8000", [OTHER])}

    await asyncio.wait_for(
        PeerAddresses(host, peers, Names({}), round_seconds=0.01, publish=hanging).learn(),
        HANG_SECONDS,
    )
