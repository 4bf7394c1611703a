"""What the console terminal's WebSocket takes (``console/terminal_protocol.py``): sizes in the
URL and in resize frames, refused with words that say what was expected; its close reasons cut
to a close frame's size; and the Origin check, where another port of the same host is
another site."""

from __future__ import annotations

import pytest

from skiff.console.terminal_protocol import (
    REASON_BYTES,
    BadInput,
    close_reason,
    origin_allowed,
    resize_of,
    size_in_query,
    terminal_size,
)
from skiff.domain.pod_sessions import TerminalSize


def test_sizes_in_range_are_taken() -> None:
    assert terminal_size(80, 24) == TerminalSize(80, 24)
    assert terminal_size(1, 1000) == TerminalSize(1, 1000)
    assert size_in_query("120", "40") == TerminalSize(120, 40)
    assert size_in_query(None, None) is None
    assert resize_of('{"resize": [100, 30]}') == TerminalSize(100, 30)


@pytest.mark.parametrize(
    ("cols", "rows", "said"),
    [
        (0, 24, "cols: a whole number from 1 to 1000, not 0"),
        (80, 1001, "rows: a whole number from 1 to 1000, not 1001"),
        (80.0, 24, "cols: a whole number"),
        (True, 24, "cols: a whole number"),
        ("80", 24, "cols: a whole number"),
        (80, None, "rows: a whole number"),
    ],
)
def test_sizes_out_of_range_or_not_whole_are_refused(cols: object, rows: object, said: str) -> None:
    with pytest.raises(BadInput, match=said):
        terminal_size(cols, rows)


@pytest.mark.parametrize(
    ("cols", "rows", "said"),
    [
        ("80", None, "both cols and rows, or neither"),
        ("eighty", "24", "whole numbers, not 'eighty' and '24'"),
        ("-1", "24", "cols: a whole number from 1"),
    ],
)
def test_a_size_in_the_url_is_both_numbers(cols: str | None, rows: str | None, said: str) -> None:
    with pytest.raises(BadInput, match=said):
        size_in_query(cols, rows)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("hello", "not JSON"),
        ("", "not JSON"),
        ("[80, 24]", "resize"),
        ('{"resize": [80]}', "resize"),
        ('{"resize": "80x24"}', "resize"),
        ('{"resize": [80, 24], "cols": 1}', "resize"),
        ('{"size": [80, 24]}', "resize"),
        ('{"resize": [80, -2]}', "rows: a whole number"),
    ],
)
def test_a_text_frame_is_only_a_resize(text: str, said: str) -> None:
    with pytest.raises(BadInput, match=said):
        resize_of(text)


def test_a_close_reason_fits_a_close_frame() -> None:
    assert close_reason("exit code 3") == "exit code 3"
    cut = close_reason("é" * 200)
    assert len(cut.encode()) <= REASON_BYTES and cut.endswith("...")
    assert close_reason("x" * REASON_BYTES) == "x" * REASON_BYTES


PUBLIC = ["http://127.0.0.1:8000"]


@pytest.mark.parametrize(
    ("origin", "scheme", "host"),
    [
        ("http://127.0.0.1:8000", "ws", "127.0.0.1:8000"),
        ("http://Console.Example:8000", "ws", "console.example:8000"),
        ("https://console.example", "wss", "console.example"),
        ("https://console.example", "wss", "console.example:443"),
        # Behind a TLS-terminating proxy the socket is plain; the public URL is the page's.
        ("https://skiff.example", "ws", "skiff.example"),
    ],
)
def test_the_consoles_own_origin_is_allowed(origin: str, scheme: str, host: str) -> None:
    public = [*PUBLIC, "https://skiff.example/"]
    assert origin_allowed(origin, scheme, host, public)


@pytest.mark.parametrize(
    ("origin", "scheme", "host"),
    [
        (None, "ws", "127.0.0.1:8000"),
        ("", "ws", "127.0.0.1:8000"),
        ("null", "ws", "127.0.0.1:8000"),
        ("http://evil.example", "ws", "127.0.0.1:8000"),
        # A pod's HTTP port on the same host: another origin, though it gets the cookie.
        ("http://127.0.0.1:8888", "ws", "127.0.0.1:8000"),
        ("http://127.0.0.1", "ws", "127.0.0.1:8000"),
        ("https://127.0.0.1:8000", "ws", "127.0.0.1:9000"),
        ("http://console.example", "wss", "console.example"),
        ("http://127.0.0.1:8000.evil.example", "ws", "127.0.0.1:8000"),
        ("http://127.0.0.1:8000/path", "ws", "127.0.0.1:8000"),
        ("file://127.0.0.1:8000", "ws", "127.0.0.1:8000"),
        ("http://127.0.0.1:8000", "ws", None),
    ],
)
def test_any_other_origin_is_refused(origin: str | None, scheme: str, host: str | None) -> None:
    assert not origin_allowed(origin, scheme, host, PUBLIC)
