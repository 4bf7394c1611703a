"""A name server for tests, on a UDP port of ``127.0.0.1``: it answers A and AAAA queries from a
table, says other names do not exist, and never answers names under ``SILENT``, as a name server
that never answers does. Point a resolver at ``address`` (c-ares takes ``host:port``)."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

#: Names under this suffix get no answer at all.
SILENT = ".silent.test"
QTYPE_AAAA = 28


class NameServer(asyncio.DatagramProtocol):
    """Answers from ``records`` (name -> addresses, IPv4 and IPv6 mixed); remembers every name
    asked, in order."""

    def __init__(self, records: dict[str, list[str]]) -> None:
        self.records = records
        self.asked: list[str] = []
        self._heard = asyncio.Event()
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)

    @property
    def address(self) -> str:
        assert self._transport is not None
        host, port = self._transport.get_extra_info("sockname")[:2]
        return f"{host}:{port}"

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        labels: list[bytes] = []
        i = 12
        while data[i]:
            labels.append(data[i + 1 : i + 1 + data[i]])
            i += 1 + data[i]
        qtype = struct.unpack("!H", data[i + 1 : i + 3])[0]
        question = data[12 : i + 5]
        name = b".".join(labels).decode().lower()
        self.asked.append(name)
        self._heard.set()
        if name.endswith(SILENT):
            return
        rdata = [
            socket.inet_pton(socket.AF_INET6 if ":" in address else socket.AF_INET, address)
            for address in self.records.get(name, [])
            if (":" in address) == (qtype == QTYPE_AAAA)
        ]
        rcode = 0 if name in self.records else 3  # NXDOMAIN
        header = data[:2] + struct.pack("!HHHHH", 0x8180 | rcode, 1, len(rdata), 0, 0)
        answers = b"".join(
            b"\xc0\x0c" + struct.pack("!HHIH", qtype, 1, 60, len(r)) + r for r in rdata
        )
        assert self._transport is not None
        self._transport.sendto(header + question + answers, addr)

    async def asked_for(self, *names: str) -> None:
        """Return once every one of ``names`` has been asked."""
        while not set(names) <= set(self.asked):
            self._heard.clear()
            await self._heard.wait()


@asynccontextmanager
async def serving(records: dict[str, list[str]]) -> AsyncIterator[NameServer]:
    transport, server = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: NameServer(dict(records)), local_addr=("127.0.0.1", 0)
    )
    try:
        yield server
    finally:
        transport.close()
