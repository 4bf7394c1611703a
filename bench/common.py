"""Load specs shared by the benchmarks: the same body and client settings on both sides."""

from __future__ import annotations

import orjson

from bench.load import LoadSpec
from bench.servers import Launched, Skiff

#: The job input every benchmark submits: small, like a typical request's.
BODY = orjson.dumps({"input": {"prompt": "bench", "n": 1}}).decode()


def skiff_load(
    server: Skiff, method: str, paths: list[str], requests: int, connections: int, **extra: object
) -> LoadSpec:
    """A load on skiff's job API, with the administrator key (``Authorization: Bearer``)."""
    return LoadSpec(
        host="127.0.0.1",
        port=server.port,
        method=method,
        paths=paths,
        requests=requests,
        connections=connections,
        body=BODY if method == "POST" else None,
        headers={"Authorization": f"Bearer {server.key}"},
        **extra,  # type: ignore[arg-type]
    )


def reference_load(
    server: Launched,
    method: str,
    paths: list[str],
    requests: int,
    connections: int,
    body: str | None = BODY,
    **extra: object,
) -> LoadSpec:
    """The same load on the reference, which takes no key."""
    return LoadSpec(
        host="127.0.0.1",
        port=server.port,
        method=method,
        paths=paths,
        requests=requests,
        connections=connections,
        body=body,
        **extra,  # type: ignore[arg-type]
    )
