"""A load-balancing worker that passes its health check and then never finishes an answer: the
worker of the issue where callers that gave up left their sockets to it open for the endpoint's
whole ``executionTimeoutMs``.

``GET /ping``: 200 (ready). ``GET /held``: how many requests it holds whose connection is still
open, for a test to ask it directly on its port (printed at start), not through the proxy,
where the question would count against the endpoint's cap. ``/drip``: the head of a 200 and one
piece of its body, then nothing more. Any other path: no answer at all. ``/drip`` and the rest
are held until their connection closes.

A plain ASGI app on uvicorn: nothing between the connection and the count.
"""

from __future__ import annotations

import os
from typing import Any

import uvicorn

PORT = int(os.environ["PORT"])
#: What it prints once it listens, before its port.
LISTENING = "lb mute worker listening on "

held = 0


async def answer(send: Any, body: bytes) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    global held
    if scope["type"] != "http":
        return  # lifespan: nothing to set up
    if scope["path"] == "/ping":
        await answer(send, b'{"status":"healthy"}')
        return
    if scope["path"] == "/held":
        await answer(send, str(held).encode())
        return
    held += 1
    try:
        if scope["path"] == "/drip":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"data: 0\n\n", "more_body": True})
        # uvicorn says http.disconnect once the connection is closed (the body's pieces, if
        # any, come first).
        while (await receive())["type"] != "http.disconnect":
            pass
    finally:
        held -= 1


if __name__ == "__main__":
    print(f"{LISTENING}{PORT}", flush=True)
    uvicorn.run(app, host="0.0.0.0", port=PORT, log_level="warning", lifespan="off")
