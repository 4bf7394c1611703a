"""``python -m skiff.flash_worker.lb``: the Flash worker of a load-balanced Flash endpoint (the
``runpod/flash-lb`` images). runpod-flash's live path calls such an endpoint over HTTP instead
of through the queue: ``POST /execute`` with the same ``FunctionRequest`` a queue-based call
sends as its job's input, answered with the ``FunctionResponse`` at once. ``GET /ping`` is the
load balancer's health check, on ``PORT_HEALTH`` as well when it differs from ``PORT``.

It serves with aiohttp, which the runpod SDK brings, and runs calls one at a time through the
same handler as the queue-based worker (``handler.py``), on a thread of their own with an event
loop of its own: a call that blocks (a synchronous function, a dependency's install) holds that
thread, while the server's loop goes on answering ``/ping``, which skiff's health check asks
(a worker that stops answering it is ended). The hosted image runs a synchronous function on a
thread as well (FastAPI's thread pool).

``/execute`` runs the code it is sent, so it answers only skiff's proxy: a process worker listens
on the host's loopback, where another tenant's code can reach it too. skiff gives the worker
``SKIFF_LB_KEY`` and sends every request it proxies with that value in ``X-Skiff-Lb-Key``
(``skiff.domain.keys.lb_key``); a request without it is refused (403). Run outside skiff (no
``SKIFF_LB_KEY``), it answers anyone, as the image does on the hosted platform.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import os
import threading
from typing import Any

from aiohttp import web

from .handler import handle

#: The largest request body taken (a request carries the function's source, its local modules
#: and its pickled arguments).
MAX_BODY_BYTES = 64 * 1024 * 1024
#: As ``skiff.domain.keys`` names them (the worker does not import the server's modules).
LB_KEY_VARIABLE = "SKIFF_LB_KEY"
LB_KEY_HEADER = "X-Skiff-Lb-Key"


@functools.cache
def _call_loop() -> asyncio.AbstractEventLoop:
    """The event loop calls run on, on a thread of its own: made at the first call (only the
    server's loop asks, so once)."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="flash-calls", daemon=True).start()
    return loop


def _from_skiffs_proxy(request: web.Request) -> bool:
    expected = os.environ.get(LB_KEY_VARIABLE)
    if not expected:
        return True
    sent = request.headers.get(LB_KEY_HEADER, "")
    return hmac.compare_digest(expected.encode(), sent.encode("utf-8", "replace"))


async def execute(request: web.Request) -> web.Response:
    if not _from_skiffs_proxy(request):
        return web.json_response(
            {
                "success": False,
                "error": "Forbidden: this worker runs only what skiff's proxy sends it "
                "(call the endpoint through skiff)",
            },
            status=403,
        )
    try:
        body: Any = json.loads(await request.read())
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return web.json_response(
            {"success": False, "error": f"BadRequest: the body is not JSON: {exc}"}, status=400
        )
    job = {"id": request.path, "input": body}
    answer = asyncio.run_coroutine_threadsafe(handle(job), _call_loop())
    return web.json_response(await asyncio.wrap_future(answer))


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
