"""Passing one request to a load-balancing worker and its answer back, as they come.

``forward`` leases the least busy ready worker (``Balancer``), sends it the request (its body
streamed through as it arrives) and returns the worker's answer once its status and headers
are in; the body then flows through ``Upstream.chunks`` untouched (no decompression: a
compressed body stays compressed, its length as the worker said), so server-sent events and
chunked answers reach the caller as the worker writes them. The lease is given back when the
body ends, whichever way.

The client is skiff's own (``services/lb_client.py``: httptools' parser in an asyncio
protocol, a pool of kept-alive connections per worker), not a general one: a proxy pays its
client's cost on every request (docs/performance.md, B8). It adds none of its own headers (no
``User-Agent``, ``Accept`` or ``Accept-Encoding`` the caller did not send): the worker sees the
caller's request, with its own ``Host``, the ``X-Forwarded-*`` headers and the endpoint's
``X-Skiff-Lb-Key`` (``domain/keys.py``), by which it can tell skiff's proxy from another
tenant's code that reached its port on the host's loopback. What concerns one hop only is
dropped (the hop-by-hop headers and any the caller's ``Connection`` names), and so are the
caller's own forwarding headers: the ``X-Forwarded-*`` the worker gets are skiff's, which
already honour a trusted front proxy (uvicorn's ``FORWARDED_ALLOW_IPS``), where a caller's
could name any client. The path goes as the caller escaped it (``a%2Fb`` stays one segment).

A connection the worker refused (nothing of the request sent) goes to another worker: that
is safe for any method. Once any of the request may have reached the worker, nothing is
retried: a failure before the answer's head is a 502 naming the worker, one in the middle of
the body ends the answer early (its head is sent already).

A request in flight holds the caller's connection and, once at a worker, a socket to it, for
up to the endpoint's ``executionTimeoutMs``: ``InFlight`` caps how many each endpoint may have
(``SKIFF_LB_MAX_IN_FLIGHT``), so one stuck worker cannot take the server's open files, and the
caller of ``forward`` ends a request whose caller left (``api/lb.py``) rather than leave it to
that timeout.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote

from skiff.domain.endpoints import Endpoint
from skiff.domain.keys import LB_KEY_HEADER
from skiff.errors import BadGateway, TooManyRequests
from skiff.services.balancer import Balancer, Lease
from skiff.services.lb_client import Connection, Head, NotConnected, Pool, UpstreamError

log = logging.getLogger(__name__)

#: How long a worker may take to accept a connection before another is tried.
CONNECT_TIMEOUT_SECONDS = 5.0
#: How many workers a request whose connection was refused tries in all.
MAX_CONNECT_TRIES = 3
#: The ``Retry-After`` of a request refused because its endpoint has too many in flight: the
#: same as for no worker ready (``balancer.RETRY_AFTER_SECONDS``), the other 503 of these
#: endpoints; a full endpoint frees slots as its requests end, not from one second to the next.
BUSY_RETRY_AFTER_SECONDS = 5
#: Headers that concern one hop only (RFC 9110 7.6.1), never passed on either way.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
#: Not passed to the worker either: the host is the worker's own, and the caller's API key is
#: for skiff (the worker's code never sees it).
NOT_FORWARDED = HOP_BY_HOP | {"host", "authorization", LB_KEY_HEADER}
#: The caller's own word on how its request travelled: never passed on, since the worker gets
#: skiff's (``X-Forwarded-*``, the one place that knows), and a caller's could name any client.
CALLERS_FORWARDING = frozenset({"forwarded", "x-real-ip"})
FORWARDED_PREFIX = "x-forwarded-"
_NEVER_PASSED = NOT_FORWARDED | CALLERS_FORWARDING
#: Not passed back: skiff's server writes its own ``date`` and ``server``, as a proxy does.
NOT_RETURNED = frozenset(name.encode("latin-1") for name in HOP_BY_HOP | {"date", "server"})


@dataclass(frozen=True, slots=True)
class Forwarding:
    """What the caller sent, as the proxy passes it on."""

    method: str
    #: The path under the endpoint's URL as it goes on the wire (``wire_path``: escaped as the
    #: caller escaped it, ``/generate``), and the raw query string.
    path: str
    query: bytes
    headers: Sequence[tuple[str, str]]
    #: None when the request has none (see ``has_body``): nothing is sent after its head.
    #: Bytes when it was read whole first (a small one, ``api/lb.py``): sent with the head in
    #: one write, and sent again to another worker if the first refused the connection.
    body: AsyncIterator[bytes] | bytes | None
    #: What the worker is told about the original request (``X-Forwarded-*``).
    client: str | None
    scheme: str
    host: str | None
    prefix: str
    #: The endpoint's ``keys.lb_key``, sent as ``LB_KEY_HEADER`` (a caller's own is dropped).
    lb_key: str | None = None


class EndpointBusy(TooManyRequests):
    """The endpoint has ``InFlight.cap`` requests in flight already: 503 with ``Retry-After``,
    as for no worker ready (``NoWorkerReady``)."""

    status_code = 503


class InFlight:
    """Each endpoint's requests in flight through this server's proxy, from when the endpoint
    is known (waiting for a worker included) until the answer is out or abandoned, capped at
    ``cap`` per endpoint (0: no cap). Whoever ``enter``s must ``leave`` once, however the
    request ends."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._counts: dict[str, int] = {}

    def enter(self, endpoint_id: str) -> None:
        """Count one more request for the endpoint, or raise ``EndpointBusy`` (counting
        nothing) when it has ``cap`` already."""
        count = self._counts.get(endpoint_id, 0)
        if self.cap and count >= self.cap:
            raise EndpointBusy(
                f"endpoint {endpoint_id} has too many requests in flight ({self.cap}, "
                "SKIFF_LB_MAX_IN_FLIGHT); try again shortly",
                BUSY_RETRY_AFTER_SECONDS,
            )
        self._counts[endpoint_id] = count + 1

    def leave(self, endpoint_id: str) -> None:
        count = self._counts[endpoint_id] - 1
        if count:
            self._counts[endpoint_id] = count
        else:
            del self._counts[endpoint_id]  # an endpoint with none keeps no entry

    def of(self, endpoint_id: str) -> int:
        return self._counts.get(endpoint_id, 0)


class _Body:
    """The caller's body, noting whether any of it was handed to the connection."""

    def __init__(self, source: AsyncIterator[bytes]) -> None:
        self._source = source
        self.started = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._source:
            self.started = True
            yield chunk


class Upstream:
    """The worker's answer: status and headers now, the body through ``chunks``. However the
    answer ends (its end, a broken connection, the caller gone before or during the body),
    ``aclose`` gives the lease back once and closes the connection to the worker (or hands it
    back to the pool, when the body was read to its end)."""

    def __init__(
        self,
        balancer: Balancer,
        lease: Lease,
        pool: Pool,
        conn: Connection,
        head: Head,
        read_timeout: float,
    ) -> None:
        self._balancer = balancer
        self.lease = lease
        self._pool = pool
        self._conn = conn
        self._read_timeout = read_timeout
        self._released = False
        self.status = head.status
        #: As the worker wrote them (repeated ones such as Set-Cookie included), names in lower
        #: case: the bytes an ASGI answer sends.
        self.raw_headers = [(n, v) for n, v in head.headers if n not in NOT_RETURNED]

    def _release(self, broken: bool = False) -> None:
        if not self._released:
            self._released = True
            self._balancer.release(self.lease, connection_failed=broken)

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._conn.body(self._read_timeout):
                yield chunk
        except (UpstreamError, TimeoutError) as exc:
            # Given back first: nothing below may keep the lease held.
            self._release(broken=isinstance(exc, UpstreamError))
            log.warning(
                "worker %s broke off its answer to a request: %r", self.lease.worker_id, exc
            )
            raise

    async def aclose(self) -> None:
        # Nothing in here awaits: a cancellation (the caller leaving) cannot cut it short.
        self._release()
        self._pool.give_back(self._conn)  # read to its end: good for another; else closed


class LbProxy:
    def __init__(self, balancer: Balancer) -> None:
        self._balancer = balancer
        self._pool = Pool(CONNECT_TIMEOUT_SECONDS)

    async def forward(self, endpoint: Endpoint, request: Forwarding) -> Upstream:
        """The worker's answer, once its head is in. Cancelled (the caller left), the request
        ends there: the connection to the worker is closed, and the lease is given back."""
        body = request.body if not isinstance(request.body, AsyncIterator) else _Body(request.body)
        chunked = isinstance(body, _Body) and not _has_length(request.headers)
        # The answer's head must come within the endpoint's execution timeout, and so must
        # each piece of its body after the one before.
        read_timeout = endpoint.spec.executionTimeoutMs / 1000
        for attempt in range(1, MAX_CONNECT_TRIES + 1):
            lease = await self._balancer.acquire(endpoint)
            head = request_head(lease.address, request, chunked)
            conn: Connection | None = None
            try:
                conn = await self._connection(lease.address, request.method, head, body, chunked)
                answer = await conn.head(read_timeout)
            except NotConnected as exc:
                self._balancer.release(lease, connection_failed=True)
                if (isinstance(body, _Body) and body.started) or attempt == MAX_CONNECT_TRIES:
                    raise BadGateway(
                        f"worker {lease.worker_id} of endpoint {endpoint.id} could not be "
                        f"reached: {exc}"
                    ) from None
                continue  # nothing reached that worker: another may take it
            except TimeoutError:
                _close(conn)
                self._balancer.release(lease)
                raise BadGateway(
                    f"worker {lease.worker_id} of endpoint {endpoint.id} did not answer within "
                    f"{read_timeout:g} s (executionTimeoutMs)"
                ) from None
            except UpstreamError as exc:
                _close(conn)
                self._balancer.release(lease, connection_failed=True)
                raise BadGateway(
                    f"worker {lease.worker_id} of endpoint {endpoint.id} failed the request: "
                    f"{type(exc).__name__}: {exc}"
                ) from None
            except BaseException:
                _close(conn)
                self._balancer.release(lease)
                raise
            return Upstream(self._balancer, lease, self._pool, conn, answer, read_timeout)
        raise AssertionError("unreachable: the last try raises")  # pragma: no cover

    async def _connection(
        self,
        address: str,
        method: str,
        head: bytes,
        body: bytes | _Body | None,
        chunked: bool,
    ) -> Connection:
        """A connection to ``address`` with the request sent on it: a pooled one if any is
        idle; when that one turns out closed by the worker before any answer (it closed it
        while idle) and the request can be sent again, a fresh one."""
        conn = self._pool.idle(address)
        if conn is not None:
            try:
                await conn.send(method, head, body, chunked)
                return conn
            except UpstreamError:
                conn.close()
                if isinstance(body, _Body) and body.started:
                    raise
            except BaseException:
                conn.close()
                raise
        conn = await self._pool.connect(address)
        try:
            await conn.send(method, head, body, chunked)
        except BaseException:
            conn.close()
            raise
        return conn

    async def aclose(self) -> None:
        self._pool.close()


def _close(conn: Connection | None) -> None:
    if conn is not None:
        conn.close()


#: What a path segment may hold unescaped (RFC 3986 pchar, and the separating slash).
PATH_SAFE = "/!$&'()*+,;=:@-._~"


def _named_by_connection(headers: Sequence[tuple[str, str]]) -> set[str]:
    """The headers a ``Connection`` header names: they concern this hop only (RFC 9110
    7.6.1), like the hop-by-hop ones."""
    named: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            named.update(token.strip().lower() for token in value.split(","))
    return named


def has_body(headers: Sequence[tuple[str, str]]) -> bool:
    """Whether a request with these headers has a body to pass on (a ``Content-Length`` above
    0, or a ``Transfer-Encoding``)."""
    for name, value in headers:
        lowered = name.lower()
        if lowered == "transfer-encoding" or (lowered == "content-length" and value.strip() != "0"):
            return True
    return False


def _has_length(headers: Sequence[tuple[str, str]]) -> bool:
    return any(name.lower() == "content-length" for name, _ in headers)


def wire_path(raw_path: bytes | None, full_path: str, path: str) -> str:
    """The path under the endpoint (``path``, decoded, the end of the request's decoded
    ``full_path``) as the caller escaped it in ``raw_path``: ``/a%2Fb`` stays one segment for
    the worker, as when it is called straight. The prefix before it (``/lb/{id}``) holds no
    escaped slash, so the raw path is cut after as many slashes; a raw path that does not
    decode to the same (or has nothing escaped) gives ``path`` escaped again."""
    if raw_path and b"%" in raw_path and full_path.endswith(path):
        slashes = full_path[: len(full_path) - len(path)].count("/")
        parts = raw_path.decode("latin-1").split("/", slashes + 1)
        if len(parts) == slashes + 2:
            raw = "/" + parts[-1]
            if unquote(raw) == path:
                # Escapes kept as they are; anything else a request line may not hold, escaped.
                return quote(raw, safe=PATH_SAFE + "%")
    return quote(path, safe=PATH_SAFE)


def request_head(address: str, request: Forwarding, chunked: bool) -> bytes:
    """The request line and headers for the worker, ending with the blank line: its path as
    the caller escaped it, its query byte for byte, the worker's own ``Host``, the caller's
    headers less what is not passed on, and skiff's ``X-Forwarded-*``."""
    target = request.path
    if request.query:
        target += "?" + request.query.decode("latin-1")
    lines = [f"{request.method} {target} HTTP/1.1", f"host: {address}"]
    lines += [f"{name}: {value}" for name, value in _forwarded_headers(request)]
    if chunked:
        lines.append("transfer-encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _forwarded_headers(request: Forwarding) -> list[tuple[str, str]]:
    named = _named_by_connection(request.headers)
    headers = [
        (n, v)
        for n, v in request.headers
        if (lowered := n.lower()) not in _NEVER_PASSED
        and lowered not in named
        and not lowered.startswith(FORWARDED_PREFIX)
    ]
    extra: Mapping[str, str | None] = {
        "x-forwarded-for": request.client,
        "x-forwarded-proto": request.scheme,
        "x-forwarded-host": request.host,
        "x-forwarded-prefix": request.prefix,
    }
    for name, value in extra.items():
        if value:
            headers.append((name, value))
    if request.lb_key is not None:
        headers.append((LB_KEY_HEADER, request.lb_key))
    return headers
