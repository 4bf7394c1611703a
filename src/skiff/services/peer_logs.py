"""Worker logs across replicas: asking the other live replicas for their lines, as
``/v1/endpoints/{id}/logs`` with the caller's own credentials.

A worker's log is a file on the host of the replica that started it (the leader, or an earlier
leader still alive as a follower); ``EndpointLogs`` (``logs.py``) decides whom to ask. Replicas
asked on another's behalf answer from their own files only (``LOCAL_HEADER``), so a request is
never passed on twice.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson

from skiff.closing_stream import ClosingStream
from skiff.cluster.base import Cluster, ClusterUnavailable
from skiff.domain.logs import LogLine, LogQuery, parse_time
from skiff.errors import BadGateway, NotFound, SkiffError, TooManyRequests, Unauthorized

log = logging.getLogger(__name__)

#: What a caller refused for holding too many followed logs is told to wait.
RETRY_AFTER_SECONDS = 10

#: Set on a request one replica makes to another: answer from your own files only.
LOCAL_HEADER = "x-skiff-local-logs"
#: A read of lines: answered within seconds or left out.
_LINES_TIMEOUT = httpx.Timeout(10.0)
#: A relayed follow: open as long as its caller reads it.
_FOLLOW_TIMEOUT = httpx.Timeout(10.0, read=None)


class PeerLogs:
    """Two clients, so that neither kind of request waits on the other's connections: reads of
    lines (short; httpx's pool of 100), and relayed follows (each open as long as its reader,
    bounded per user by ``logs.FollowSlots``, so their pool is not: one user's follows holding
    a shared pool's every connection left every other user's reads without lines)."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._client: httpx.AsyncClient | None = None
        self._follow_client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=_LINES_TIMEOUT)
        return self._client

    def _follows(self) -> httpx.AsyncClient:
        if self._follow_client is None:
            self._follow_client = httpx.AsyncClient(
                timeout=_FOLLOW_TIMEOUT,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
            )
        return self._follow_client

    async def others(self) -> list[str]:
        """Base URLs of the other live replicas (none with one replica, or when the cluster
        cannot tell right now: then this replica answers alone rather than not at all)."""
        try:
            peers = await self._cluster.peers()
        except ClusterUnavailable:
            return []
        return [url for rid, url in peers.items() if rid != self._cluster.replica_id]

    async def leader_url(self) -> str | None:
        """The leader's base URL when it is another replica."""
        try:
            leader = await self._cluster.leader()
        except ClusterUnavailable:
            return None
        if leader is None or leader[0] == self._cluster.replica_id:
            return None
        return leader[1]

    async def lines(self, query: LogQuery, authorization: str | None) -> list[LogLine]:
        """Every other replica's lines for this log request (a replica that does not answer
        is left out and logged: its lines are unavailable, not the whole request)."""
        found: list[LogLine] = []
        path = _path(query.endpoint_id)
        params = _query(query, follow=False)
        for url in await self.others():
            try:
                response = await self._http().get(
                    url + path, params=params, headers=_headers(authorization)
                )
            except httpx.HTTPError as exc:
                log.warning("replica %s did not answer a log request: %s", url, exc)
                continue
            if response.status_code == 200:
                found.extend(map(_line, response.json().get("lines", [])))
            elif response.status_code != 404:
                log.warning("replica %s answered a log request with %s", url, response.status_code)
        return found

    async def follow(
        self, url: str, query: LogQuery, authorization: str | None
    ) -> AsyncIterator[bytes]:
        """A followed log from the replica at ``url``, streamed as it sends it. Opened here,
        before the caller's answer begins: the replica's refusal (its 404, 401, 429) is the
        caller's answer too, not lines of a stream that looked fine."""
        params = _query(query, follow=True)
        opened = contextlib.AsyncExitStack()
        try:
            response = await opened.enter_async_context(
                self._follows().stream(
                    "GET",
                    url + _path(query.endpoint_id),
                    params=params,
                    headers=_headers(authorization),
                )
            )
        except httpx.HTTPError as exc:
            raise BadGateway(f"the replica that runs the workers did not answer: {exc}") from None
        if response.status_code != 200:
            async with opened:
                raise _refused(response.status_code, await response.aread())
        return ClosingStream(response.aiter_bytes(), opened)

    async def aclose(self) -> None:
        for client in (self._client, self._follow_client):
            if client is not None:
                await client.aclose()
        self._client = self._follow_client = None


def _refused(status: int, body: bytes) -> SkiffError:
    """Another replica's refusal of a follow, as this replica's answer."""
    try:
        message = str(orjson.loads(body).get("message") or "")
    except (orjson.JSONDecodeError, AttributeError):
        message = ""
    if status == 404:
        return NotFound(message or "not found")
    if status == 401:
        return Unauthorized(message or "the key was refused")
    if status == 429:
        return TooManyRequests(message or "too many followed logs", RETRY_AFTER_SECONDS)
    return BadGateway(f"the replica that runs the workers answered {status}")


def _headers(authorization: str | None) -> dict[str, str]:
    headers = {LOCAL_HEADER: "1"}
    if authorization:
        headers["Authorization"] = authorization
    return headers


def _path(endpoint_id: str) -> str:
    return f"/v1/endpoints/{endpoint_id}/logs"


def _query(query: LogQuery, follow: bool) -> dict[str, str]:
    params = {"tail": str(query.tail)}
    if query.worker is not None:
        params["worker"] = query.worker
    if query.since is not None:
        params["since"] = repr(query.since)  # epoch seconds, read back to the same float
    if follow:
        params["follow"] = "true"
    return params


def _line(item: dict[str, Any]) -> LogLine:
    """A line as another replica rendered it (``{"worker", "time", "line"}``)."""
    stamp = item.get("time")
    try:
        at = parse_time(stamp) if isinstance(stamp, str) else None
    except ValueError:
        at = None
    return LogLine(str(item.get("worker")), at, str(item.get("line")))
