"""What the load-balancing proxy sends a worker (``services/lb_proxy.request_head``): the
path as the caller escaped it, the caller's headers less what concerns one hop or how the
request travelled, and skiff's own ``X-Forwarded-*``."""

from __future__ import annotations

import pytest

from skiff.services.lb_proxy import Forwarding, request_head, wire_path


def _forwarding(path: str, headers: list[tuple[str, str]]) -> Forwarding:
    return Forwarding(
        method="GET",
        path=path,
        query=b"q=1",
        headers=headers,
        body=None,
        client="198.51.100.7",
        scheme="https",
        host="ep1.lb.example.com",
        prefix="",
        lb_key="k",
    )


def _head(headers: list[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    text = request_head("127.0.0.1:9000", _forwarding("/x", headers), chunked=False).decode()
    line, *rest = text.rstrip("\r\n").split("\r\n")
    return line, [(n, v) for n, _, v in (h.partition(": ") for h in rest)]


def test_skiffs_forwarding_headers_replace_the_callers() -> None:
    line, sent = _head(
        [
            ("X-Forwarded-For", "203.0.113.66"),
            ("x-forwarded-proto", "http"),
            ("X-Forwarded-Host", "bank.example"),
            ("X-Forwarded-Port", "1"),
            ("Forwarded", "for=203.0.113.66"),
            ("X-Real-IP", "203.0.113.66"),
            ("Accept", "*/*"),
        ]
    )
    assert line == "GET /x?q=1 HTTP/1.1"
    assert sent == [
        ("host", "127.0.0.1:9000"),
        ("Accept", "*/*"),
        ("x-forwarded-for", "198.51.100.7"),
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "ep1.lb.example.com"),
        ("x-skiff-lb-key", "k"),
    ]


def test_the_headers_a_connection_header_names_stay_on_that_hop() -> None:
    _, sent = _head(
        [
            ("Connection", "keep-alive, X-Secret"),
            ("connection", " x-other "),
            ("X-Secret", "s"),
            ("X-Other", "o"),
            ("Keep-Alive", "timeout=5"),
            ("X-Kept", "yes"),
        ]
    )
    names = [name.lower() for name, _ in sent]
    assert "x-kept" in names
    assert not {"connection", "x-secret", "x-other", "keep-alive"} & set(names)


@pytest.mark.parametrize(
    ("raw_path", "full_path", "path", "sent"),
    [
        # The escaped slash stays one segment, on each form of the route's scope.
        (b"/lb/ep1/a%2Fb/c", "/lb/ep1/a/b/c", "/a/b/c", "/a%2Fb/c"),
        (b"/ep1/a%2fb", "/ep1/a/b", "/a/b", "/a%2fb"),
        (b"/a%2Fb", "/a/b", "/a/b", "/a%2Fb"),
        # Escapes kept as the caller wrote them, where it need not have escaped.
        (b"/lb/ep1/caf%C3%A9/%7Euser", "/lb/ep1/café/~user", "/café/~user", "/caf%C3%A9/%7Euser"),
        # Nothing escaped: the decoded path, escaped again.
        (b"/lb/ep1/a b", "/lb/ep1/a b", "/a b", "/a%20b"),
        (None, "/lb/ep1/café", "/café", "/caf%C3%A9"),
        # A raw path that does not decode to the route's: the route's, escaped again.
        (b"/lb/ep1/zzz%2F", "/lb/ep1/other", "/other", "/other"),
        # An escaped slash in the prefix (no endpoint id holds one): the route's path.
        (b"/lb/e%2Fp/x%2Fy", "/lb/e/p/x/y", "/p/x/y", "/p/x/y"),
    ],
)
def test_the_path_goes_as_the_caller_escaped_it(
    raw_path: bytes | None, full_path: str, path: str, sent: str
) -> None:
    assert wire_path(raw_path, full_path, path) == sent
