"""What crosses the console terminal's WebSocket (``terminal_pages.py``), and who may open it.

From the browser: binary frames are what is typed (bytes for the pod's terminal); a text frame
is JSON, ``{"resize": [cols, rows]}``, the only one. The terminal's first size comes with the
URL (``?cols=&rows=``) or, without it, as the first frame. From the server: binary frames are
the terminal's output; a text frame is JSON, ``{"error": why}`` before a refusal, or
``{"ended": how, "exit": code}`` when the session is over (its process exited, the pod
stopped). Then the socket closes: 1000 when the session ended, or one of the ``4xxx`` codes
below, named after the HTTP status they stand for, with the reason in words.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

import orjson

from skiff.domain.pod_sessions import TerminalSize

#: The session ended (its process exited, the pod stopped): the final message says how.
ENDED = 1000
#: A frame the protocol does not have, or a size out of range.
BAD_INPUT = 4400
#: No session cookie, or one no longer valid: sign in again.
SIGN_IN = 4401
#: A session that may not write pods.
FORBIDDEN = 4403
#: Not a pod of the visitor's (another user's is not found either).
NOT_FOUND = 4404
#: The pod does not run (here): there is no process to get into.
NOT_RUNNING = 4409

#: The largest terminal taken: more is no screen, only memory.
MAX_COLS = 1000
MAX_ROWS = 1000
#: A close frame's reason fits in 123 bytes (RFC 6455, 5.5.1).
REASON_BYTES = 123

RESIZE_SHAPE = 'a text frame is {"resize": [cols, rows]}'


class BadInput(Exception):
    """What the browser sent is not the protocol: the words say what was expected."""


def terminal_size(cols: object, rows: object) -> TerminalSize:
    """A terminal ``cols`` wide and ``rows`` high, both whole numbers in range (or refused)."""
    for name, value, most in (("cols", cols, MAX_COLS), ("rows", rows, MAX_ROWS)):
        # bool is an int to Python, not to the protocol.
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
            raise BadInput(f"{name}: a whole number from 1 to {most}, not {value!r}")
    assert isinstance(cols, int) and isinstance(rows, int)
    return TerminalSize(cols, rows)


def size_in_query(cols: str | None, rows: str | None) -> TerminalSize | None:
    """The size the URL gives (``?cols=80&rows=24``); None when it gives none."""
    if cols is None and rows is None:
        return None
    if cols is None or rows is None:
        raise BadInput("the URL gives both cols and rows, or neither")
    try:
        return terminal_size(int(cols), int(rows))
    except ValueError:
        raise BadInput(f"cols and rows: whole numbers, not {cols!r} and {rows!r}") from None


def resize_of(text: str) -> TerminalSize:
    """The size a text frame asks for."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise BadInput(f"not JSON: {RESIZE_SHAPE}") from None
    if not isinstance(doc, dict) or set(doc) != {"resize"}:
        raise BadInput(RESIZE_SHAPE)
    wanted = doc["resize"]
    if not isinstance(wanted, list) or len(wanted) != 2:
        raise BadInput(RESIZE_SHAPE)
    return terminal_size(wanted[0], wanted[1])


def error_frame(why: str) -> str:
    return orjson.dumps({"error": why}).decode()


def ended_frame(how: str, code: int | None) -> str:
    return orjson.dumps({"ended": how, "exit": code}).decode()


def close_reason(text: str) -> str:
    """``text`` cut to what a close frame holds (the full words went in a text frame)."""
    data = text.encode()
    if len(data) <= REASON_BYTES:
        return text
    return data[: REASON_BYTES - 3].decode(errors="ignore") + "..."


def _origin(scheme: str, netloc: str) -> str:
    """``scheme://host[:port]`` as a browser's ``Origin`` writes it: lower case, no default
    port."""
    netloc = netloc.lower()
    default = {"http": ":80", "https": ":443"}.get(scheme)
    if default is not None and netloc.endswith(default):
        netloc = netloc.removesuffix(default)
    return f"{scheme}://{netloc}"


def origin_allowed(
    origin: str | None, socket_scheme: str, host: str | None, public: Iterable[str]
) -> bool:
    """Whether a WebSocket's ``Origin`` is the console's own page.

    Browsers apply no CORS to WebSockets and send the session cookie to any page's socket, so
    this is what stops another site's page from opening a terminal as the visitor. The port
    counts: a page served on another port of the same host (a pod's HTTP port, which any user
    can serve) is another origin, though the cookie goes to it all the same. Allowed: the
    scheme and ``Host`` the socket itself came to, and the server's ``public`` URLs (behind a
    TLS-terminating proxy the socket is plain ``ws`` while the page is ``https``)."""
    if not origin or not host:
        return False
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path:
        return False
    own = {_origin("https" if socket_scheme == "wss" else "http", host)}
    for url in public:
        served = urlsplit(url)
        if served.scheme in ("http", "https") and served.netloc:
            own.add(_origin(served.scheme, served.netloc))
    return _origin(parts.scheme, parts.netloc) in own
