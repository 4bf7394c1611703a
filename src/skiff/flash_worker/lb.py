"""``python -m skiff.flash_worker.lb``: the Flash worker of a load-balanced Flash endpoint (the
``runpod/flash-lb`` images). runpod-flash's live path calls such an endpoint over HTTP instead
of through the queue: ``POST /execute`` with the same ``FunctionRequest`` a queue-based call
sends as its job's input, answered with the ``FunctionResponse`` at once. ``GET /ping`` is the
load balancer's health check, on ``PORT_HEALTH`` as well when it differs from ``PORT``.

It serves with aiohttp, which the runpod SDK brings, and runs calls one at a time through the
same handler as the queue-based worker (``handler.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from aiohttp import web

from .handler import handle

#: The largest request body taken (a request carries the function's source, its local modules
#: and its pickled arguments).
MAX_BODY_BYTES = 64 * 1024 * 1024


async def execute(request: web.Request) -> web.Response:
    try:
        body: Any = json.loads(await request.read())
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return web.json_response(
            {"success": False, "error": f"BadRequest: the body is not JSON: {exc}"}, status=400
        )
    return web.json_response(await handle({"id": request.path, "input": body}))


async def ping(_request: web.Request) -> web.Response:
    return web.json_response({"status": "healthy"})


def app() -> web.Application:
    application = web.Application(client_max_size=MAX_BODY_BYTES)
    application.router.add_post("/execute", execute)
    application.router.add_get("/ping", ping)
    return application


async def _serve(host: str, ports: list[int]) -> None:
    runner = web.AppRunner(app(), access_log=None)
    await runner.setup()
    for port in dict.fromkeys(ports):
        await web.TCPSite(runner, host, port).start()
    print(f"flash worker: serving /execute on {host}:{ports[0]}", flush=True)
    try:
        await asyncio.Event().wait()  # until the worker is stopped
    finally:
        await runner.cleanup()


def main() -> None:
    port = int(os.environ.get("PORT", "80"))
    health = int(os.environ.get("PORT_HEALTH", str(port)))
    # In a container, every interface of its own; a process worker is told the loopback (it
    # shares the host's network, and skiff proxies to it there).
    host = os.environ.get("SKIFF_FLASH_HOST", "0.0.0.0")
    asyncio.run(_serve(host, [port, health]))


if __name__ == "__main__":
    main()
