"""Job-completion webhooks: which URLs a delivery may reach, and the sender that POSTs the
deliveries the store keeps.

A delivery row is written in the same transaction that makes a job final (``store/sqlite.py``),
so a restart loses none; the sender picks up every due one, signs it with the owner's secret
(Standard Webhooks: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,<base64>``)
and POSTs it. A 200 ends a delivery; anything else is tried again, 3 attempts in all, 10 s
apart (``domain/webhooks.py``). Delivery is at least once: a receiver deduplicates on
``webhook-id``, which is the delivery id and stays the same across attempts.

Unless the operator allows private addresses, a webhook may only reach public ones. The host
is resolved when the URL is checked and again at every attempt, and the request then goes to
the address that was checked (``Host`` and TLS SNI keep the name), so a name that is re-pointed
at an inside address between the check and the connection cannot get a request through.

Hosts are looked up without a thread each (``NameLookups``): c-ares, through aiodns, reads
``/etc/hosts`` and asks the name servers of ``/etc/resolv.conf``, its one event thread watching
every query's socket, so a lookup that never gets an answer holds no thread. ``getaddrinfo`` in
the loop's default executor would hold one of the few threads every ``asyncio.to_thread`` in
the server shares until the system resolver gave up (10-25 s), whatever the caller's timeout: a
tenant naming random hosts under a name server that never answers stalled everyone. A user's
submissions have at most ``PER_USER_LOOKUPS`` hosts being looked up at once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any

import aiodns
import aiodns.error
import httpx
from attrs import define, field
from standardwebhooks import Webhook

from skiff.clock import Clock
from skiff.domain.jobs import Job
from skiff.domain.webhooks import is_public_address, next_attempt
from skiff.errors import Invalid
from skiff.services.host_addresses import HostAddresses, PeerAddresses, PeerHosts
from skiff.store.base import Store, WebhookDelivery

log = logging.getLogger(__name__)

#: Resolves ``(host, port)`` to IP address strings; ``NameLookups.resolve`` in the server.
Resolver = Callable[[str, int], Awaitable[list[str]]]

USER_AGENT = "skiff-webhooks/0.1"
#: How long a name lookup may take before the host counts as unresolvable.
DNS_TIMEOUT_SECONDS = 5.0
#: This host's addresses as the checks read them by default: one reading, every 30 s, for
#: the whole process.
_THIS_HOST = HostAddresses()
#: Hosts one user's submissions may have being looked up at once (submissions naming a host
#: already being looked up wait on that lookup and take no more); past it a submission is
#: refused at once rather than queue behind the user's lookups that do not end.
PER_USER_LOOKUPS = 4
#: c-ares tries each name server twice: the first try gets half of ``DNS_TIMEOUT_SECONDS``
#: (less once the server's answers are known to be quicker), the retry up to twice as long, so
#: a lookup nobody answers ends by itself about when its caller stops waiting, or soon after.
LOOKUP_TRIES = 2
#: Deliveries attempted at the same time.
CONCURRENCY = 16
#: Of those, one user's at most (a quarter): a user whose receivers answer slowly, or never
#: within the timeout, waits on its own deliveries, not on every other user's.
PER_USER_SHARE = 4
#: How long the sender idles between looks for due deliveries unless woken.
IDLE_SECONDS = 0.5
ALLOW_HINT = "an operator can allow it with SKIFF_WEBHOOK_ALLOW_PRIVATE=true"
#: Last errors are stored; keep them short.
MAX_ERROR_CHARS = 500


def _unique(addresses: Iterable[str]) -> list[str]:
    kept: list[str] = []
    for address in addresses:
        if address not in kept:
            kept.append(address)
    return kept


def _numeric(host: str, port: int) -> list[str] | None:
    """The address of a numeric host as ``getaddrinfo`` reads one (``127.1``, ``0x7f.1``,
    ``2130706433`` as well as the usual forms), or None for a name. ``AI_NUMERICHOST`` never
    asks a resolver, so this returns at once, on the loop."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError, ValueError):
        return None
    return _unique(str(sockaddr[0]) for *_, sockaddr in infos)


@define(eq=False, repr=False, slots=False)
class NameLookups:
    """Webhook hosts' addresses, looked up without a thread per lookup; made and closed by the
    webhook sender (``WebhookSender.aclose``).

    A numeric host is read as ``getaddrinfo`` reads it. A name goes to c-ares (aiodns): the
    hosts file, then the name servers, as ``/etc/nsswitch.conf`` and ``/etc/resolv.conf`` say.
    Its queries wait on its sockets, watched by its one event thread, never in a thread of the
    event loop's executor, and give up by themselves (``LOOKUP_TRIES``). Callers asking for a
    host while it is being looked up share that lookup. ``for_user`` caps how many hosts one
    user's submissions have being looked up at once (``PER_USER_LOOKUPS``)."""

    #: Name servers to ask, ``"127.0.0.1:5353"`` with a port; by default ``/etc/resolv.conf``'s.
    _nameservers: list[str] | None = None
    _per_user: int = PER_USER_LOOKUPS
    #: c-ares's first try at a name server.
    _try_seconds: float = DNS_TIMEOUT_SECONDS / 2
    #: Made on first use (it belongs to the loop that runs it).
    _resolver: aiodns.DNSResolver | None = field(init=False, default=None)
    #: host -> its lookup under way, shared by everyone asking for it meanwhile.
    _pending: dict[str, asyncio.Future[list[str]]] = field(init=False, factory=dict)
    #: user -> host -> how many of the user's checks are waiting on its lookup.
    _waiting: dict[str, dict[str, int]] = field(init=False, factory=dict)

    def for_user(self, user_id: str) -> Resolver:
        """``resolve`` for a check of the user's submission: refused at once (``Invalid``)
        while the user already has ``per_user`` other hosts being looked up."""

        async def resolve(host: str, port: int) -> list[str]:
            return await self.resolve(host, port, user_id)

        return resolve

    def under_way(self) -> int:
        """Lookups whose queries have not ended yet."""
        return len(self._pending)

    async def resolve(self, host: str, port: int, user_id: str | None = None) -> list[str]:
        """Every address ``host`` resolves to, in the order c-ares prefers them (RFC 6724, as
        ``getaddrinfo``); ``OSError`` if it resolves to none, ``TimeoutError`` if the name
        servers did not answer."""
        numeric = _numeric(host, port)
        if numeric is not None:
            return numeric
        if user_id is None:
            return await self._shared(host)
        hosts = self._waiting.get(user_id, {})
        if host not in hosts and len(hosts) >= self._per_user:
            raise Invalid(
                f"webhook host {host} cannot be resolved now: the webhook hosts of your"
                f" submissions already have {len(hosts)} lookups under way, the most one user"
                " may have at once; try again when they end",
                field="webhook",
            )
        hosts = self._waiting.setdefault(user_id, hosts)
        hosts[host] = hosts.get(host, 0) + 1
        try:
            return await self._shared(host)
        finally:
            hosts = self._waiting[user_id]
            hosts[host] -= 1
            if not hosts[host]:
                del hosts[host]
            if not hosts:
                del self._waiting[user_id]

    async def _shared(self, host: str) -> list[str]:
        lookup = self._pending.get(host)
        if lookup is None:
            lookup = asyncio.ensure_future(self._look_up(host))
            self._pending[host] = lookup
            lookup.add_done_callback(partial(self._ended, host))
        # A caller that stops waiting (its timeout) leaves the lookup to the others.
        return await asyncio.shield(lookup)

    def _ended(self, host: str, lookup: asyncio.Future[list[str]]) -> None:
        if self._pending.get(host) is lookup:
            del self._pending[host]
        if not lookup.cancelled():
            lookup.exception()  # retrieved: nobody may be waiting any more

    async def _look_up(self, host: str) -> list[str]:
        try:
            result = await self._channel().getaddrinfo(host, type=socket.SOCK_STREAM)
        except aiodns.error.DNSError as exc:
            code = exc.args[0] if exc.args else None
            if code == aiodns.error.ARES_ETIMEOUT:
                raise TimeoutError from None
            raise OSError(str(exc.args[1]) if len(exc.args) > 1 else str(exc)) from None
        return _unique(
            raw.decode() if isinstance(raw, bytes) else str(raw)
            for raw in (node.addr[0] for node in result.nodes)
        )

    def _channel(self) -> aiodns.DNSResolver:
        loop = asyncio.get_running_loop()
        if self._resolver is None or self._resolver.loop is not loop:
            self._resolver = aiodns.DNSResolver(
                self._nameservers, loop=loop, timeout=self._try_seconds, tries=LOOKUP_TRIES
            )
        return self._resolver

    async def aclose(self) -> None:
        """End the lookups under way (their callers get ``OSError``) and the resolver."""
        resolver, self._resolver = self._resolver, None
        if resolver is not None:
            await resolver.close()
        if self._pending:
            await asyncio.gather(*self._pending.values(), return_exceptions=True)


def _kind(address: str) -> str:
    """What makes an address non-public, for the message."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind, flag in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("unspecified", ip.is_unspecified),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
    ):
        if flag:
            return kind
    return "non-public"


def _inside(address: str, this_host: HostAddresses) -> str | None:
    """What makes ``address`` one a delivery must not reach ("a private address", "an address
    of this server"); None for a public address of another host."""
    if not is_public_address(address):
        return f"a {_kind(address)} address"
    if this_host.holds(address):
        return "an address of this server"
    return None


def _literal_ip(host: str) -> str | None:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    return host


def _parse(url: str) -> httpx.URL:
    """The URL as httpx will send it (one parser for checking and sending, so they cannot
    disagree about the host)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        raise Invalid("webhook must be an absolute http(s) URL", field="webhook") from None
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise Invalid("webhook must be an absolute http(s) URL", field="webhook")
    return parsed


async def _public_addresses(
    parsed: httpx.URL, resolve: Resolver, this_host: HostAddresses
) -> list[str]:
    """The addresses the URL's host stands for, all public and none of this host's own, or
    ``Invalid`` saying why not."""
    host = parsed.raw_host.decode("ascii")
    literal = _literal_ip(host)
    if literal is not None:
        if (inside := _inside(literal, this_host)) is not None:
            raise Invalid(f"webhook host {parsed.host} is {inside}; {ALLOW_HINT}", field="webhook")
        return [literal]
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        async with asyncio.timeout(DNS_TIMEOUT_SECONDS):
            addresses = await resolve(host, port)
    except TimeoutError:
        raise Invalid(
            f"webhook host {parsed.host} cannot be resolved: the lookup took longer than"
            f" {DNS_TIMEOUT_SECONDS:g} s",
            field="webhook",
        ) from None
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise Invalid(
            f"webhook host {parsed.host} cannot be resolved ({reason}); check the name",
            field="webhook",
        ) from None
    if not addresses:
        raise Invalid(
            f"webhook host {parsed.host} cannot be resolved (no addresses); check the name",
            field="webhook",
        )
    for address in addresses:
        if (inside := _inside(address, this_host)) is not None:
            raise Invalid(
                f"webhook host {parsed.host} resolves to {address}, {inside}; {ALLOW_HINT}",
                field="webhook",
            )
    return addresses


async def check_webhook_url(
    url: str, allow_private: bool, resolve: Resolver, this_host: HostAddresses | None = None
) -> None:
    """Refuse (``Invalid``, field ``webhook``) a URL that is not absolute http(s), or, unless
    ``allow_private``, whose host is a non-public IP or one of ``this_host``'s (by default this
    host's interfaces'), resolves to any such address, or does not resolve at all. With
    ``allow_private`` no lookup is made."""
    parsed = _parse(url)
    if not allow_private:
        await _public_addresses(parsed, resolve, this_host or _THIS_HOST)


def _short(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def _describe(exc: BaseException) -> str:
    """``last_error`` for an attempt that got no HTTP answer."""
    if isinstance(exc, Invalid):
        return exc.message
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        return "timed out"
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return f"could not connect: {detail}"
    return f"{type(exc).__name__}: {detail}"


@define(eq=False, repr=False, slots=False)
class Slots:
    """The deliveries being attempted, at most ``size`` at once and ``per_user`` of one
    user's. Each slot is taken again as soon as it is free (``WebhookSender.fill``), so one
    slow receiver holds up one slot, not a pass of everyone's deliveries."""

    size: int
    per_user: int
    _freed: Callable[[], None]
    #: delivery id -> (its user, its attempt).
    flying: dict[str, tuple[str, asyncio.Task[None]]] = field(init=False, factory=dict)

    def free(self) -> int:
        return self.size - len(self.flying)

    def takes(self, delivery: WebhookDelivery) -> bool:
        """Whether ``delivery`` may start now: not in flight, a slot free, its user's share
        not all taken."""
        if delivery.id in self.flying or self.free() <= 0:
            return False
        users = sum(1 for user, _ in self.flying.values() if user == delivery.user_id)
        return users < self.per_user

    def start(self, delivery: WebhookDelivery, attempt: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(attempt)
        self.flying[delivery.id] = (delivery.user_id, task)

        def done(_task: asyncio.Task[None]) -> None:
            self.flying.pop(delivery.id, None)
            self._freed()

        task.add_done_callback(done)

    async def drain(self) -> None:
        """Wait for every attempt in flight to end."""
        while self.flying:
            await asyncio.gather(*(task for _, task in list(self.flying.values())))

    async def cancel(self) -> None:
        tasks = [task for _, task in self.flying.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@define(eq=False, repr=False, slots=False)
class WebhookSender:
    """Attempts due deliveries: ``run`` forever in the server, ``pass_once`` in tests."""

    _store: Store
    _clock: Clock
    #: An ``httpx.AsyncClient`` (used as given, closed by its owner) or a factory for one; by
    #: default the sender makes its own (no redirects, no proxies from the environment, no
    #: kept-alive connections) and ``aclose`` closes it.
    _given: httpx.AsyncClient | Callable[[], httpx.AsyncClient] | None = field(
        default=None, alias="client"
    )
    _allow_private: bool = False
    _timeout: float = 10.0
    _batch: int = 50
    #: Looks up hosts for deliveries instead of ``lookups`` (tests).
    _resolve: Resolver | None = None
    _concurrency: int = CONCURRENCY
    #: Looks up webhook hosts, for submissions' checks (``guard``) and deliveries; closed by
    #: ``aclose``.
    _lookups: NameLookups = field(factory=NameLookups)
    #: This host's own addresses, and the other replicas' (``peer_addresses``), which no delivery
    #: may reach (``host_addresses.py``); the sender's own, as the replicas it is told of are.
    _this_host: HostAddresses = field(factory=HostAddresses)
    #: Made by ``run`` (asyncio objects belong to the loop that runs them).
    _wake: asyncio.Event | None = field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        given = self._given
        self._client: httpx.AsyncClient | None = None
        self._factory: Callable[[], httpx.AsyncClient] | None = None
        self._owns_client = not isinstance(given, httpx.AsyncClient)
        if isinstance(given, httpx.AsyncClient):
            self._client = given
        else:
            self._factory = given

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            if self._factory is not None:
                self._client = self._factory()
            else:
                self._client = httpx.AsyncClient(
                    follow_redirects=False,
                    trust_env=False,
                    timeout=self._timeout,
                    limits=httpx.Limits(max_keepalive_connections=0),
                )
        return self._client

    async def aclose(self) -> None:
        """End the name lookups, and close the HTTP client if the sender made it."""
        await self._lookups.aclose()
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    def peer_addresses(
        self, peers: PeerHosts, publish: Callable[[], Awaitable[None]] | None = None
    ) -> PeerAddresses:
        """What makes the sender refuse the other replicas' addresses too, as ``peers`` lists
        them (``host_addresses.PeerAddresses``; their URLs' names looked up as a delivery's),
        ``publish`` telling them this host's at each round."""
        return PeerAddresses(self._this_host, peers, self._lookups.resolve, publish=publish)

    async def guard(self, url: str, user_id: str) -> None:
        """Refuse a webhook URL that user ``user_id`` submits if a delivery must not reach it
        (``check_webhook_url``); the user's lookups under way are capped (``NameLookups``)."""
        await check_webhook_url(
            url, self._allow_private, self._lookups.for_user(user_id), self._this_host
        )

    def wake(self) -> None:
        """Start the next pass now (a job just finished) instead of after the idle period."""
        if self._wake is not None:
            self._wake.set()

    def job_finished(self, job: Job) -> None:
        """A job became final (``JobEvents``): one with a webhook has a delivery due now."""
        if job.webhook is not None:
            self.wake()

    async def run(self) -> None:
        """Attempt due deliveries until cancelled: a free slot takes the next due delivery as
        soon as it is free; with nothing to do, look again after ``IDLE_SECONDS`` or when
        woken (a job finished, a slot freed)."""
        self._wake = wake = asyncio.Event()
        slots = self._slots(wake.set)
        try:
            while True:
                wake.clear()
                try:
                    await self.fill(slots)
                except Exception:
                    log.exception("looking for due webhook deliveries failed; trying again")
                try:
                    async with asyncio.timeout(IDLE_SECONDS):
                        await wake.wait()
                except TimeoutError:
                    pass
        finally:
            await slots.cancel()

    async def fill(self, slots: Slots) -> int:
        """Start attempts of due deliveries in the free slots, in turns between users (the
        store's order); returns how many were started."""
        if slots.free() <= 0:
            return 0
        # Those in flight are still due until their attempt is recorded: ask for as many more.
        limit = min(self._batch, slots.free()) + len(slots.flying)
        due = await self._store.due_webhook_deliveries(self._clock.now(), limit)
        started = 0
        for delivery in due:
            if slots.takes(delivery):
                slots.start(delivery, self._attempt_logged(delivery))
                started += 1
        return started

    async def pass_once(self) -> int:
        """Attempt the deliveries due now (up to ``batch``) through the slots, as ``run``
        does, and wait for them all; returns how many were attempted."""
        slots = self._slots(lambda: None)
        attempted = 0
        while attempted < self._batch:
            started = await self.fill(slots)
            if not started and not slots.flying:
                break
            attempted += started
            if slots.flying:
                await asyncio.wait(
                    [task for _, task in slots.flying.values()],
                    return_when=asyncio.FIRST_COMPLETED,
                )
        await slots.drain()
        return attempted

    def _slots(self, freed: Callable[[], None]) -> Slots:
        return Slots(self._concurrency, max(1, self._concurrency // PER_USER_SHARE), freed)

    async def _attempt_logged(self, delivery: WebhookDelivery) -> None:
        try:
            await self.attempt(delivery)
        except Exception:
            log.exception("webhook delivery %s could not be recorded", delivery.id)

    async def attempt(self, delivery: WebhookDelivery) -> None:
        """One attempt at one delivery, recorded in the store; raises only if recording fails."""
        error: str | None
        try:
            async with asyncio.timeout(self._timeout):
                status = await self._post(delivery)
        except Exception as exc:
            error = _short(_describe(exc))
        else:
            if status == 200:
                await self._store.record_webhook_attempt(
                    delivery.id, "delivered", None, self._clock.now(), None
                )
                return
            error = f"HTTP {status}"
            if status in (301, 302, 303, 307, 308):
                error += " (redirects are not followed)"
        now = self._clock.now()
        retry_at = next_attempt(delivery.attempts + 1, now)
        if retry_at is None:
            log.warning(
                "webhook delivery %s for job %s failed after %d attempts: %s",
                delivery.id,
                delivery.job_id,
                delivery.attempts + 1,
                error,
            )
            await self._store.record_webhook_attempt(delivery.id, "failed", error, now, None)
        else:
            await self._store.record_webhook_attempt(delivery.id, "pending", error, now, retry_at)

    async def _post(self, delivery: WebhookDelivery) -> int:
        """POST the signed payload; the receiver's status code (its body is not read)."""
        parsed = _parse(delivery.url)
        resolve = self._resolve or self._lookups.resolve
        addresses = (
            [] if self._allow_private else await _public_addresses(parsed, resolve, self._this_host)
        )
        secret = delivery.secret
        if secret is None:
            try:
                secret = await self._store.webhook_secret(delivery.user_id)
            except KeyError:
                raise Invalid("the job's owner no longer exists", field="webhook") from None
        timestamp = int(self._clock.now())
        signature = Webhook(secret).sign(
            delivery.id, dt.datetime.fromtimestamp(timestamp, dt.UTC), delivery.payload
        )
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "webhook-id": delivery.id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature,
        }
        body = delivery.payload.encode()
        client = self._http()
        targets: list[tuple[httpx.URL, dict[str, Any]]] = [(parsed, {})]
        if addresses:
            # Connect to an address that was just checked; the name stays in Host and TLS SNI.
            headers["Host"] = parsed.netloc.decode("ascii")
            sni = {"sni_hostname": parsed.raw_host.decode("ascii")}
            targets = [(parsed.copy_with(host=address), sni) for address in addresses]
        last: httpx.TransportError | None = None
        for url, extensions in targets:
            request = client.build_request(
                "POST", url, content=body, headers=headers, extensions=extensions
            )
            try:
                response = await client.send(request, stream=True, follow_redirects=False)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last = exc  # nothing was sent: the next address may answer
                continue
            await response.aclose()
            return response.status_code
        assert last is not None
        raise last

    # -- the owner's signing secret -------------------------------------------------------
    async def secret(self, user_id: str) -> str:
        """The user's signing secret (``whsec_...``), made on first use."""
        return await self._store.webhook_secret(user_id)

    async def rotate_secret(self, user_id: str) -> str:
        """A new signing secret; attempts from now on (retries included) are signed with it."""
        return await self._store.webhook_secret(user_id, rotate=True)
