"""Webhook rules: which addresses a delivery may reach, when it is tried again, and which URLs a
job may name (with the name lookup injected, so no test touches DNS)."""

from __future__ import annotations

import base64
import socket

import pytest

from skiff.domain.webhooks import (
    MAX_ATTEMPTS,
    RETRY_DELAY_SECONDS,
    SECRET_PREFIX,
    is_public_address,
    new_webhook_secret,
    next_attempt,
)
from skiff.errors import Invalid
from skiff.services.webhooks import Resolver, check_webhook_url

NOT_PUBLIC = [
    "127.0.0.1",
    "127.8.9.10",
    "10.0.0.5",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "169.254.169.254",
    "0.0.0.0",
    "::1",
    "fe80::1",
    "fe80::1%eth0",
    "fc00::1",
    "::ffff:127.0.0.1",
    "::ffff:10.1.2.3",
    "224.0.0.1",
    "::",
    # Carrier NAT and overlay networks' shared space, a cloud's metadata service in it.
    "100.64.0.1",
    "100.100.100.200",
    "fec0::1",
    # IPv6 addresses that carry a local IPv4 one: 6to4, Teredo, NAT64.
    "2002:7f00:1::1",
    "2001:0:4136:e378:8000:63bf:f5ff:fffe",
    "64:ff9b::a00:1",
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2001:4860:4860::8888", "64:ff9b::808:808"]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_loopback_private_link_local_and_special_addresses_are_not_public(address: str) -> None:
    assert is_public_address(address) is False


@pytest.mark.parametrize("address", PUBLIC)
def test_internet_addresses_are_public(address: str) -> None:
    assert is_public_address(address) is True


def test_a_new_secret_is_a_standard_webhooks_secret_of_32_bytes() -> None:
    secret = new_webhook_secret()
    assert secret.startswith(SECRET_PREFIX)
    assert len(base64.b64decode(secret.removeprefix(SECRET_PREFIX))) == 32
    assert new_webhook_secret() != secret


def test_a_failed_delivery_is_tried_again_10_s_later_until_3_attempts_are_made() -> None:
    assert MAX_ATTEMPTS == 3 and RETRY_DELAY_SECONDS == 10.0
    assert next_attempt(1, 100.0) == 110.0
    assert next_attempt(2, 110.0) == 120.0
    assert next_attempt(3, 120.0) is None


def resolver(table: dict[str, list[str]]) -> Resolver:
    """A name lookup from a table; an unknown name fails as getaddrinfo does."""

    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]

    return resolve


RESOLVE = resolver(
    {
        "hooks.example.com": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
        "inside.example.com": ["10.0.0.5"],
        "mixed.example.com": ["93.184.216.34", "127.0.0.1"],
        "empty.example.com": [],
    }
)


async def test_a_name_resolving_to_public_addresses_is_accepted() -> None:
    await check_webhook_url("https://hooks.example.com/done?x=1", False, RESOLVE)


async def test_a_public_literal_ip_is_accepted_without_a_lookup() -> None:
    await check_webhook_url("http://93.184.216.34:8080/hook", False, resolver({}))


async def test_a_name_resolving_to_a_private_address_is_refused_with_the_setting_to_allow_it() -> (
    None
):
    with pytest.raises(Invalid) as info:
        await check_webhook_url("https://inside.example.com/hook", False, RESOLVE)
    assert info.value.field == "webhook"
    assert "inside.example.com resolves to 10.0.0.5, a private address" in info.value.message
    assert "SKIFF_WEBHOOK_ALLOW_PRIVATE=true" in info.value.message


async def test_a_name_with_any_non_public_address_is_refused() -> None:
    with pytest.raises(Invalid) as info:
        await check_webhook_url("https://mixed.example.com/hook", False, RESOLVE)
    assert "resolves to 127.0.0.1, a loopback address" in info.value.message


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1:9000/hook", "loopback"),
        ("http://[::1]/hook", "loopback"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://192.168.1.10/hook", "private"),
        ("http://[::ffff:127.0.0.1]/hook", "loopback"),
        ("http://evil.example\\@127.0.0.1/hook", "loopback"),
    ],
)
async def test_a_literal_non_public_ip_is_refused_without_a_lookup(url: str, kind: str) -> None:
    with pytest.raises(Invalid) as info:
        await check_webhook_url(url, False, resolver({}))
    assert f"is a {kind} address" in info.value.message
    assert "SKIFF_WEBHOOK_ALLOW_PRIVATE=true" in info.value.message
    assert info.value.field == "webhook"


async def test_an_unresolvable_name_is_refused() -> None:
    with pytest.raises(Invalid) as info:
        await check_webhook_url("https://nowhere.invalid/hook", False, RESOLVE)
    assert "webhook host nowhere.invalid cannot be resolved" in info.value.message
    assert info.value.field == "webhook"


async def test_a_name_resolving_to_nothing_is_refused() -> None:
    with pytest.raises(Invalid, match="cannot be resolved"):
        await check_webhook_url("https://empty.example.com/hook", False, RESOLVE)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9000/hook",
        "http://localhost/hook",
        "https://inside.example.com/hook",
        "https://nowhere.invalid/hook",
    ],
)
async def test_with_allow_private_any_http_url_is_accepted_without_a_lookup(url: str) -> None:
    async def no_lookup(host: str, port: int) -> list[str]:
        raise AssertionError(f"looked up {host}")

    await check_webhook_url(url, True, no_lookup)


@pytest.mark.parametrize(
    "url", ["ftp://hooks.example.com/x", "/relative/hook", "http:///no-host", "not a url"]
)
@pytest.mark.parametrize("allow_private", [False, True])
async def test_a_url_that_is_not_absolute_http_is_refused(url: str, allow_private: bool) -> None:
    with pytest.raises(Invalid, match="absolute http\\(s\\) URL") as info:
        await check_webhook_url(url, allow_private, RESOLVE)
    assert info.value.field == "webhook"


async def test_the_port_of_the_url_is_passed_to_the_lookup() -> None:
    seen: list[tuple[str, int]] = []

    async def record(host: str, port: int) -> list[str]:
        seen.append((host, port))
        return ["93.184.216.34"]

    await check_webhook_url("https://hooks.example.com/a", False, record)
    await check_webhook_url("http://hooks.example.com:8080/a", False, record)
    assert seen == [("hooks.example.com", 443), ("hooks.example.com", 8080)]
